#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One lent GPU, one call: real torchtitan-style training steps of two Llama-shaped models
# (scripts/gpu_train_step.py, eager then compiled) and the small-model layer GEMMs back to back
# against isolated (scripts/gpu_sustained.py). Everything lands in OUT/results.tar.gz and
# OUT/log.txt. Each part has its own time limit inside a total of BUDGET_S seconds (default
# 400), so one part that hangs costs only its own share.
#
#   bash scripts/gpu_step_check.sh OUT
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: gpu_step_check.sh OUT}
BUDGET_S=${BUDGET_S:-400}
mkdir -p "$OUT/res"
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
C=datasets/validation/gpu-step/configs
left() { echo $(( BUDGET_S - SECONDS )); }
part() {  # part CAP_S COMMAND...: run with min(CAP_S, what is left less 15 s for the tarball)
  local cap=$1; shift
  local t=$(( $(left) - 15 )); (( t > cap )) && t=$cap
  if (( t < 20 )); then echo "== skipped (no time left): $*"; return; fi
  echo "== $(date -u +%H:%M:%S) [$t s] $*"
  timeout "$t" "$@" || echo "== failed or stopped ($?): $*"
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
lscpu > "$OUT/res/lscpu.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
S=(python3 scripts/gpu_train_step.py "$OUT/res")
part 90 "${S[@]}" --config $C/llama-3.2-1b.json --seq 8192 --mb 1
part 90 "${S[@]}" --config $C/llama-3-8b-4l.json --seq 8192 --mb 1
part 90 "${S[@]}" --config $C/llama-3.2-1b.json --seq 2048 --mb 4
part 130 python3 scripts/gpu_sustained.py "$OUT/res" --seconds 14 \
  --layers mpt-760m-mb24 mpt-1b-mb12 mpt-3b-mb8 mpt-7b-mb6 mpt-13b-mb2
part 120 "${S[@]}" --config $C/llama-3.2-1b.json --seq 8192 --mb 1 --compile
part 120 "${S[@]}" --config $C/llama-3-8b-4l.json --seq 8192 --mb 1 --compile
tar -czf "$OUT/results.tar.gz" -C "$OUT" res && rm -rf "$OUT/res"
echo "== done in $SECONDS s"
