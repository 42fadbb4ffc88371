# SPDX-License-Identifier: Apache-2.0
"""Wall and CPU time of the design-space searches: the >= 10,000-candidate training search for
Llama-3-70B on 1,024 H100 (the README's), the whole GPT-3 175B / 1,024 A100 space on every
llmsim axis (layout, overlap and offload switches: ``gpt3-175b-1024-a100-all-axes.yaml``), the
serving search for Llama-3-70B on one 8x H100 node, and the dynamic-SP saving for a Llama-3-70B
batch on 16 GPUs. ``--engines roofline`` (default, so the numbers do not depend on a local
store or predictors) or ``store`` (store and predictors of ``$LLMSIM_HOME``). CPU seconds are
this process's plus its worker processes'. Prints figures; asserts nothing about time. Run:
``python benchmarks/bench_search.py [--executor process|serial|ray] [--workers N]
[--engines roofline|store] [--skip-serving] [--skip-gpt3]``."""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.engines import EngineChain, EngineOptions
from simulate.search.dynamic_sp import compare_sp, model_time_fn
from simulate.search.serving_search import search_serving
from simulate.search.training_search import search_training

SEARCH = Path(__file__).resolve().parents[1] / "datasets" / "scenarios" / "search"
ROOFLINE = EngineOptions(use_store=False, use_predictors=False)


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the process-pool workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _training(name: str, args, engines) -> None:
    t0, c0 = time.perf_counter(), _cpu_s()
    tr = search_training(SEARCH / name, executor=args.executor, workers=args.workers,
                         engines=engines)
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    best = tr.rows[0]
    print(f"training search {name} ({args.engines}): {tr.candidates} candidates, {tr.valid} "
          f"valid, {tr.fit} fit in memory and timed; wall {wall:.1f} s on {tr.workers} "
          f"workers ({tr.executor}), {cpu:.1f} CPU-s -> {tr.fit / cpu:.0f} timed layouts per "
          f"CPU-s; load average {os.getloadavg()[0]:.1f}")
    print(f"  best: {best['tokens_per_s']:.0f} tokens/s, MFU {best['mfu']:.3f}, "
          f"{ {k: v for k, v in best['layout'].items() if k not in ('seq_len', 'precision')} }")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--executor", default="process")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--engines", choices=["roofline", "store"], default="roofline")
    parser.add_argument("--skip-serving", action="store_true")
    parser.add_argument("--skip-gpt3", action="store_true")
    args = parser.parse_args()
    engines = ROOFLINE if args.engines == "roofline" else EngineOptions()
    _training("llama3-70b-1024-h100.yaml", args, engines)
    if not args.skip_gpt3:
        _training("gpt3-175b-1024-a100-all-axes.yaml", args, engines)

    if not args.skip_serving:
        t0 = time.perf_counter()
        sv = search_serving(SEARCH / "serving-llama3-70b-h100.yaml", executor=args.executor,
                            workers=args.workers, engines=engines)
        wall = time.perf_counter() - t0
        print(f"serving search: {sv.candidates} configurations in {wall:.1f} s; frontier under "
              f"SLO {sv.slo}:")
        for r in sv.frontier:
            print(f"  {r['tokens_per_s_per_gpu']:.1f} tok/s/GPU  TPOT p90 "
                  f"{1e3 * r['tpot_p90_s']:.1f} ms  TTFT p90 {r['ttft_p90_s']:.2f} s  "
                  f"{r['config']}")
        if sv.improvement is not None:
            print(f"  best vs default (TP8 bf16): {sv.improvement:.2f}x tokens/s per GPU")

    hw = get_hardware("h100-sxm")
    chain = EngineChain.from_options(hw, engines)
    time_fn = model_time_fn(load_model("llama-3-70b"),
                            lambda ops: [e.latency_s for e in chain.estimate_many(ops)],
                            gpus_per_node=hw.gpus_per_node)
    lengths = [131072, 32768] + [4096] * 24
    cmp = compare_sp(lengths, 16, time_fn)
    fixed = cmp["fixed"]
    print(f"dynamic SP, Llama-3-70B, 16 H100, 1x128k + 1x32k + 24x4k: fixed SP="
          f"{fixed['degree']} {fixed['latency_s']:.2f} s, dynamic {cmp['dynamic']['plan']} "
          f"{cmp['dynamic']['latency_s']:.2f} s -> saving {100 * cmp['saving']:.1f}%")


if __name__ == "__main__":
    main()
