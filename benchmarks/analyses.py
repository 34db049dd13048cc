"""Wall time of each seed-001 analysis command (issue 31) on a demo-sized synthetic test split.

The model is the demo recipe's architecture (``train_jobs/configs/cpu_small.yaml``: ViT-tiny, 3
blocks, 96 px, d = 128) with random weights, so the figure does not depend on a trained checkpoint
being present; the work per scene is the same as for the trained demo model. The split is 24
scenes with ``--quick`` (the demo world has 40 scenes, 4 of them its test split) and 200 without;
the label-dependence majority table is fitted on 150 (300) training scenes. Baseline, measured in the same
run: one plain forward pass of the same model over the same batches (the least any of the model
analyses must do); each analysis is also given as a ratio to it.

The OvR-SGG job (eval_jobs.ovr_sgg) scores two checkpoints of that model (its bank with and without the
held-out forms) on the same number of scenes written to disk, in-process.

Figures: ``label_dependence_s``, ``attribution_s``, ``representation_s``, ``ovr_sgg_s`` (the whole command:
inputs, model runs, tables, figure), ``max_analysis_s`` (the slowest; goal under 60 s on 2 cores),
``forward_s`` and ``<analysis>_over_forward``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks._common import best_of, run_benchmark

ARCHITECTURE = str(Path(__file__).resolve().parents[1] / "train_jobs" / "configs" / "cpu_small.yaml")


def measure(quick: bool) -> dict[str, float]:
    import torch

    from eval_jobs.analysis_inputs import ModelSourceConfig, ScenesConfig, load_analysis_model, scene_batches
    from eval_jobs.attribution import AttributionConfig, main as attribution
    from eval_jobs.ovr_sgg import main as ovr_sgg
    from eval_jobs.label_dependence import LabelDependenceConfig, main as label_dependence
    from eval_jobs.representation import RepresentationConfig, main as representation

    torch.set_num_threads(2)
    scenes = ScenesConfig(images=24 if quick else 200, batch_size=8)
    model_a = ModelSourceConfig(architecture=ARCHITECTURE, seed=0)
    model_b = ModelSourceConfig(architecture=ARCHITECTURE, seed=1)
    model, bank, strings = load_analysis_model(model_a)
    batches = scene_batches(scenes, model, bank, strings)

    def forward() -> None:
        with torch.no_grad():
            for b in batches:
                model(b.images, b.boxes, b.box_valid, b.bank, force=b.force)

    forward()  # warm
    t_fwd = best_of(forward, 1 if quick else 5)
    figures: dict[str, float] = {"scenes": scenes.images, "edges": sum(len(r) for b in batches for r in b.relations),
                                 "forward_s": round(t_fwd, 3)}
    with tempfile.TemporaryDirectory() as tmp:
        ovr = _ovr_inputs(Path(tmp), model, bank, strings, scenes.images)
        jobs = {
            "label_dependence": lambda: label_dependence(LabelDependenceConfig(
                model=model_a, scenes=scenes, train_images=150 if quick else 300, out_dir=f"{tmp}/ld")),
            "attribution": lambda: attribution(AttributionConfig(model=model_a, scenes=scenes, out_dir=f"{tmp}/at")),
            "representation": lambda: representation(RepresentationConfig(
                a=model_a, b=model_b, scenes=scenes, out_dir=f"{tmp}/rep")),
            "ovr_sgg": lambda: ovr_sgg(ovr.model_copy(update={"out_dir": f"{tmp}/ovr"})),
        }
        for name, job in jobs.items():
            t0 = time.perf_counter()
            job()
            figures[f"{name}_s"] = round(time.perf_counter() - t0, 3)
    for name in jobs:
        figures[f"{name}_over_forward"] = round(figures[f"{name}_s"] / t_fwd, 2)
    figures["max_analysis_s"] = max(figures[f"{name}_s"] for name in jobs)
    return figures


def _ovr_inputs(tmp: Path, model, bank, strings, images: int):
    """The OvR-SGG job's inputs: the same model saved as a checkpoint twice (its full bank, and the bank
    without the held-out forms, as a compliant run would have it) and a test split of ``images`` scenes
    written to disk (the job reads a corpus folder)."""
    from eval_jobs.ovr_sgg import OvRSGGConfig
    from relate.checkpoint import save_checkpoint
    from relate.data.predicate_split import held_out, load_predicate_split
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus
    from relate.text.bank import TextBank

    world = write_corpus(tmp / "world", SyntheticConfig(seed=0, num_scenes=images), split=lambda i: "test")
    out = held_out(load_predicate_split("synthetic_ovr"))
    keep = [i for i, s in enumerate(strings) if not out.removes(s)]
    full = TextBank(strings=tuple(strings), matrix=bank.numpy(), encoder="minilm")
    clean = TextBank(strings=tuple(strings[i] for i in keep), matrix=bank.numpy()[keep], encoder="minilm")
    systems = [{"name": name, "checkpoint": str(save_checkpoint(tmp / name, model, b))}
               for name, b in (("seen", full), ("held_out", clean))]
    return OvRSGGConfig.model_validate({"split": "synthetic_ovr", "use_ray": False, "systems": systems,
                                        "benchmark": {"reader": "corpus", "path": str(world), "fold": "lexicon"}})


if __name__ == "__main__":
    run_benchmark("analyses", measure)
