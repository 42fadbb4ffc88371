# SPDX-License-Identifier: Apache-2.0
"""Wall time of a 10,000-request serving simulation (issue: "finishes in seconds").

Prints, for Llama-2-7B on one A100 under each scheduler, the wall time of `simulate.run` with a
10,000-request Poisson stream (roofline engine, so the figure is the simulator's own cost), the
number of simulated steps and the steps per second. Asserts nothing about time.

    .venv/bin/python benchmarks/bench_serving.py [--requests 10000] [--qps 6]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from simulate.api import run

SCENARIO = Path(__file__).resolve().parents[1] / "datasets" / "scenarios" / (
    "llama2-7b-continuous-qps8-a100.yaml")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--qps", type=float, default=6.0)
    args = parser.parse_args()
    print(f"{'scheduler':16s} {'requests':>9s} {'wall s':>8s} {'steps':>8s} {'steps/s':>9s} "
          f"{'TTFT p50 ms':>12s} {'TPOT p50 ms':>12s}")
    for scheduler in ("continuous", "chunked_prefill", "static"):
        overrides = [f"serving.arrival.num_requests={args.requests}",
                     f"serving.arrival.qps={args.qps}", f"serving.scheduler={scheduler}"]
        start = time.perf_counter()
        out = run(SCENARIO, overrides=overrides, use_store=False, use_predictors=False)
        wall = time.perf_counter() - start
        d = out.data
        print(f"{scheduler:16s} {d['num_requests']:9d} {wall:8.2f} {d['steps']:8d} "
              f"{d['steps'] / wall:9.0f} {d['ttft_s']['p50'] * 1e3:12.1f} "
              f"{d['tpot_s']['p50'] * 1e3:12.2f}")


if __name__ == "__main__":
    main()
