# SPDX-License-Identifier: Apache-2.0
"""Runs Calculon (calculon-ai/calculon) in its own venv; never imported by llmsim.

``bench_search_vs_calculon.py`` starts it with ``PYTHONPATH`` set to the Calculon snapshot. Two
modes, each printing one line ``LLMSIM_CALCULON {json}``:

- ``search``: builds the task list exactly as ``calculon llm-optimal-execution`` does
  (``OptimalExecution.run_command``: one task per tp, pp, interleaving, recompute, optimizer
  sharding and TP communication type), draws a seeded random sample of ``--tasks`` of them and
  runs Calculon's own ``OptimalExecution.search`` on each, serially in this one process (one
  worker). Reports the task count, configurations tried and timed, wall and CPU seconds, and the
  best execution with its stats.
- ``estimate``: one execution (JSON on the command line) -> Calculon's total time, or its error.
"""

import argparse
import json
import logging
import os
import random
import time

import calculon
from calculon.llm import Llm
from calculon.llm.optimal_execution import OptimalExecution
from calculon.system import System


def _cpu_s() -> float:
    return sum(os.times()[:2])


def _tasks(app, syst, procs: int, max_batch: int, datatype: str) -> list[tuple]:
    """The argument tuples ``run_command`` hands to ``OptimalExecution.search`` (same order)."""
    params = []
    for tp in Llm.get_all_tensor_parallelisms(procs, app.hidden, app.attn_heads):
        for pp in Llm.get_all_pipeline_parallelisms(procs, tp, app.num_blocks):
            dp = Llm.get_data_parallelism(procs, tp, pp)
            for ppint in Llm.get_valid_pipeline_interleavings(app.num_blocks, pp):
                batch = OptimalExecution.get_batch_size(dp, max_batch)
                if batch is None:
                    continue
                for recompute in ["full", "attn_only", "none"]:
                    for opt_shard in ([True, False] if dp > 1 else [False]):
                        for comm in ["ar", "p2p_rs_ag", "rs_ag"]:
                            params.append((False, 1, False, procs, max_batch, datatype, app,
                                           syst, tp, pp, dp, ppint, batch, recompute, opt_shard,
                                           comm, [True], False, True, True))
    return params


def _search(args, app, syst) -> dict:
    params = _tasks(app, syst, args.procs, args.max_batch, args.datatype)
    picked = sorted(random.Random(args.seed).sample(range(len(params)),
                                                    min(args.tasks, len(params))))
    best, tried, good = [], 0, 0
    t0, c0 = time.perf_counter(), _cpu_s()
    for i in picked:
        cbest, count, ok, _, _, _ = OptimalExecution.search(*params[i])
        best = OptimalExecution.update_list(best, cbest, 1)
        tried += count
        good += ok
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    out = {"tasks": len(params), "sampled": picked, "configurations": tried, "timed": good,
           "wall_s": wall, "cpu_s": cpu}
    if best:
        rate, execution, stats = best[0]
        out["best"] = {"sample_rate": rate, "execution": execution,
                       "total_time_s": stats["total_time"]}
    return out


def _estimate(args, app, syst) -> dict:
    execution = json.loads(args.execution)
    try:
        model = Llm(app, logging.Logger("estimate"))
        model.compile(syst, Llm.Execution.from_json(execution))
        model.run(syst)
    except Llm.Error as ex:
        return {"error": str(ex)}
    return {"total_time_s": model.get_total_time(), "sample_rate": model.get_sample_rate()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["search", "estimate"])
    parser.add_argument("--application", required=True)
    parser.add_argument("--system", required=True)
    parser.add_argument("--procs", type=int, default=1024)
    parser.add_argument("--max-batch", type=int, default=1536)
    parser.add_argument("--datatype", default="float16")  # the A100 file lists float16 only
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--execution", help="estimate: one execution as JSON")
    args = parser.parse_args()
    app = Llm.Application(calculon.io.read_json_file(args.application))
    syst = System(calculon.io.read_json_file(args.system))
    out = _search(args, app, syst) if args.mode == "search" else _estimate(args, app, syst)
    print("LLMSIM_CALCULON " + json.dumps(out))


if __name__ == "__main__":
    main()
