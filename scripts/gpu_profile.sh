#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Profile one GPU end to end: the CUDA tests, a calibrated hardware entry, the single-GPU sweeps
# into a DuckDB store, and a Parquet export of what was measured.
#
#   bash scripts/gpu_profile.sh OUT_DIR [SWEEP ...]     (default sweeps: gpu-h100, gpu-h100-train)
#
# Runs with whatever python has torch with CUDA (PYTHON=..., default python3) and the repo on
# PYTHONPATH, so it works in a CUDA image without the project's venv. Each sweep is resumable:
# run the script again with the same OUT_DIR and only unmeasured points are timed. Per-step wall
# limits (seconds) come from STEP_TIMEOUT_S (default 1500). The calibrated file keeps the vendor
# peaks of the GPU's own catalog entry (REFERENCE=name to choose another).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: gpu_profile.sh OUT_DIR [SWEEP ...]}
shift
SWEEPS=("$@")
[ ${#SWEEPS[@]} -gt 0 ] || SWEEPS=(datasets/sweeps/gpu-h100.yaml datasets/sweeps/gpu-h100-train.yaml)
PY=${PYTHON:-python3}
LIMIT=${STEP_TIMEOUT_S:-1500}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR"
DB="$OUT_DIR/gpu.duckdb"
L=("$PY" -m simulate.cli.main)
step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit \
  --format=csv || exit 1
"$PY" -c "import torch; p = torch.cuda.get_device_properties(0); print('torch', torch.__version__, 'cuda', torch.version.cuda, p.name, p.multi_processor_count, 'SMs')" || exit 1

step "CUDA tests"
"$PY" -m pytest -q -m gpu -p no:cacheprovider tests/profiler/test_bench_timers.py \
  tests/profiler/test_calibrate.py 2>&1 | tail -5

step "calibrate"
timeout "$LIMIT" "${L[@]}" hardware calibrate --device cuda --name calibrated-gpu \
  ${REFERENCE:+--reference "$REFERENCE"} --budget-s 20 --out "$OUT_DIR/calibrated-gpu.yaml" --json \
  || echo "calibrate failed"

for sweep in "${SWEEPS[@]}"; do
  step "sweep $sweep"
  timeout "$LIMIT" "${L[@]}" profile run "$sweep" --device cuda --db "$DB" --no-progress \
    || echo "sweep $sweep stopped (exit $?); rerun to resume"
done

step "store"
"${L[@]}" db info --db "$DB"
"${L[@]}" db export --parquet "$OUT_DIR/parquet" --db "$DB"
