#!/usr/bin/env bash
# tests/gpu on a CUDA machine that has no Ray, FastAPI or pydantic and no network. From the
# repository root:
#   bash scripts/gpu_tests.sh [extra pytest arguments]
# 1. prints the GPUs (nvidia-smi -L), Python, torch and its CUDA;
# 2. installs the wheels carried in .whl/ (pydantic, pydantic-core, annotated-types,
#    typing-inspection, typing-extensions: what relate's configs import and the GPU image lacks)
#    into /tmp/site, with pip or, where pip is missing, by unpacking them, and puts the repository
#    and /tmp/site on PYTHONPATH;
# 3. runs `pytest -q -p no:cacheprovider tests/gpu` offline. Everything is teed to
#    $OUT/gpu_tests.log (and pytest also writes $OUT/gpu_tests.xml) when OUT is set.
# Exit status: pytest's; 2 when torch sees no CUDA device (the tests would only be skipped);
# 124 when pytest runs past GPU_TESTS_TIMEOUT seconds (default 420).
# Environment: PYTHON (default python3), WHEELS (default .whl; empty: install nothing),
# SITE (default /tmp/site), RELATE_TEST_GPU_DEVICE=cpu for a dry run without CUDA (see
# tests/gpu/conftest.py; it proves nothing about a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${WHEELS-.whl}
SITE=${SITE:-/tmp/site}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONDONTWRITEBYTECODE=1
LOG=/dev/null
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && LOG="$OUT/gpu_tests.log"; fi

install_wheels() {
  shopt -s nullglob
  local whl=()
  [ -n "$WHEELS" ] && whl=("$WHEELS"/*.whl)
  [ ${#whl[@]} -gt 0 ] || { echo "== no wheels in '${WHEELS}': installing nothing"; return 0; }
  echo "== installing ${#whl[@]} carried wheels into $SITE: $(for w in "${whl[@]}"; do basename "$w"; done | tr '\n' ' ')"
  if ! $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${whl[@]}"; then
    echo "pip could not install them: unpacking the wheels instead"
    $PY -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' "$SITE" "${whl[@]}"
  fi
}

main() {
  echo "== gpu_tests: $(date -u +%FT%TZ) on $(hostname)"
  if command -v nvidia-smi >/dev/null; then nvidia-smi -L; else echo "nvidia-smi: not found"; fi
  $PY -c '
import sys, torch
cuda = torch.cuda.is_available()
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, cuda available: {cuda}"
      + (f", {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}" if cuda else ""))'
  install_wheels
  export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
  $PY -c '
import sys
import pydantic, timm, transformers
import relate.api, relate.checkpoint, relate.losses  # what tests/gpu imports
bad = sorted({"ray", "fastapi", "pydantic_settings"} & {m.split(".")[0] for m in sys.modules})
print(f"pydantic {pydantic.VERSION} ({pydantic.__file__}), timm {timm.__version__}, "
      f"transformers {transformers.__version__}; relate imports; ray/fastapi/pydantic_settings imported: {bad or None}")' \
    || echo "!! the import check failed: pytest will show where"
  if [ -z "${RELATE_TEST_GPU_DEVICE:-}" ] && ! $PY -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    echo "!! torch sees no CUDA device: tests/gpu would only be skipped"
    return 2
  fi
  local junit=()
  [ -n "${OUT:-}" ] && junit=(--junitxml "$OUT/gpu_tests.xml")
  timeout -k 10 "${GPU_TESTS_TIMEOUT:-420}" $PY -m pytest -q -p no:cacheprovider --durations=10 \
    ${junit[@]+"${junit[@]}"} tests/gpu "$@"
  local rc=$?
  echo "== gpu_tests: exit $rc"
  return "$rc"
}

main "$@" 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
