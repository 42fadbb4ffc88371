# SPDX-License-Identifier: Apache-2.0
"""What requests arrive: the ``serving.arrival`` block and the request lengths, parsed once.

`parse_arrival` and `parse_length` are the one place these are checked (the scenario parse
calls them; `simulate.serving.workload.make_workload` calls them only for callers that build a
workload from a plain mapping). What needs the trace file's content (whether it has arrival
times) is checked when the workload is made.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from analytical.errors import SpecError
from analytical.inputs import check_path, check_work
from simulate.fields import check_keys, choice_value, float_field, int_field, int_value

__all__ = ["ARRIVAL_KEYS", "ArrivalProcess", "ArrivalSpec", "Length", "LognormalLength",
           "MAX_REQUESTS", "MAX_TOKENS", "UniformLength", "draw_lengths", "max_length",
           "parse_arrival", "parse_length", "parse_trace_arrival"]

# The serving loop steps every request through prefill and decode; a million requests run for
# hours, so larger workloads are refused before any is generated (sample fewer requests: latency
# percentiles settle within a few thousand).
MAX_REQUESTS = 200_000
MAX_TOKENS = 10_000_000  # a prompt or generation length beyond any model's context
MAX_RATE = 1e6  # requests/s (qps) or a ratio (cv): beyond any single deployment
ARRIVAL_KEYS = {"process", "qps", "cv", "num_requests", "seed", "concurrency", "trace",
                "warmup_requests"}


class ArrivalProcess(StrEnum):
    POISSON = "poisson"  # exponential gaps at rate qps
    GAMMA = "gamma"  # gamma gaps, mean 1/qps, coefficient of variation cv
    CLOSED = "closed"  # `concurrency` clients, each sending when its last request finished
    BURST = "burst"  # everything at t=0: the static-batch / offline-throughput case


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrivalSpec:
    """The ``serving.arrival`` block. With a ``trace`` the file gives the requests (and their
    times when it has them; else ``process``, Poisson when unset, times them)."""

    process: ArrivalProcess | None = ArrivalProcess.POISSON  # None: a trace, process unset
    num_requests: int = 0  # 0 only with a trace
    qps: float | None = None
    cv: float | None = None
    seed: int = 0
    concurrency: int = 0  # closed loop only
    trace: str | None = None  # path, relative to the scenario's directory
    warmup_requests: int = 0  # run but left out of the statistics (not with a trace)


def _positive(block: Mapping[str, Any], key: str, field: str) -> float:
    return float_field(block, key, field, exclusive_min=True, maximum=MAX_RATE)


def parse_arrival(block: Any, field: str = "serving.arrival") -> ArrivalSpec:
    """Check the arrival block; each number where it is read, the process by name."""
    b = check_keys(block, field, ARRIVAL_KEYS)
    if "trace" in b:
        return parse_trace_arrival(b, field)
    process = choice_value(b.get("process", "poisson"), f"{field}.process", ArrivalProcess)
    n = int_field(b, "num_requests", field)
    check_work(f"{field}.num_requests", n, MAX_REQUESTS, "requests")
    seed = int_field(b, "seed", field, default=0, minimum=0)
    qps = cv = None
    concurrency = 0
    if process in (ArrivalProcess.POISSON, ArrivalProcess.GAMMA):
        qps = _positive(b, "qps", field)
    if process is ArrivalProcess.GAMMA:
        cv = _positive(b, "cv", field)
    if process is ArrivalProcess.CLOSED:
        concurrency = int_field(b, "concurrency", field, maximum=MAX_REQUESTS)
    warmup = b.get("warmup_requests", 0)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup < n:
        raise SpecError(f"{field}.warmup_requests", f"must be an int in [0, {n}), got {warmup!r}")
    return ArrivalSpec(process=process, num_requests=n, qps=qps, cv=cv, seed=seed,
                       concurrency=concurrency, warmup_requests=warmup)


def parse_trace_arrival(block: Any, field: str = "serving.arrival") -> ArrivalSpec:
    """A trace's arrival block: the path (when given) and what would time a length-only trace."""
    b = check_keys(block, field, ARRIVAL_KEYS)
    trace = b.get("trace")
    if trace is not None and not isinstance(trace, str):
        raise SpecError(f"{field}.trace", f"must be a file path, got {trace!r}")
    if trace is not None:
        check_path(trace, f"{field}.trace")
    process = None
    if "process" in b:
        process = choice_value(b["process"], f"{field}.process", ArrivalProcess)
    return ArrivalSpec(
        process=process, trace=trace,
        qps=_positive(b, "qps", field) if b.get("qps") is not None else None,
        cv=_positive(b, "cv", field) if b.get("cv") is not None else None,
        seed=int_field(b, "seed", field, default=0, minimum=0))


@dataclass(frozen=True, slots=True, kw_only=True)
class UniformLength:
    min: int
    max: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LognormalLength:
    mean: float
    sigma: float
    max: int  # lengths are clipped to [1, max]


Length = int | UniformLength | LognormalLength


def parse_length(value: Any, field: str) -> Length:
    """A fixed length, or a ``{dist: uniform|lognormal, ...}`` mapping checked field by field."""
    if isinstance(value, (UniformLength, LognormalLength)):
        return value
    if not isinstance(value, Mapping):
        if value is None:
            raise SpecError(field, "missing")
        return int_value(value, field, maximum=MAX_TOKENS)
    dist = value.get("dist", "uniform")
    if dist == "uniform":
        d = check_keys(value, field, {"dist", "min", "max"})
        lo = int_field(d, "min", field, default=1, maximum=MAX_TOKENS)
        hi = int_field(d, "max", field, default=1, maximum=MAX_TOKENS)
        if lo > hi:
            raise SpecError(field, f"need min <= max, got min={lo}, max={hi}")
        return UniformLength(min=lo, max=hi)
    if dist == "lognormal":
        d = check_keys(value, field, {"dist", "mean", "sigma", "max"}, {"mean"})
        mean = float_field(d, "mean", field, minimum=1.0, maximum=MAX_TOKENS)
        sigma = float_field(d, "sigma", field, default=0.5, maximum=10.0)
        cap = int_field(d, "max", field, default=max(1, int(10 * mean)), maximum=MAX_TOKENS)
        return LognormalLength(mean=mean, sigma=sigma, max=cap)
    raise SpecError(f"{field}.dist", f"unknown {dist!r}; known: uniform, lognormal")


def draw_lengths(rng: np.random.Generator, n: int, length: Length) -> np.ndarray:
    """``n`` request lengths (a fixed length draws nothing from ``rng``)."""
    if isinstance(length, UniformLength):
        return rng.integers(length.min, length.max + 1, size=n)
    if isinstance(length, LognormalLength):
        values = rng.lognormal(math.log(length.mean), length.sigma, size=n)
        return np.clip(np.rint(values), 1, length.max).astype(np.int64)
    return np.full(n, length, dtype=np.int64)


def max_length(length: Length) -> int:
    """The longest length ``length`` can give."""
    return length if isinstance(length, int) else length.max
