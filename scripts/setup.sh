#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Create .venv and install llmsim with its dependencies. Idempotent: a second run is quick.
#
# torch: if the venv has none, a machine with an NVIDIA driver gets `pip install torch` (the CUDA
# build, or whatever LLMSIM_TORCH_SPEC says); a CPU-only machine gets the CPU wheel 2.13.0 (on
# this project's machines it lies on disk, ~25 s). Install your own CUDA torch into .venv first
# and this script keeps it. XGBoost: the 5 MB `xgboost-cpu` build without a GPU, the full build
# (with NCCL) and triton with one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  TORCH_SPEC=${LLMSIM_TORCH_SPEC:-torch}
  EXTRAS="gpu,dev"
else
  TORCH_SPEC=${LLMSIM_TORCH_SPEC:-torch==2.13.0}
  EXTRAS="cpu,dev"
fi
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing ${TORCH_SPEC}"
  "${PIP[@]}" "${TORCH_SPEC}" 2>&1 | grep -v "^WARNING: Location" || true
fi
echo "setup: installing llmsim[${EXTRAS}]"
"${PIP[@]}" -e ".[${EXTRAS}]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import torch, xgboost, duckdb, mlflow; import analytical, profiler, predictors, simulate" \
  || { echo "setup: import check failed" >&2; exit 1; }
echo "setup: ok ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
