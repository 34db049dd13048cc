#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment at .venv and install the project into it.
# torch and torchvision go in first, as a matched pair, so that nothing else drags in another torch.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
VENV=.venv
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
# pip warns once per local index entry it cannot use; those lines say nothing about the install.
_quiet() { grep -v -e "^WARNING: Location" -e "^ *!!" -e "^ *\*\*\*" || true; }
stamp="$VENV/.installed${extras:+-$extras}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[venv] creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "[venv] installing torch==2.14.1 torchvision==0.29.1 (first, as a pair)"
  "$VENV/bin/python" -m pip install --quiet torch==2.14.1 torchvision==0.29.1 2>&1 | _quiet
  echo "[venv] installing the project${extras:+ with extras [$extras]}"
  "$VENV/bin/python" -m pip install --quiet -e ".${extras:+[$extras]}" 2>&1 | _quiet
  touch "$stamp"
fi
