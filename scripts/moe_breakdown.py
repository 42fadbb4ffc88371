# SPDX-License-Identifier: Apache-2.0
"""Where a published training row's predicted GPU time goes, one micro-batch at a time (issue 21):
the operators of one micro-batch of the critical pipeline stage summed by kind (attention, dense
GEMMs, expert grouped GEMMs, permute / sort, other element-wise, recompute) and per
communication stream (EP all-to-all, DP gradient reduction, pipeline sends), beside the step
time per micro-batch that the row's measured tokens/s implies, the one predicted, and the one
predicted without the MoE host floor (`simulate.moe_host` with no CPU time per kernel) and the
CPU issue time the host floor counts per micro-batch (the step with 1000x the CPU time per
kernel, over 1000: the GPU's share vanishes).

Usage: python scripts/moe_breakdown.py ROW [ROW ...] [--source megatron-bridge] [--no-store]
(ROW: 0-based index among the source's rows of datasets/validation/training/published_runs.csv,
the order of ``llmsim validate published --rows``). Runs `simulate.api.run`, the code path of
``llmsim simulate --json``, with the trace on.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any
from unittest import mock

KINDS = ("attention", "dense_gemm", "expert_gemm", "permute", "elementwise", "recompute")
_DENSE = ("qkv_proj", "out_proj", "lm_head", "router", "shared_experts", "mlp.", "q_", "kv_")
_PERMUTE = ("dispatch", "combine", "sort_chunks", "permute")


def op_kind(name: str) -> str:
    """The kind of one operator event of the trace's ``ops`` track, by its graph node name."""
    if name.startswith("recompute."):
        return "recompute"
    if name.startswith("attention"):
        return "attention"
    if name.startswith("experts.") and name.split(".")[1] in ("up", "up_gate", "down"):
        return "expert_gemm"
    if any(p in name for p in _PERMUTE):
        return "permute"
    if name.startswith(_DENSE) and "norm" not in name:
        return "dense_gemm"
    return "elementwise"


def stage_seconds(trace: Mapping[str, Any], stage: int) -> dict[str, float]:
    """Seconds per kind (`op_kind`) on the ``ops`` track of ``stage`` (one micro-batch's
    operators), and per communication track (its whole span of events)."""
    events = trace["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e.get("name") == "thread_name"}
    out: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("ph") != "X" or e.get("pid") != stage:
            continue
        track = tracks.get((e["pid"], e["tid"]), "")
        if track == "compute":
            continue
        out[op_kind(e["name"]) if track == "ops" else track] += e["dur"] / 1e6
    return dict(out)


def _rows(source: str, indices: Iterable[int]) -> list[tuple[int, dict[str, str]]]:
    from simulate.validate.published import TRAINING_CORPUS

    with TRAINING_CORPUS.open() as f:
        rows = [r for r in csv.DictReader(f) if r["source"] == source]
    return [(i, rows[i]) for i in indices]


def _per_microbatch(data: Mapping[str, Any]) -> float:
    return float(data["iteration_time_s"]) / int(data["num_microbatches"])


CPU_SCALE = 1000.0  # the host floor's CPU time per kernel scaled up so that it alone counts


def main() -> None:
    import simulate.moe_host as moe_host
    from simulate.api import run
    from simulate.validate.published import _measured_tps, row_scenario, run_as_ran

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=int, nargs="+")
    ap.add_argument("--source", default="megatron-bridge")
    ap.add_argument("--no-store", action="store_true")
    a = ap.parse_args()
    traced = {}  # the last traced run's output

    def traced_run(sc: dict[str, Any]) -> Mapping[str, Any]:
        traced["out"] = run(sc, use_store=not a.no_store, use_predictors=not a.no_store,
                            trace=True)
        return traced["out"].data

    for i, row in _rows(a.source, a.rows):
        scenario = row_scenario(row, f"{a.source}-{i}")
        d, _ = run_as_ran(row, scenario, traced_run)  # the policy `validate published` runs
        out, policy = traced["out"], scenario["training"]["recompute"]
        host = {}
        for scale in (0.0, CPU_SCALE):
            rate = moe_host.host_kernel_s  # bound now: the patch below replaces the name
            with mock.patch.object(moe_host, "host_kernel_s",
                                   lambda hw, r=rate, s=scale: r(hw) * s):
                host[scale] = _per_microbatch(run(scenario, use_store=not a.no_store,
                                                  use_predictors=not a.no_store).data)
        mbs = d["num_microbatches"]
        tps = _measured_tps(row)[0]
        tokens = d["tokens_per_s_per_gpu"] * d["iteration_time_s"]
        measured = tokens / tps / mbs if tps else float("nan")
        parts = stage_seconds(out.trace or {"traceEvents": []}, d["critical_stage"])
        print(f"{i} {row['model']} {row['gpu']} {row['precision']} mb{row['micro_batch']} "
              f"{row['framework_version'].split()[-1]} recompute {policy}: s/micro-batch measured {measured:.4f} "
              f"predicted {_per_microbatch(d):.4f}, without host floor {host[0.0]:.4f}, "
              f"host CPU {host[CPU_SCALE] / CPU_SCALE:.4f} "
              f"({mbs} micro-batches); "
              + " ".join(f"{k} {v:.4f}" for k, v in sorted(parts.items())))


if __name__ == "__main__":
    main()
