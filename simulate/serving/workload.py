# SPDX-License-Identifier: Apache-2.0
"""Request streams: Poisson or gamma arrivals with a seed, closed-loop clients, or a trace file."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analytical.errors import SpecError


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
    """A length column: an int (fixed) or {dist: uniform|lognormal, ...}."""
    if isinstance(spec, int) and not isinstance(spec, bool) and spec > 0:
        return np.full(n, spec, dtype=np.int64)
    if isinstance(spec, Mapping):
        dist = spec.get("dist", "uniform")
        if dist == "uniform":
            lo, hi = int(spec.get("min", 1)), int(spec.get("max", 1))
            if not 0 < lo <= hi:
                raise SpecError(field, f"need 0 < min <= max, got {lo}, {hi}")
            return rng.integers(lo, hi + 1, size=n)
        if dist == "lognormal":
            mean, sigma = float(spec.get("mean", 0)), float(spec.get("sigma", 0.5))
            if mean <= 0:
                raise SpecError(f"{field}.mean", "must be > 0 (the median length)")
            values = rng.lognormal(np.log(mean), sigma, size=n)
            cap = int(spec.get("max", 10 * mean))
            return np.clip(np.rint(values), 1, cap).astype(np.int64)
        raise SpecError(f"{field}.dist", f"unknown {dist!r}; known: uniform, lognormal")
    raise SpecError(field, f"expected a positive int or a distribution mapping, got {spec!r}")


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
    if "trace" in arrival:
        path = Path(arrival["trace"])
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        return load_trace(path, prefix_hit=prefix_hit)
    process = arrival.get("process", "poisson")
    n = arrival.get("num_requests")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise SpecError(f"{field}.num_requests", f"must be a positive int, got {n!r}")
    seed = arrival.get("seed", 0)
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
        concurrency = int(_positive(arrival, "concurrency", field))
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
    value = block.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise SpecError(f"{field}.{key}", f"must be a positive number, got {value!r}")
    return float(value)


def load_trace(path: Path, *, prefix_hit: float = 0.0) -> Workload:
    """A CSV with columns arrival_s, input_len, output_len (and optionally cached_prefix)."""
    if not path.is_file():
        raise SpecError("serving.arrival.trace", f"no such file: {path}")
    reqs = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        need = {"arrival_s", "input_len", "output_len"}
        missing = need - set(reader.fieldnames or ())
        if missing:
            raise SpecError("serving.arrival.trace", f"{path}: missing columns {sorted(missing)}")
        for i, row in enumerate(reader):
            try:
                arrival, inp, out = float(row["arrival_s"]), int(row["input_len"]), int(
                    row["output_len"])
            except ValueError as exc:
                raise SpecError("serving.arrival.trace", f"{path} line {i + 2}: {exc}") from None
            if inp <= 0 or out <= 0 or arrival < 0:
                raise SpecError("serving.arrival.trace",
                                f"{path} line {i + 2}: lengths must be > 0 and arrival >= 0")
            cached = int(row["cached_prefix"]) if row.get("cached_prefix") else _cached(
                inp, prefix_hit)
            reqs.append(Request(id=i, arrival_s=arrival, input_len=inp, output_len=out,
                                cached_prefix=min(cached, inp - 1)))
    reqs.sort(key=lambda r: (r.arrival_s, r.id))
    return Workload(requests=tuple(reqs))
