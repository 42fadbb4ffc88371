# SPDX-License-Identifier: Apache-2.0
"""Request traces in the formats people have, read into one `Workload`.

The format is told by the file's header (CSV) or first record (JSON), never by its name:

- ``llmsim``: ``arrival_s, input_len, output_len[, cached_prefix]`` (our own CSV).
- ``azure``: Azure LLM inference trace 2023/2024 (``TIMESTAMP, ContextTokens, GeneratedTokens``;
  timestamps are wall-clock, github.com/Azure/AzurePublicDataset AzureLLMInferenceDataset2023.md).
- ``burstgpt``: BurstGPT (``Timestamp, Model, Request tokens, Response tokens, ...``; Timestamp
  in seconds; ``Response tokens`` 0 marks a failed request, github.com/HPMLL/BurstGPT README).
- ``mooncake``: Mooncake JSON lines (``timestamp`` in ms, ``input_length``, ``output_length``,
  ``hash_ids``; github.com/kvcache-ai/Mooncake FAST25-release/README.md).
- ``lengths``: length tables derived from ShareGPT and other corpora, as Vidur writes them
  (``num_prefill_tokens, num_decode_tokens[, arrived_at]``; github.com/microsoft/vidur
  data/processed_traces), or ``input_len, output_len`` without arrivals.
- ``vllm-bench``: the JSON `vllm bench serve --save-result` writes (``input_lens``,
  ``output_lens``, ``errors``, ``request_rate``; vllm/benchmarks/serve.py).

Arrivals are seconds from the first request. Requests with no prompt or no output (failed
requests in BurstGPT and vLLM results) are dropped: they load no server. A file without
arrival times (``lengths``, ``vllm-bench``) takes them from the scenario's arrival process
(``serving.arrival.process/qps``), so only the lengths come from the file. Mooncake's
``hash_ids`` (shared 512-token prefix blocks) are not used yet: the prefix-cache hit ratio
of the scenario applies as for any trace.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analytical.errors import SpecError
from analytical.inputs import MAX_TRACE_BYTES, read_text
from simulate.serving.arrival import ArrivalProcess, ArrivalSpec, parse_trace_arrival
from simulate.serving.workload import (
    Request,
    Workload,
    _cached,
    gamma_arrivals,
    load_trace,
    poisson_arrivals,
)

FIELD = "serving.arrival.trace"
# The serving loop steps every request; the full BurstGPT file (1.4M requests) would run for
# hours, so a longer trace is refused with the count (take a slice, e.g. `head -n 20001`).
MAX_TRACE_REQUESTS = 200_000


class TraceFormat(StrEnum):
    LLMSIM = "llmsim"
    AZURE = "azure"
    BURSTGPT = "burstgpt"
    MOONCAKE = "mooncake"
    LENGTHS = "lengths"
    VLLM_BENCH = "vllm-bench"


# CSV formats: (format, columns that identify it, arrival column, input column, output column).
_CSV_FORMATS: tuple[tuple[TraceFormat, frozenset[str], str | None, str, str], ...] = (
    (TraceFormat.LLMSIM, frozenset({"arrival_s", "input_len", "output_len"}),
     "arrival_s", "input_len", "output_len"),
    (TraceFormat.AZURE, frozenset({"TIMESTAMP", "ContextTokens", "GeneratedTokens"}),
     "TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    (TraceFormat.BURSTGPT, frozenset({"Timestamp", "Request tokens", "Response tokens"}),
     "Timestamp", "Request tokens", "Response tokens"),
    (TraceFormat.LENGTHS, frozenset({"arrived_at", "num_prefill_tokens", "num_decode_tokens"}),
     "arrived_at", "num_prefill_tokens", "num_decode_tokens"),
    (TraceFormat.LENGTHS, frozenset({"num_prefill_tokens", "num_decode_tokens"}),
     None, "num_prefill_tokens", "num_decode_tokens"),
    (TraceFormat.LENGTHS, frozenset({"input_len", "output_len"}), None, "input_len", "output_len"),
)


def detect_format(path: Path) -> TraceFormat:
    """The trace format from the first line (CSV header or JSON record)."""
    first = _first_line(path)
    if first.startswith("{") or first.startswith("["):
        try:
            record = json.loads(first)
        except json.JSONDecodeError:
            return TraceFormat.VLLM_BENCH  # a pretty-printed JSON document
        if isinstance(record, Mapping) and {"input_length", "output_length"} <= set(record):
            return TraceFormat.MOONCAKE
        return TraceFormat.VLLM_BENCH
    header = {h.strip() for h in next(csv.reader([first]))}
    for fmt, needed, *_ in _CSV_FORMATS:
        if needed <= header:
            return fmt
    if "arrival_s" in header:  # our format with a column missing: its loader names it
        return TraceFormat.LLMSIM
    raise SpecError(FIELD, f"{path}: unknown trace format (header {sorted(header)}); known: "
                    "arrival_s,input_len,output_len | Azure TIMESTAMP,ContextTokens,"
                    "GeneratedTokens | BurstGPT Timestamp,Request tokens,Response tokens | "
                    "Vidur num_prefill_tokens,num_decode_tokens | Mooncake JSONL | "
                    "vllm bench serve JSON")


def _first_line(path: Path) -> str:
    """The first non-blank line, read through the input contract (a folder, a missing file, a
    NUL byte or a non-UTF-8 file is a named error)."""
    for line in read_text(path, FIELD, limit=MAX_TRACE_BYTES).splitlines():
        if line.strip():
            return line.strip()
    raise SpecError(FIELD, f"{path}: empty file")


def read_columns(path: Path) -> tuple[TraceFormat, np.ndarray | None, np.ndarray, np.ndarray,
                                      np.ndarray | None]:
    """(format, arrival seconds or None, input lengths, output lengths, cached prefix or None),
    in file order, failed requests dropped."""
    fmt = detect_format(path)
    if fmt == TraceFormat.MOONCAKE:
        frame = _read(lambda: pd.read_json(path, lines=True), path)
        arrival, ins, outs = (frame["timestamp"] / 1e3, frame["input_length"],
                              frame["output_length"])
        cached = None
    elif fmt == TraceFormat.VLLM_BENCH:
        arrival, ins, outs = _vllm_bench(path)
        cached = None
    else:
        frame = _read(lambda: pd.read_csv(path, skipinitialspace=True, encoding="utf-8-sig"),
                      path)
        frame.columns = [str(c).strip() for c in frame.columns]
        header = set(frame.columns)
        _, _, time_col, in_col, out_col = next(spec for spec in _CSV_FORMATS
                                               if spec[0] == fmt and spec[1] <= header)
        ins, outs = frame[in_col], frame[out_col]
        arrival = None if time_col is None else _seconds(frame[time_col], fmt, path)
        cached = frame["cached_prefix"] if "cached_prefix" in header else None
    ins, outs = _integers(ins, path, "input"), _integers(outs, path, "output")
    arrival_arr = None if arrival is None else _numbers(arrival, path)
    cached_arr = None if cached is None else _integers(cached.fillna(-1), path, "cached_prefix")
    if len(ins) > MAX_TRACE_REQUESTS:
        raise SpecError(FIELD, f"{path}: {len(ins):,} requests, at most "
                        f"{MAX_TRACE_REQUESTS:,} are simulated; take a slice of the trace")
    keep = (ins > 0) & (outs > 0)
    if not keep.any():
        raise SpecError(FIELD, f"{path}: no request with input and output tokens > 0")
    return (fmt, None if arrival_arr is None else arrival_arr[keep], ins[keep], outs[keep],
            None if cached_arr is None else cached_arr[keep])


def _read(reader: Any, path: Path) -> pd.DataFrame:
    try:
        return reader()
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        raise SpecError(FIELD, f"{path}: unreadable: {str(exc).splitlines()[0]}") from None


def _seconds(column: pd.Series, fmt: TraceFormat, path: Path) -> pd.Series:
    if fmt == TraceFormat.AZURE:  # wall-clock "2023-11-16 18:17:03.9799600"
        try:
            stamps = pd.to_datetime(column, format="ISO8601")
        except (ValueError, TypeError) as exc:
            raise SpecError(FIELD, f"{path}: TIMESTAMP: {str(exc).splitlines()[0]}") from None
        return (stamps - stamps.min()).dt.total_seconds()
    return column


def _numbers(values: Any, path: Path) -> np.ndarray:
    array = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(array) | (array < 0))
    if bad.size:
        raise SpecError(FIELD, f"{path}: request {bad[0] + 1}: arrival time must be a number "
                        ">= 0")
    return array


def _integers(values: Any, path: Path, what: str) -> np.ndarray:
    array = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(array) | (array != np.round(array)))
    if bad.size:
        raise SpecError(FIELD, f"{path}: request {bad[0] + 1}: {what} length must be an integer")
    return array.astype(np.int64)


def _vllm_bench(path: Path) -> tuple[np.ndarray | None, list[int], list[int]]:
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SpecError(FIELD, f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, Mapping) or not {"input_lens", "output_lens"} <= set(doc):
        raise SpecError(FIELD, f"{path}: a vllm bench result needs input_lens and output_lens "
                        "(run `vllm bench serve --save-result --save-detailed`)")
    ins, outs = list(doc["input_lens"]), list(doc["output_lens"])
    if len(ins) != len(outs):
        raise SpecError(FIELD, f"{path}: {len(ins)} input_lens but {len(outs)} output_lens")
    errors = doc.get("errors") or [""] * len(ins)
    outs = [0 if (i < len(errors) and errors[i]) else o for i, o in enumerate(outs)]
    starts = doc.get("start_times")
    arrival = None
    if isinstance(starts, list) and len(starts) == len(ins):
        arrival = np.asarray(starts, dtype=float) - float(min(starts))
    return arrival, ins, outs


def trace_workload(path: Path, arrival: ArrivalSpec | Mapping[str, Any], *,
                   prefix_hit: float = 0.0, field: str = "serving.arrival") -> Workload:
    """The workload of a trace file; arrivals from the file, else from ``arrival``'s process."""
    if not isinstance(arrival, ArrivalSpec):
        arrival = parse_trace_arrival(arrival, field)
    if detect_format(path) == TraceFormat.LLMSIM:
        return load_trace(path, prefix_hit=prefix_hit)
    fmt, times, ins, outs, cached = read_columns(path)
    n = len(ins)
    if times is None:
        times = _generated_arrivals(arrival, n, path, field)
    times = times - times.min()
    reqs = []
    for i in range(n):
        inp = int(ins[i])
        hit = int(cached[i]) if cached is not None and cached[i] >= 0 else _cached(inp, prefix_hit)
        reqs.append(Request(id=i, arrival_s=float(times[i]), input_len=inp,
                            output_len=int(outs[i]), cached_prefix=max(0, min(hit, inp - 1))))
    reqs.sort(key=lambda r: (r.arrival_s, r.id))
    return Workload(requests=tuple(reqs))


def _generated_arrivals(arrival: ArrivalSpec, n: int, path: Path, field: str) -> np.ndarray:
    """Arrivals for a length-only trace: burst, Poisson or gamma from the scenario."""
    process = arrival.process
    rng = np.random.default_rng(arrival.seed)
    if process is ArrivalProcess.BURST:
        return np.zeros(n)
    if arrival.qps is None:
        raise SpecError(f"{field}.qps", f"{path} has request lengths but no arrival times: set "
                        "a positive qps (Poisson arrivals) or process: burst")
    if process in (None, ArrivalProcess.POISSON):
        return poisson_arrivals(rng, n, arrival.qps)
    if process is ArrivalProcess.GAMMA:
        if arrival.cv is None:
            raise SpecError(f"{field}.cv", "missing: a gamma process needs a positive cv")
        return gamma_arrivals(rng, n, arrival.qps, arrival.cv)
    raise SpecError(f"{field}.process", f"{process.value!r} cannot time a trace; use poisson, "
                    "gamma or burst")


def has_trace(doc: Mapping[str, Any]) -> bool:
    """Whether a scenario (or a colocated entry) takes its requests from a trace file."""
    serving = doc.get("serving")
    arrival = serving.get("arrival") if isinstance(serving, Mapping) else None
    return isinstance(arrival, Mapping) and "trace" in arrival
