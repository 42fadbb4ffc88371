# SPDX-License-Identifier: Apache-2.0
"""Request streams: Poisson or gamma arrivals with a seed, closed-loop clients, or a trace file."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analytical.errors import SpecError
from analytical.inputs import check_path, check_work, read_csv_rows
from simulate.fields import check_keys, float_field, float_value, int_field, int_value

# The serving loop steps every request through prefill and decode; a million requests run for
# hours, so larger workloads are refused before any is generated (sample fewer requests: latency
# percentiles settle within a few thousand).
MAX_REQUESTS = 200_000
MAX_TOKENS = 10_000_000
ARRIVAL_KEYS = {"process", "qps", "cv", "num_requests", "seed", "concurrency", "trace",
                "warmup_requests"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One request: arrives, has a prompt of `input_len` tokens, generates `output_len` tokens."""

    id: int
    arrival_s: float
    input_len: int
    output_len: int
    cached_prefix: int = 0  # prompt tokens already in the prefix cache (no prefill compute)


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """Requests in arrival order; `concurrency` > 0 means a closed loop of that many clients
    (each client sends its next request when its last one finishes; arrival_s is ignored)."""

    requests: tuple[Request, ...]
    concurrency: int = 0
    warmup: int = 0  # requests with id < warmup run but are left out of the statistics

    @property
    def closed(self) -> bool:
        return self.concurrency > 0


def _lengths(rng: np.random.Generator, n: int, spec: Any, field: str) -> np.ndarray:
    """A length column: an int (fixed) or {dist: uniform|lognormal, ...}; every number checked
    here too, since benchmarks build workloads without a scenario."""
    if not isinstance(spec, Mapping):
        return np.full(n, int_value(spec, field, maximum=MAX_TOKENS), dtype=np.int64)
    dist = spec.get("dist", "uniform")
    if dist == "uniform":
        lo = int_field(spec, "min", field, default=1, maximum=MAX_TOKENS)
        hi = int_field(spec, "max", field, default=1, maximum=MAX_TOKENS)
        if lo > hi:
            raise SpecError(field, f"need min <= max, got {lo}, {hi}")
        return rng.integers(lo, hi + 1, size=n)
    if dist == "lognormal":
        mean = float_field(spec, "mean", field, minimum=1.0, maximum=MAX_TOKENS)
        sigma = float_field(spec, "sigma", field, default=0.5, maximum=10.0)
        cap = int_field(spec, "max", field, default=max(1, int(10 * mean)), maximum=MAX_TOKENS)
        values = rng.lognormal(math.log(mean), sigma, size=n)
        return np.clip(np.rint(values), 1, cap).astype(np.int64)
    raise SpecError(f"{field}.dist", f"unknown {dist!r}; known: uniform, lognormal")


def poisson_arrivals(rng: np.random.Generator, n: int, qps: float) -> np.ndarray:
    """Exponential inter-arrival gaps with rate qps; the first request arrives at t=0."""
    gaps = rng.exponential(1.0 / qps, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def gamma_arrivals(rng: np.random.Generator, n: int, qps: float, cv: float) -> np.ndarray:
    """Gamma inter-arrivals with mean 1/qps and coefficient of variation cv (cv=1: Poisson)."""
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, 1.0 / (qps * shape), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def make_workload(arrival: Mapping[str, Any], *, input_len: Any, output_len: Any,
                  prefix_hit: float = 0.0, base_dir: Path | None = None,
                  field: str = "serving.arrival") -> Workload:
    """Build a workload from the scenario's ``serving.arrival`` block."""
    check_keys(arrival, field, ARRIVAL_KEYS)
    prefix_hit = float_value(prefix_hit, "inference.prefix_cache.hit_ratio", maximum=1.0,
                             exclusive_max=True)
    if "trace" in arrival:
        if not isinstance(arrival["trace"], str):
            raise SpecError(f"{field}.trace", f"must be a file path, got {arrival['trace']!r}")
        path = check_path(arrival["trace"], f"{field}.trace")
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        from simulate.serving.trace_formats import trace_workload  # noqa: PLC0415 - cycle
        return trace_workload(path, arrival, prefix_hit=prefix_hit, field=field)
    process = arrival.get("process", "poisson")
    n = int_field(arrival, "num_requests", field)
    check_work(f"{field}.num_requests", n, MAX_REQUESTS, "requests")
    seed = int_field(arrival, "seed", field, default=0, minimum=0)
    rng = np.random.default_rng(seed)
    ins = _lengths(rng, n, input_len, "inference.input_len")
    outs = _lengths(rng, n, output_len, "inference.output_len")
    concurrency = 0
    if process == "poisson":
        times = poisson_arrivals(rng, n, _positive(arrival, "qps", field))
    elif process == "gamma":
        times = gamma_arrivals(rng, n, _positive(arrival, "qps", field),
                               _positive(arrival, "cv", field))
    elif process == "closed":
        concurrency = int_field(arrival, "concurrency", field, maximum=MAX_REQUESTS)
        times = np.zeros(n)
    elif process == "burst":  # everything at t=0: the static-batch / offline-throughput case
        times = np.zeros(n)
    else:
        raise SpecError(f"{field}.process",
                        f"unknown {process!r}; known: poisson, gamma, closed, burst, or trace")
    reqs = tuple(
        Request(id=i, arrival_s=float(times[i]), input_len=int(ins[i]), output_len=int(outs[i]),
                cached_prefix=_cached(int(ins[i]), prefix_hit))
        for i in range(n)
    )
    warmup = arrival.get("warmup_requests", 0)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup < n:
        raise SpecError(f"{field}.warmup_requests", f"must be an int in [0, {n}), got {warmup!r}")
    return Workload(requests=reqs, concurrency=concurrency, warmup=warmup)


def _cached(input_len: int, prefix_hit: float) -> int:
    """Prompt tokens served from the prefix cache; at least one token is always computed."""
    return min(int(input_len * prefix_hit), input_len - 1)


def _positive(block: Mapping[str, Any], key: str, field: str) -> float:
    """A finite rate or ratio > 0 (qps, cv); 1e6 requests/s is beyond any single deployment."""
    return float_field(block, key, field, exclusive_min=True, maximum=1e6)


def load_trace(path: Path, *, prefix_hit: float = 0.0,
               field: str = "serving.arrival.trace") -> Workload:
    """A CSV with columns arrival_s, input_len, output_len (and optionally cached_prefix)."""
    _, rows = read_csv_rows(path, field, required=("arrival_s", "input_len", "output_len"),
                            max_rows=MAX_REQUESTS)
    reqs = [_trace_request(i, row, prefix_hit, field, path) for i, row in enumerate(rows)]
    reqs.sort(key=lambda r: (r.arrival_s, r.id))
    return Workload(requests=tuple(reqs))


def _trace_request(i: int, row: Mapping[str, str | None], prefix_hit: float, field: str,
                   path: Path) -> Request:
    """One CSV row (line i + 2) as a request; each cell is parsed and range-checked."""
    where = f"{field} line {i + 2}"

    def number(column: str, kind: type, minimum: float) -> Any:
        text = row.get(column)
        try:
            value = kind(str(text).strip())
        except (TypeError, ValueError):
            raise SpecError(f"{where}.{column}", f"not a{'n integer' if kind is int else ' number'}:"
                            f" {text!r}", source=str(path)) from None
        if kind is float:
            return float_value(value, f"{where}.{column}", minimum=minimum, source=str(path))
        return int_value(value, f"{where}.{column}", minimum=int(minimum), maximum=MAX_TOKENS,
                         source=str(path))

    arrival, inp = number("arrival_s", float, 0.0), number("input_len", int, 1)
    out = number("output_len", int, 1)
    cached = number("cached_prefix", int, 0) if row.get("cached_prefix") else _cached(
        inp, prefix_hit)
    return Request(id=i, arrival_s=arrival, input_len=inp, output_len=out,
                   cached_prefix=min(cached, inp - 1))
