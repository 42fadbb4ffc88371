# SPDX-License-Identifier: Apache-2.0
"""Serving metrics from finished sequences: latency percentiles, throughput, goodput, KV use.

They are typed (`ServingMetrics`, `LatencyStats`, `LoopMetrics`, `KvCacheSummary`) from the
summary to `simulate.inference.result`; `ServingMetrics.to_dict` is the JSON at the edge."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence as Seq
from dataclasses import dataclass, fields, replace
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


def _flat(record: LatencyStats | KvCacheSummary) -> dict[str, float]:
    """A record of numbers as its JSON object, keys in field order."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyStats:
    """Mean, percentiles and maximum of one latency over requests (s); NaN: no request had it."""

    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float

    def to_dict(self) -> dict[str, float]:
        return _flat(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class KvCacheSummary:
    """The KV block pool of one instance and how full it ran (time-weighted mean)."""

    blocks: float
    block_size_tokens: float
    capacity_tokens: float
    peak_utilisation: float
    mean_utilisation: float

    def to_dict(self) -> dict[str, float]:
        return _flat(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopMetrics:
    """What the simulated engine loop adds to the request latencies (`summarize_tenants`)."""

    itl_s: LatencyStats
    steps: int
    gpu_busy_fraction: float
    kv_cache: KvCacheSummary | None  # None: no KV pool was traced


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingMetrics:
    """The serving summary of finished requests: latencies, throughput, goodput (with an SLO),
    preemptions and, from the engine loop, ITL, steps, GPU busy share and KV use."""

    num_requests: int
    duration_s: float
    ttft_s: LatencyStats
    tpot_s: LatencyStats
    e2e_latency_s: LatencyStats
    throughput_tokens_per_s: float
    total_tokens_per_s: float
    requests_per_s: float
    slo_attainment: float | None = None  # share of requests meeting every SLO bound set
    goodput_requests_per_s: float | None = None
    preemptions: int | None = None
    loop: LoopMetrics | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON keys (``llmsim simulate --json``): unset parts are left out."""
        out: dict[str, Any] = {
            "num_requests": self.num_requests, "duration_s": self.duration_s,
            "ttft_s": self.ttft_s.to_dict(), "tpot_s": self.tpot_s.to_dict(),
            "e2e_latency_s": self.e2e_latency_s.to_dict(),
            "throughput_tokens_per_s": self.throughput_tokens_per_s,
            "total_tokens_per_s": self.total_tokens_per_s, "requests_per_s": self.requests_per_s}
        if self.slo_attainment is not None:
            out["slo_attainment"] = self.slo_attainment
            out["goodput_requests_per_s"] = self.goodput_requests_per_s
        if self.loop is not None:
            out["itl_s"] = self.loop.itl_s.to_dict()
        if self.preemptions is not None:
            out["preemptions"] = self.preemptions
        if self.loop is not None:
            kv = self.loop.kv_cache
            out.update({"steps": self.loop.steps, "gpu_busy_fraction": self.loop.gpu_busy_fraction,
                        "kv_cache": {} if kv is None else kv.to_dict()})
        return out


def _stats(values: np.ndarray) -> LatencyStats:
    if values.size == 0:
        nan = float("nan")
        return LatencyStats(mean=nan, p50=nan, p90=nan, p95=nan, p99=nan, max=nan)
    return LatencyStats(
        mean=float(values.mean()),
        p50=float(np.percentile(values, 50)),
        p90=float(np.percentile(values, 90)),
        p95=float(np.percentile(values, 95)),
        p99=float(np.percentile(values, 99)),
        max=float(values.max()),
    )


def weighted_stats(values: np.ndarray, counts: np.ndarray) -> LatencyStats:
    """`_stats` of a sample given as distinct values with their counts (percentile = the
    smallest value whose cumulative share reaches q, the inverted-CDF definition)."""
    if values.size == 0 or counts.sum() == 0:
        return _stats(np.array([]))
    order = np.argsort(values)
    v, c = values[order], counts[order].astype(float)
    cum = np.cumsum(c) / c.sum()

    def pct(q: float) -> float:
        return float(v[min(int(np.searchsorted(cum, q / 100.0)), v.size - 1)])

    return LatencyStats(mean=float((v * c).sum() / c.sum()), p50=pct(50), p90=pct(90),
                        p95=pct(95), p99=pct(99), max=float(v[-1]))


def itl_stats(tenants: Seq[Tenant]) -> LatencyStats:
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
        "request_id": np.array([s.req.id for s in seqs]),
        # when the request reached the scheduler's queue and when its first chunk was scheduled
        # (TTFT = front end + queueing + prefill steps; `ttft_parts`)
        "ready": np.array([s.ready_s for s in seqs], dtype=float),
        "admitted": np.array([s.admitted_s for s in seqs], dtype=float),
    }


def ttft_parts(arr: Mapping[str, np.ndarray], warmup: int = 0) -> dict[str, float]:
    """Mean TTFT split into where the time went (s), over requests with id >= ``warmup``:
    ``frontend`` (client send to the scheduler's queue: the API server), ``queue`` (waiting for
    the step that takes the request's first prefill chunk) and ``prefill`` (that step's start to
    the first token: the prompt's chunks and the steps it shares with other requests)."""
    keep = arr["request_id"] >= warmup
    arrival, ready = arr["arrival"][keep], arr["ready"][keep]
    admitted, first = arr["admitted"][keep], arr["ttft"][keep] + arrival
    if not arrival.size:
        return {}
    return {"frontend": float(np.mean(ready - arrival)), "queue": float(np.mean(admitted - ready)),
            "prefill": float(np.mean(first - admitted))}


def summarize_latencies(arr: dict[str, np.ndarray], slo: Slo | None = None) -> ServingMetrics:
    """Latency percentiles, throughput and (with an SLO) goodput of finished requests."""
    n = int(arr["arrival"].size)
    makespan = float(arr["finish"].max() - arr["arrival"].min()) if n else 0.0
    out_tokens = float(arr["output_len"].sum())
    in_tokens = float(arr["input_len"].sum())
    result = ServingMetrics(
        num_requests=n,
        duration_s=makespan,
        ttft_s=_stats(arr["ttft"]),
        tpot_s=_stats(arr["tpot"][arr["output_len"] > 1]),
        e2e_latency_s=_stats(arr["e2e"]),
        throughput_tokens_per_s=out_tokens / makespan if makespan else 0.0,
        total_tokens_per_s=(out_tokens + in_tokens) / makespan if makespan else 0.0,
        requests_per_s=n / makespan if makespan else 0.0,
    )
    if slo is not None and (slo.ttft_s is not None or slo.tpot_s is not None
                            or slo.e2e_s is not None):
        ok = np.ones(n, dtype=bool)
        if slo.ttft_s is not None:
            ok &= arr["ttft"] <= slo.ttft_s
        if slo.tpot_s is not None:
            ok &= arr["tpot"] <= slo.tpot_s
        if slo.e2e_s is not None:
            ok &= arr["e2e"] <= slo.e2e_s
        result = replace(result, slo_attainment=float(ok.mean()) if n else 0.0,
                         goodput_requests_per_s=float(ok.sum()) / makespan if makespan else 0.0)
    return result


def summarize_tenants(tenants: Seq[Tenant], slo: Slo | None = None) -> ServingMetrics:
    """Pooled metrics of tenants serving one stream (data-parallel replicas) or one tenant."""
    # warm-up requests (a benchmark's ramp, e.g. genai-perf's unstable first window) ran and
    # loaded the engine but are not measured
    seqs = [s for t in tenants for s in t.sequences if s.req.id >= t.workload.warmup]
    result = summarize_latencies(latency_arrays(seqs), slo)
    makespan = result.duration_s
    busy = sum(t.busy_s for t in tenants) / len(tenants) if tenants else 0.0
    loop = LoopMetrics(itl_s=itl_stats(tenants), steps=sum(t.steps for t in tenants),
                       gpu_busy_fraction=busy / makespan if makespan else 0.0,
                       kv_cache=_kv_summary(tenants[0]) if tenants else None)
    return replace(result, preemptions=sum(t.state.preemptions for t in tenants if t.state),
                   loop=loop)


def summarize_tenant(tenant: Tenant, slo: Slo | None = None) -> ServingMetrics:
    return summarize_tenants([tenant], slo)


def _kv_summary(tenant: Tenant) -> KvCacheSummary | None:
    pool = tenant.state.pool if tenant.state else None
    if pool is None or not tenant.kv_trace:
        return None
    times = np.array([t for t, _ in tenant.kv_trace])
    util = np.array([u for _, u in tenant.kv_trace])
    dt = np.diff(times, prepend=times[0])
    weighted = float((util * dt).sum() / dt.sum()) if dt.sum() > 0 else float(util.mean())
    return KvCacheSummary(
        blocks=float(pool.num_blocks),
        block_size_tokens=float(pool.block_size),
        capacity_tokens=float(pool.num_blocks * pool.block_size),
        peak_utilisation=pool.peak / pool.num_blocks,
        mean_utilisation=weighted,
    )


def kv_timeline(tenant: Tenant, points: int = 200) -> list[tuple[float, float]]:
    """KV utilisation over time, thinned to about `points` samples for output."""
    trace = tenant.kv_trace
    if len(trace) <= points:
        return list(trace)
    idx = np.linspace(0, len(trace) - 1, points).astype(int)
    return [trace[i] for i in idx]



