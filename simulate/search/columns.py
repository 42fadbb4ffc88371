# SPDX-License-Identifier: Apache-2.0
"""One searched training layout as a flat table row (the columns ``llmsim search`` prints and
writes to CSV). The layout's unset fields take the scenario parser's defaults
(`simulate.scenario.parse_training`), so the table shows what was simulated, and the defaults
are stated once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulate.scenario import parse_training

__all__ = ["layout_row", "tie_text"]


def layout_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Rank, GPUs, every layout field, throughput, memory and time breakdown of a search row."""
    spec = parse_training(row["layout"])
    par = spec.parallel
    out = {"rank": row["rank"], "gpu": row.get("gpu", ""), "gpus": row["num_gpus"],
           "tp": par.tp, "pp": par.pp, "dp": par.dp, "cp": par.cp, "ep": par.ep, "vpp": par.vpp,
           "sp": par.sp, "zero": par.zero_stage,
           "mb": spec.micro_batch, "recompute": str(spec.recompute),
           "schedule": str(spec.schedule), "seq_len": spec.seq_len,
           "global_batch": spec.global_batch,
           "tp_overlap": spec.overlap.tp_comm, "dp_overlap": spec.overlap.dp_grad,
           "offload": "+".join(k for k in ("weights", "activations", "optimizer")
                               if getattr(spec.offload, k)) or "none",
           "tokens/s": round(row["tokens_per_s"]),
           "MFU": round(row["mfu"], 4), "GiB": round(row["memory_per_gpu_gib"], 1),
           "headroom_GiB": round(row.get("memory_headroom_gib", 0.0), 1),
           **{f"{k}_s": round(v, 3) for k, v in row["breakdown_s"].items()},
           **({"$/Mtok": round(row["usd_per_million_tokens"], 4)}
              if "usd_per_million_tokens" in row else {})}
    if row.get("ties"):
        out["ties"] = "; ".join(tie_text(t) for t in row["ties"])
    return out


def tie_text(tie: Mapping[str, Any]) -> str:
    """One tied alternative: what it changes and its memory, e.g. ``zero=1 (41.2 GiB)``."""
    changes = ",".join(f"{k.split('.')[-1]}={v}" for k, v in tie.items()
                       if k != "memory_per_gpu_gib")
    return f"{changes} ({tie['memory_per_gpu_gib']:.1f} GiB)"
