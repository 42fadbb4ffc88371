# SPDX-License-Identifier: Apache-2.0
"""Files a serving prediction can write: a Perfetto trace of batches over time and latency CDFs.

The trace has one process per tenant (model instance or data-parallel replica) with one track of
steps (each step a complete event carrying its prefill tokens and decode batch) and a counter
track of KV-cache use. `simulate.trace.check_trace` validates the event subset we write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulate.serving.loop import StepRecord


def serving_trace(steps: Sequence[StepRecord], *, name: str) -> dict[str, Any]:
    """Chrome trace-event JSON (microseconds) of the executed steps."""
    tenants = sorted({s.tenant for s in steps})
    pids = {t: i for i, t in enumerate(tenants)}
    events: list[dict[str, Any]] = []
    for tenant, pid in pids.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": f"{name} {tenant}"}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": "steps"}})
    for s in steps:
        kind = "prefill" if s.prefill_tokens and not s.decode_seqs else (
            "mixed" if s.prefill_tokens else "decode")
        events.append({"name": kind, "cat": "step", "ph": "X", "pid": pids[s.tenant], "tid": 0,
                       "ts": s.start_s * 1e6, "dur": max(s.end_s - s.start_s, 0.0) * 1e6,
                       "args": {"prefill_tokens": s.prefill_tokens,
                                "decode_seqs": s.decode_seqs}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def plot_latency_cdfs(latencies: Mapping[str, np.ndarray], path: str | Path, *,
                      title: str) -> None:
    """One panel per metric: TTFT and TPOT in milliseconds, E2E in seconds (empirical CDFs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [("ttft", "TTFT (ms)", 1e3), ("tpot", "TPOT (ms)", 1e3), ("e2e", "E2E latency (s)", 1.0)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(13, 3.6))
    for ax, (key, label, scale) in zip(axes, metrics, strict=True):
        values = np.sort(np.asarray(latencies[key], dtype=float)) * scale
        values = values[np.isfinite(values)]
        if values.size:
            ax.plot(values, np.arange(1, values.size + 1) / values.size)
            for q in (0.5, 0.9, 0.99):
                ax.axvline(np.quantile(values, q), ls=":", lw=0.8, color="grey")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def inference_rows(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Summary rows for people: scalars as they are, latency stats as mean / p50 / p90 / p99."""
    rows: list[dict[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, Mapping) and {"mean", "p50", "p90", "p99"} <= set(value):
            text = " / ".join(f"{value[q] * 1e3:,.2f}" for q in ("mean", "p50", "p90", "p99"))
            rows.append({"field": f"{key.removesuffix('_s')} ms (mean/p50/p90/p99)",
                         "value": text})
        elif isinstance(value, Mapping) and key in ("memory", "kv_cache", "engine_coverage",
                                                     "speculative"):
            rows += [{"field": f"{key}.{k}", "value": v} for k, v in value.items()
                     if not isinstance(v, (Mapping, list))]
        elif key == "tenants" and isinstance(value, Mapping):
            for name, metrics in value.items():
                rows += [{"field": f"{name}.{r['field']}", "value": r["value"]}
                         for r in inference_rows(metrics)]
        elif not isinstance(value, (Mapping, list)):
            field = f"{key.removesuffix('_s')} (ms)" if key in ("ttft_s", "tpot_s",
                                                                "e2e_latency_s") else key
            shown = value * 1e3 if key in ("ttft_s", "tpot_s", "e2e_latency_s") and isinstance(
                value, float) else value
            rows.append({"field": field, "value": shown})
    return rows
