# SPDX-License-Identifier: Apache-2.0
"""Side by side with Calculon (calculon-ai/calculon, SC'23): the training-layout search for
GPT-3 175B on 1,024 A100-80GB, global batch 1,536, one worker each, in one run.

Calculon runs from its snapshot (``--calculon``, default ``../shared/peers/calculon``) in its
own venv (``--calculon-venv``, default ``$LLMSIM_HOME/calculon-venv``; ``--install-calculon``
creates it with psutil, numpy and pandas), never inside llmsim's. Its whole space is 3,330
search tasks (hours on one core), so a seeded random sample of ``--tasks`` of them runs, each
through Calculon's own ``OptimalExecution.search`` (see `calculon_driver.py`). llmsim searches
``--scenario`` (below) on the serial executor (one worker),
roofline engines unless ``--engines store``. Printed: configurations tried and timed, wall and
CPU seconds, timed configurations per CPU second of each and their ratio, and the best layout
of each with its predicted iteration time in both tools. Asserts nothing about time.
``--scenario`` picks llmsim's space: ``gpt3-175b-1024-a100-all-axes.yaml`` (default: the
layout axes plus the overlap and offload switches, as Calculon's space has them) or
``gpt3-175b-1024-a100.yaml`` (layout axes only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from analytical.errors import LlmsimError
from analytical.paths import llmsim_home
from simulate.engines import EngineOptions
from simulate.search.training_search import search_training
from simulate.search.worker import worker_evaluator
from simulate.search.worker_cache import new_run_id

ROOT = Path(__file__).resolve().parents[1]
SEARCH = ROOT / "datasets" / "scenarios" / "search"
SCENARIO = SEARCH / "gpt3-175b-1024-a100-all-axes.yaml"
DRIVER = Path(__file__).resolve().parent / "calculon_driver.py"
RECOMPUTE = {"none": "none", "selective": "attn_only", "full": "full"}  # llmsim -> Calculon
_RUN = new_run_id()  # one run: the evaluator and its caches serve every layout compared


def _calculon(args, mode: str, *extra: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(args.calculon)}
    cmd = [str(args.calculon_venv / "bin" / "python"), str(DRIVER), mode,
           "--application", str(args.calculon / "models" / "gpt3-175B.json"),
           "--system", str(args.calculon / "systems" / "a100_80g.json"),
           "--procs", "1024", "--max-batch", "1536", *extra]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("LLMSIM_CALCULON "):
            return json.loads(line.split(" ", 1)[1])
    raise RuntimeError(f"Calculon driver failed:\n{out.stderr[-2000:]}")


def _to_calculon(row: dict[str, Any]) -> dict[str, Any]:
    """llmsim layout -> Calculon execution (sp -> reduce-scatter/all-gather; TP collectives
    overlapped -> Calculon's "ring" TP overlap; DP gradients overlapped -> data_par_overlap;
    offload switches one to one)."""
    lay, par = row["layout"], row["layout"]["parallel"]
    overlap, offload = lay.get("overlap", {}), lay.get("offload", {})
    tp, pp, dp = par.get("tp", 1), par.get("pp", 1), par.get("dp", 1)
    return {"num_procs": 1024, "tensor_par": tp, "pipeline_par": pp, "data_par": dp,
            "tensor_par_net": 0, "pipeline_par_net": 0 if tp * pp <= 8 else 1,
            "data_par_net": 0 if tp * pp * dp <= 8 else 1, "batch_size": lay["global_batch"],
            "microbatch_size": lay.get("micro_batch", 1), "datatype": "float16",
            "fused_activation": True, "attention_type": "multihead",
            "activation_recompute": RECOMPUTE[lay.get("recompute", "none")],
            "pipeline_interleaving": par.get("vpp", 1),
            "optimizer_sharding": par.get("zero", 0) >= 1,
            "tensor_par_comm_type": "rs_ag" if par.get("sp") else "ar",
            "tensor_par_overlap": "ring" if overlap.get("tp_comm") else "none",
            "seq_par_ag_redo": False, "data_par_overlap": dp > 1 and overlap.get("dp_grad", True),
            "weight_offload": bool(offload.get("weights")),
            "activations_offload": bool(offload.get("activations")),
            "optimizer_offload": bool(offload.get("optimizer")), "training": True}


def _to_llmsim(exe: dict[str, Any]) -> dict[str, Any]:
    """Calculon execution -> llmsim training block (any TP overlap mode -> tp_comm; Calculon's
    seq_par_ag_redo has no llmsim counterpart and is reported, not mapped)."""
    vpp = exe["pipeline_interleaving"]
    return {"global_batch": exe["batch_size"], "seq_len": 2048,
            "micro_batch": exe["microbatch_size"], "precision": "bf16",
            "recompute": {v: k for k, v in RECOMPUTE.items()}[exe["activation_recompute"]],
            "schedule": "interleaved" if vpp > 1 else "1f1b",
            "parallel": {"tp": exe["tensor_par"], "pp": exe["pipeline_par"],
                         "dp": exe["data_par"], "vpp": vpp,
                         "sp": exe["tensor_par_comm_type"] != "ar",
                         "zero": 1 if exe["optimizer_sharding"] else 0},
            "overlap": {"tp_comm": exe["tensor_par_overlap"] != "none",
                        "dp_grad": exe["data_par_overlap"]},
            "offload": {"weights": exe["weight_offload"],
                        "activations": exe["activations_offload"],
                        "optimizer": exe["optimizer_offload"]}}


def _llmsim_time(block: dict[str, Any], engines: EngineOptions) -> str:
    """Iteration seconds llmsim predicts for a training block (or why it cannot)."""
    from simulate.scenario import ClusterSpec, Scenario
    from simulate.search.space import check_block

    ev = worker_evaluator("gpt3-175b", "a100-sxm-80gb", 8, engines,
                          run=_RUN)
    cluster = ClusterSpec(gpu="a100-sxm-80gb", num_gpus=1024, gpus_per_node=8)
    try:
        spec = check_block(block, model=ev.model, hw=ev.hw, cluster=cluster)
    except LlmsimError as exc:
        return f"refused ({exc})"
    row = ev.evaluate(Scenario(name="x", model="gpt3-175b", cluster=cluster, training=spec,
                               doc={"training": block}))
    return "does not fit in memory" if row is None else f"{row['iteration_time_s']:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calculon", type=Path, default=ROOT.parent / "shared" / "peers" /
                        "calculon")
    parser.add_argument("--calculon-venv", type=Path, default=None)
    parser.add_argument("--install-calculon", action="store_true")
    parser.add_argument("--tasks", type=int, default=6, help="Calculon tasks sampled")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", choices=["roofline", "store"], default="roofline")
    parser.add_argument("--cpu", type=int, default=None, help="pin both to this core")
    parser.add_argument("--scenario", type=Path, default=SCENARIO, help="llmsim's space")
    args = parser.parse_args()
    args.calculon = args.calculon.resolve()
    args.calculon_venv = args.calculon_venv or llmsim_home() / "calculon-venv"
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})  # inherited by the Calculon process
    if args.install_calculon:
        subprocess.run([sys.executable, "-m", "venv", str(args.calculon_venv)], check=True)
        subprocess.run([str(args.calculon_venv / "bin" / "pip"), "install", "-q", "psutil",
                        "numpy", "pandas"], check=True)
    engines = (EngineOptions(use_store=False, use_predictors=False)
               if args.engines == "roofline" else EngineOptions())

    t0, c0 = time.perf_counter(), time.process_time()
    res = search_training(args.scenario, executor="serial", workers=1, engines=engines)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    cal = _calculon(args, "search", "--tasks", str(args.tasks), "--seed", str(args.seed))

    print(f"GPT-3 175B, 1,024 A100-80GB, global batch 1,536, one worker each "
          f"(llmsim engines: {args.engines})")
    print(f"llmsim:   {res.candidates} candidates, {res.valid} valid, {res.timed} timed in "
          f"{wall:.1f} s wall / {cpu:.1f} s CPU -> {res.timed / cpu:.0f} timed layouts per "
          f"CPU-s ({res.candidates / cpu:.0f} candidates per CPU-s); the whole space of "
          f"{args.scenario.name}")
    print(f"Calculon: {cal['configurations']} configurations, {cal['timed']} timed in "
          f"{cal['wall_s']:.1f} s wall / {cal['cpu_s']:.1f} s CPU -> "
          f"{cal['timed'] / cal['cpu_s']:.0f} timed per CPU-s "
          f"({cal['configurations'] / cal['cpu_s']:.0f} configurations per CPU-s); a random "
          f"sample (seed {args.seed}) of {len(cal['sampled'])} of its {cal['tasks']} tasks, "
          f"ids {cal['sampled']}")
    print(f"ratio (timed per CPU-s): llmsim / Calculon = "
          f"{(res.timed / cpu) / (cal['timed'] / cal['cpu_s']):.1f}x")

    best = res.rows[0]
    exe = _to_calculon(best)
    theirs = _calculon(args, "estimate", "--execution", json.dumps(exe))
    print(f"llmsim best:   {best['layout']['parallel']}, micro_batch "
          f"{best['layout']['micro_batch']}, recompute {best['layout']['recompute']}, "
          f"schedule {best['layout']['schedule']}, overlap {best['layout'].get('overlap')}, "
          f"offload {best['layout'].get('offload')}: llmsim {best['iteration_time_s']:.2f} s, "
          f"Calculon " + (f"{theirs['total_time_s']:.2f} s" if "total_time_s" in theirs
                          else f"refused ({theirs['error']})"))
    if "best" in cal:
        cb = cal["best"]["execution"]
        extra = {k: cb[k] for k in ("tensor_par_overlap", "weight_offload",
                                    "activations_offload", "optimizer_offload",
                                    "seq_par_ag_redo", "data_par_overlap")}
        print(f"Calculon best: tp {cb['tensor_par']} pp {cb['pipeline_par']} dp "
              f"{cb['data_par']} interleave {cb['pipeline_interleaving']} micro_batch "
              f"{cb['microbatch_size']} recompute {cb['activation_recompute']} optimizer "
              f"sharding {cb['optimizer_sharding']} tp comm {cb['tensor_par_comm_type']} "
              f"{extra}: Calculon {cal['best']['total_time_s']:.2f} s, llmsim "
              f"{_llmsim_time(_to_llmsim(cb), engines)} (as an llmsim layout)")


if __name__ == "__main__":
    main()
