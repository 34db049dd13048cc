#!/usr/bin/env bash
# GPU smoke test: what CPU-only CI cannot check. Run on a GPU machine from the repository root:
#   bash scripts/gpu_smoke.sh            (PYTHON=... to pick the interpreter; default .venv/bin/python)
# Checks, each printed as PASS / SKIP / FAIL with what was checked:
#   1. CUDA through torch: device, bf16 matmul against a float64 reference.
#   2. vLLM through ray.data.llm (only if vllm is installed): our own annotation processor
#      (scripts/vllm_smoke.py: pipelines.annotate with vlm.backend=vllm, built by ray.data.llm's
#      build_processor with our prompt/image and parse stages) annotates 4 synthetic images with
#      a tiny vision-language model, Qwen/Qwen2-VL-2B-Instruct; every call must be answered and
#      the run complete. SMOKE_VLM_MODEL=<local path or hub id> picks another VLM. The model must
#      be in the Hugging Face cache unless SMOKE_ALLOW_DOWNLOAD=1 lets this step reach the hub.
#   3. The relation model (released architecture, random weights) at batch 1 on the GPU, bf16,
#      CUDA-event timed, against the paper's relation-head latency (seed 001, Table 34) for scale.
#   3b. The released recipe's training step (batch 32 at 448 px, bf16 autocast, AdamW), median ms, counted
#      GFLOP, TFLOP/s and peak memory (benchmarks.train_step.recipe_step_cost).
#   4. tests/gpu, if it holds tests.
# Exit status: 0 if nothing failed, 1 otherwise. Needs no network (step 2: see above).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
failed=0
report() { echo "[$1] $2"; [ "$1" = FAIL ] && failed=1; return 0; }

echo "== gpu_smoke: $(date -u +%FT%TZ) on $(hostname), python $($PY -c 'import sys; print(sys.version.split()[0])')"
command -v nvidia-smi >/dev/null && nvidia-smi -L

# 1. CUDA with torch -------------------------------------------------------------------------
if $PY - <<'EOF'
import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
d = torch.device("cuda")
a, b = torch.randn(512, 512, device=d), torch.randn(512, 512, device=d)
ref = (a.double() @ b.double()).float()
err = ((a.bfloat16() @ b.bfloat16()).float() - ref).abs().max().item() / ref.abs().max().item()
assert err < 2e-2, f"bf16 matmul relative error {err:.3g}"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} x "
      f"{torch.cuda.get_device_name(0)}, bf16 matmul rel. error {err:.2e}")
EOF
then report PASS "CUDA via torch"; else report FAIL "CUDA via torch"; echo "no usable GPU: stopping"; exit 1; fi

# 2. Our annotation processor on a tiny VLM through ray.data.llm ---------------------------------
VLM_MODEL=${SMOKE_VLM_MODEL:-Qwen/Qwen2-VL-2B-Instruct}
if ! $PY -c "import vllm" 2>/dev/null; then
  report SKIP "vLLM annotation processor (vllm not installed; pip install -e '.[gpu]')"
elif if [ "${SMOKE_ALLOW_DOWNLOAD:-0}" = 1 ]; then
       env -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE "$PY" -m scripts.vllm_smoke --model "$VLM_MODEL" --images 4
     else
       "$PY" -m scripts.vllm_smoke --model "$VLM_MODEL" --images 4
     fi
then report PASS "vLLM annotation processor on $VLM_MODEL"; else report FAIL "vLLM annotation processor on $VLM_MODEL"; fi

# 3. Relation model latency on the GPU -----------------------------------------------------------
if $PY - <<'EOF'
import statistics, torch
import torch.nn.functional as F
from relate.model import RelationModelConfig, create_relation_model

torch.manual_seed(0)
dev = torch.device("cuda")
cfg = RelationModelConfig()
cfg.sampler.learned_keep = 128
model = create_relation_model(cfg).eval().to(dev)
side = cfg.backbone.img_size
xy = torch.rand(20, 2) * side * 0.7
boxes = torch.cat([xy, (xy + 16 + torch.rand(20, 2) * side * 0.3).clamp(max=side)], -1)[None].to(dev)
images, valid = torch.rand(1, 3, side, side, device=dev), torch.ones(1, 20, dtype=torch.bool, device=dev)
bank = F.normalize(torch.randn(19103, cfg.text_dim, device=dev), dim=-1)  # Table 34's vocabulary size
times = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    alpha = model.head.gate(bank)
    out = model(images, boxes, valid, bank, alpha=alpha)
    for i in range(70):  # 20 warm-up frames, then 50 timed ones (CUDA events), as in App. I
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); model(images, boxes, valid, bank, alpha=alpha); end.record()
        torch.cuda.synchronize()
        if i >= 20:
            times.append(start.elapsed_time(end))
ms = statistics.median(times)
name = torch.cuda.get_device_name(0)
paper = {"A100": 28.1, "H100": 19.3, "A40": 19.3}
ref = next((v for k, v in paper.items() if k in name), None)
print(f"relation model, batch 1, {side} px, 20 boxes, 128 pairs, 19,103 strings, bf16 on {name}: "
      f"median {ms:.1f} ms" + (f" (paper, Table 34: {ref} ms)" if ref else ""))
assert torch.isfinite(out.l_pred.float()).all() and out.sampled.valid.sum() == 128, "non-finite or wrong pair count"
EOF
then report PASS "relation model latency on GPU"; else report FAIL "relation model latency on GPU"; fi

# 3b. The released recipe's training step on the GPU ----------------------------------------------
# benchmarks.train_step.recipe_step_cost: TrainRunner.train_step at released.yaml's batch, side, objective,
# AdamW and bf16 autocast, on 32 scenes of the synthetic world; random backbone weights and MiniLM's bank
# (no hub here, no distilled student: the step costs the same but for the bank's width, 384 against 512)
if $PY - <<'EOF'
from benchmarks.train_step import recipe_step_cost

r = recipe_step_cost("train_jobs/configs/released.yaml", "cuda", overrides=[
    "model.backbone.pretrained=false", "data.text_encoder=minilm", "model.text_dim=384", "data.source_scopes={}"])
print(f"released recipe's training step, batch {r['batch_size']} at {r['side']} px, bf16 autocast {r['amp']}, on "
      f"{r['device']}: median {r['step_ms']:.0f} ms, {r['gflop_per_step']:.0f} GFLOP counted, {r['tflops']:.1f} TFLOP/s, "
      f"peak memory {r['peak_memory_gib']:.1f} GiB")
EOF
then report PASS "released recipe's training step on GPU"; else report FAIL "released recipe's training step on GPU"; fi

# 4. GPU tests -----------------------------------------------------------------------------------
if compgen -G "tests/gpu/test_*.py" >/dev/null; then
  if $PY -m pytest -q tests/gpu; then report PASS "tests/gpu"; else report FAIL "tests/gpu"; fi
else
  report SKIP "tests/gpu (no tests there)"
fi

echo "== gpu_smoke: $([ $failed = 0 ] && echo OK || echo FAILED)"
exit $failed
