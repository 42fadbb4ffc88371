#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run `llmsim validate cpu --json` (the measured cache rule, simulate/validate/warmth.py) on a
# lent machine's CPU and keep its JSON, stderr and the machine's description in OUT_DIR.
# Usage: scripts/device_validate_cpu.sh OUT_DIR   (from the repository root; python3 with torch
# and transformers; duckdb, xgboost and mlflow on PYTHONPATH where they are not installed)
set -u
out=${1:?usage: scripts/device_validate_cpu.sh OUT_DIR}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
{
  echo "nproc: $(nproc)"
  lscpu | head -20
  for index in /sys/devices/system/cpu/cpu0/cache/index*; do
    echo "sysfs $(basename "$index"): level $(cat "$index/level") $(cat "$index/type")" \
         "$(cat "$index/size") shared $(cat "$index/shared_cpu_list")"
  done
  echo "uptime (start): $(uptime)"
} | tee "$out/machine.txt"
home=$(mktemp -d)
start=$(date +%s)
cd "$root" && LLMSIM_HOME="$home" timeout 420 python3 -m simulate.cli.main validate cpu --json \
  > "$out/validate-cpu.json" 2> "$out/validate-cpu.stderr"
rc=$?
echo "rc $rc, $(( $(date +%s) - start )) s; uptime (end): $(uptime)" | tee -a "$out/machine.txt"
tail -5 "$out/validate-cpu.stderr"
python3 - "$out/validate-cpu.json" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
print(json.dumps(d["summary"], indent=1))
print(json.dumps(d["stages"].get("cache"), indent=1))
print(json.dumps(d["elapsed_s"], indent=1))
for r in d["rows"]:
    print(f"{r['model']:20s} {r['mode']:10s} f={r['cache_fraction']:.2f} ws={r['working_set_mb']:6.1f}"
          f" err={r['error_pct']:+6.1f} fit={r['fit_error_pct'] or 0:+6.1f}")
for p in d["stages"].get("warmth", {}).get("points", []):
    print(p)
PY
exit $rc
