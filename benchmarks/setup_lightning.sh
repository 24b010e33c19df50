#!/usr/bin/env bash
# Create the benchmark-only PyTorch Lightning venv (never a runtime dependency).
#   benchmarks/setup_lightning.sh [VENV_DIR]    default: .venv-lightning
# benchmarks/run.py uses $MINDEXP_LIGHTNING_PYTHON, else VENV_DIR/bin/python.
# torch is pinned to 2.13.0: a CPU wheel of that exact version is on these
# machines (any other spec downloads the multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-lightning}"
PY="${PYTHON:-python3}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import torch, lightning" 2>/dev/null; then
    echo "lightning venv ready: $VENV/bin/python"
    exit 0
fi
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet "torch==2.13.0" lightning numpy
"$VENV/bin/python" -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"
echo "lightning venv ready: $VENV/bin/python"
