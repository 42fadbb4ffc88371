# SPDX-License-Identifier: Apache-2.0
"""Serving metrics from finished sequences: latency percentiles, throughput, goodput, KV use."""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulate.serving.loop import Tenant
from simulate.serving.state import Sequence


@dataclass(frozen=True, slots=True, kw_only=True)
class Slo:
    """Service-level objectives; a request meets the SLO when every set bound holds."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None


def _stats(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {"mean": float("nan"), "p50": float("nan"), "p90": float("nan"),
                "p95": float("nan"), "p99": float("nan"), "max": float("nan")}
    return {
        "mean": float(values.mean()),
        "p50": float(np.percentile(values, 50)),
        "p90": float(np.percentile(values, 90)),
        "p95": float(np.percentile(values, 95)),
        "p99": float(np.percentile(values, 99)),
        "max": float(values.max()),
    }


def weighted_stats(values: np.ndarray, counts: np.ndarray) -> dict[str, float]:
    """`_stats` of a sample given as distinct values with their counts (percentile = the
    smallest value whose cumulative share reaches q, the inverted-CDF definition)."""
    if values.size == 0 or counts.sum() == 0:
        return _stats(np.array([]))
    order = np.argsort(values)
    v, c = values[order], counts[order].astype(float)
    cum = np.cumsum(c) / c.sum()

    def pct(q: float) -> float:
        return float(v[min(int(np.searchsorted(cum, q / 100.0)), v.size - 1)])

    return {"mean": float((v * c).sum() / c.sum()), "p50": pct(50), "p90": pct(90),
            "p95": pct(95), "p99": pct(99), "max": float(v[-1])}


def itl_stats(tenants: Seq[Tenant]) -> dict[str, float]:
    """Inter-token latency over every gap between consecutive tokens of every request, pooled
    (what `vllm bench serve` reports as ITL; its TPOT is the per-request mean instead)."""
    merged: dict[float, int] = {}
    for tenant in tenants:
        for gap, n in tenant.itl_gaps.items():
            merged[gap] = merged.get(gap, 0) + n
    return weighted_stats(np.fromiter(merged.keys(), float, len(merged)),
                          np.fromiter(merged.values(), float, len(merged)))


def latency_arrays(seqs: Seq[Sequence]) -> dict[str, np.ndarray]:
    arrival = np.array([s.req.arrival_s for s in seqs])
    first = np.array([s.first_token_s for s in seqs], dtype=float)
    finish = np.array([s.finish_s for s in seqs], dtype=float)
    outs = np.array([s.req.output_len for s in seqs])
    decode_tokens = np.maximum(outs - 1, 1)
    return {
        "ttft": first - arrival,
        "tpot": np.where(outs > 1, (finish - first) / decode_tokens, 0.0),
        "e2e": finish - arrival,
        "arrival": arrival,
        "finish": finish,
        "input_len": np.array([s.req.input_len for s in seqs]),
        "output_len": outs,
    }


def summarize_latencies(arr: dict[str, np.ndarray], slo: Slo | None = None) -> dict[str, Any]:
    """Latency percentiles, throughput and (with an SLO) goodput of finished requests."""
    n = int(arr["arrival"].size)
    makespan = float(arr["finish"].max() - arr["arrival"].min()) if n else 0.0
    out_tokens = float(arr["output_len"].sum())
    in_tokens = float(arr["input_len"].sum())
    result: dict[str, Any] = {
        "num_requests": n,
        "duration_s": makespan,
        "ttft_s": _stats(arr["ttft"]),
        "tpot_s": _stats(arr["tpot"][arr["output_len"] > 1]),
        "e2e_latency_s": _stats(arr["e2e"]),
        "throughput_tokens_per_s": out_tokens / makespan if makespan else 0.0,
        "total_tokens_per_s": (out_tokens + in_tokens) / makespan if makespan else 0.0,
        "requests_per_s": n / makespan if makespan else 0.0,
    }
    if slo is not None and (slo.ttft_s is not None or slo.tpot_s is not None
                            or slo.e2e_s is not None):
        ok = np.ones(n, dtype=bool)
        if slo.ttft_s is not None:
            ok &= arr["ttft"] <= slo.ttft_s
        if slo.tpot_s is not None:
            ok &= arr["tpot"] <= slo.tpot_s
        if slo.e2e_s is not None:
            ok &= arr["e2e"] <= slo.e2e_s
        result["slo_attainment"] = float(ok.mean()) if n else 0.0
        result["goodput_requests_per_s"] = float(ok.sum()) / makespan if makespan else 0.0
    return result


def summarize_tenants(tenants: Seq[Tenant], slo: Slo | None = None) -> dict[str, Any]:
    """Pooled metrics of tenants serving one stream (data-parallel replicas) or one tenant."""
    # warm-up requests (a benchmark's ramp, e.g. genai-perf's unstable first window) ran and
    # loaded the engine but are not measured
    seqs = [s for t in tenants for s in t.sequences if s.req.id >= t.workload.warmup]
    result = summarize_latencies(latency_arrays(seqs), slo)
    result["itl_s"] = itl_stats(tenants)
    makespan = result["duration_s"]
    result["preemptions"] = sum(t.state.preemptions for t in tenants if t.state)
    result["steps"] = sum(t.steps for t in tenants)
    busy = sum(t.busy_s for t in tenants) / len(tenants) if tenants else 0.0
    result["gpu_busy_fraction"] = busy / makespan if makespan else 0.0
    result["kv_cache"] = _kv_summary(tenants[0]) if tenants else {}
    return result


def summarize_tenant(tenant: Tenant, slo: Slo | None = None) -> dict[str, Any]:
    return summarize_tenants([tenant], slo)


def _kv_summary(tenant: Tenant) -> dict[str, float]:
    pool = tenant.state.pool if tenant.state else None
    if pool is None or not tenant.kv_trace:
        return {}
    times = np.array([t for t, _ in tenant.kv_trace])
    util = np.array([u for _, u in tenant.kv_trace])
    dt = np.diff(times, prepend=times[0])
    weighted = float((util * dt).sum() / dt.sum()) if dt.sum() > 0 else float(util.mean())
    return {
        "blocks": float(pool.num_blocks),
        "block_size_tokens": float(pool.block_size),
        "capacity_tokens": float(pool.num_blocks * pool.block_size),
        "peak_utilisation": pool.peak / pool.num_blocks,
        "mean_utilisation": weighted,
    }


def kv_timeline(tenant: Tenant, points: int = 200) -> list[tuple[float, float]]:
    """KV utilisation over time, thinned to about `points` samples for output."""
    trace = tenant.kv_trace
    if len(trace) <= points:
        return list(trace)
    idx = np.linspace(0, len(trace) - 1, points).astype(int)
    return [trace[i] for i in idx]



