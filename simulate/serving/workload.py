# SPDX-License-Identifier: Apache-2.0
"""Request streams: Poisson or gamma arrivals with a seed, closed-loop clients, or a trace file.

The arrival block and the lengths come parsed (`simulate.serving.arrival`); this module draws the
requests from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analytical.errors import SpecError
from analytical.inputs import check_path, read_csv_rows
from simulate.fields import float_value, int_value
from simulate.serving.arrival import (
    MAX_REQUESTS,
    MAX_TOKENS,
    ArrivalProcess,
    ArrivalSpec,
    Length,
    draw_lengths,
    parse_arrival,
    parse_length,
)


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


def make_workload(arrival: ArrivalSpec | Mapping[str, Any], *, input_len: Length | Any,
                  output_len: Length | Any, prefix_hit: float = 0.0, warm_requests: int = 0,
                  base_dir: Path | None = None, field: str = "serving.arrival") -> Workload:
    """The requests of an arrival spec (a plain mapping and plain lengths are parsed first, for
    callers that build workloads without a scenario). The first ``warm_requests`` prompts are
    whole in the prefix cache (a client re-sending prompts an earlier run on the same server
    sent): all but the last token is reused, as vLLM recomputes the last one on a full hit
    (vllm/v1/core/kv_cache_manager.py get_computed_blocks: max_cache_hit_length = num_tokens - 1)."""
    if not isinstance(arrival, ArrivalSpec):
        arrival = parse_arrival(arrival, field)
    prefix_hit = float_value(prefix_hit, "inference.prefix_cache.hit_ratio", maximum=1.0,
                             exclusive_max=True)
    if arrival.trace is not None:
        path = check_path(arrival.trace, f"{field}.trace")
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        from simulate.serving.trace_formats import trace_workload  # noqa: PLC0415 - cycle
        return trace_workload(path, arrival, prefix_hit=prefix_hit, field=field)
    n = arrival.num_requests
    rng = np.random.default_rng(arrival.seed)
    ins = draw_lengths(rng, n, parse_length(input_len, "inference.input_len"))
    outs = draw_lengths(rng, n, parse_length(output_len, "inference.output_len"))
    times = np.zeros(n)
    if arrival.process is ArrivalProcess.POISSON:
        times = poisson_arrivals(rng, n, float(arrival.qps or 0.0))
    elif arrival.process is ArrivalProcess.GAMMA:
        times = gamma_arrivals(rng, n, float(arrival.qps or 0.0), float(arrival.cv or 0.0))
    reqs = tuple(
        Request(id=i, arrival_s=float(times[i]), input_len=int(ins[i]), output_len=int(outs[i]),
                cached_prefix=int(ins[i]) - 1 if i < warm_requests
                else _cached(int(ins[i]), prefix_hit))
        for i in range(n)
    )
    return Workload(requests=reqs, concurrency=arrival.concurrency,
                    warmup=arrival.warmup_requests)


def _cached(input_len: int, prefix_hit: float) -> int:
    """Prompt tokens served from the prefix cache; at least one token is always computed."""
    return min(int(input_len * prefix_hit), input_len - 1)


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
