"""benchmarks.train_step.recipe_step_cost, the step ``scripts/gpu_smoke.sh`` times for the released
recipe on a GPU, run here on the CPU with the smoke script's own overrides (random backbone weights,
MiniLM's bank, no HICO-DET scope) at a small side and batch: the recipe's settings reach the step."""

from benchmarks.train_step import recipe_step_cost

SMOKE = ["model.backbone.pretrained=false", "data.text_encoder=minilm", "model.text_dim=384", "data.source_scopes={}"]


def test_the_released_step_runs_with_the_smoke_overrides():
    got = recipe_step_cost("train_jobs/configs/released.yaml", "cpu", steps=1, warmup=0,
                           overrides=[*SMOKE, "model.backbone.img_size=32", "optim.batch_size=2"])
    assert (got["recipe"], got["device"], got["batch_size"], got["side"]) == ("released", "cpu", 2, 32)
    assert got["amp"] is False and got["peak_memory_gib"] is None  # bf16 autocast and memory: CUDA only
    assert got["step_ms"] > 0 and got["gflop_per_step"] > 0 and got["tflops"] > 0
