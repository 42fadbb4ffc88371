# SPDX-License-Identifier: Apache-2.0
"""Wall time of the training simulator: one warm prediction of the 405B / 16k-GPU scenario and a
1,000-layout sweep (roofline engine, warm engine cache). Run:
``python benchmarks/bench_simulate.py``."""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from simulate.engines import EngineChain
from simulate.scenario import apply_overrides, load_scenario, parse_scenario, read_document
from simulate.training import run_training

SCENARIO = (Path(__file__).resolve().parents[1] / "datasets" / "scenarios"
            / "llama3-405b-tp8-pp16-cp-16k-h100.yaml")


def _layouts(doc: dict, count: int) -> list[dict]:
    """`count` distinct layouts of the 405B scenario on 16,384 GPUs (valid or not)."""
    grid = itertools.product((8, 4), (16, 8, 32), (2, 1, 4), (4, 2, 1, 3), ("full", "selective"),
                             (1, 2), (40, 25, 100), (False, True))
    out = []
    for tp, pp, cp, vpp, recompute, mb, bucket, overlap in grid:
        dp = 16384 // (tp * pp * cp)
        schedule = "interleaved" if vpp > 1 else "1f1b"
        out.append(apply_overrides(doc, [
            f"training.parallel.tp={tp}", f"training.parallel.pp={pp}",
            f"training.parallel.cp={cp}", f"training.parallel.dp={dp}",
            f"training.parallel.vpp={vpp}", f"training.recompute={recompute}",
            f"training.schedule={schedule}", f"training.micro_batch={mb}",
            f"training.global_batch={dp * mb * 2 * pp}", f"training.dp_bucket_mb={bucket}",
            f"training.overlap.tp_comm={str(overlap).lower()}"]))
        if len(out) == count:
            break
    return out


def main() -> None:
    scenario = load_scenario(SCENARIO)
    chain = EngineChain(get_hardware(scenario.cluster.gpu), use_store=False,
                        use_predictors=False)
    run_training(scenario, chain=chain)  # warm the per-shape cache
    times = []
    for _ in range(20):
        start = time.perf_counter()
        result = run_training(scenario, chain=chain)
        times.append(time.perf_counter() - start)
    print(f"405B / 16,384 H100, one prediction (warm): median {1e3 * statistics.median(times):.1f}"
          f" ms, min {1e3 * min(times):.1f} ms; iteration {result.iteration_time_s:.3f} s, "
          f"MFU {100 * result.mfu:.1f}%")
    docs = _layouts(read_document(SCENARIO), 1000)
    start = time.perf_counter()
    ok = oom = rejected = 0
    for doc in docs:
        try:
            r = run_training(parse_scenario(doc), chain=chain)
        except SpecError:
            rejected += 1
            continue
        ok += r.fits
        oom += not r.fits
    wall = time.perf_counter() - start
    print(f"1,000-layout sweep: {wall:.2f} s total, {1e3 * wall / len(docs):.1f} ms per layout "
          f"({ok} simulated, {oom} do not fit, {rejected} rejected by validation)")


if __name__ == "__main__":
    main()
