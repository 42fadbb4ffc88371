# SPDX-License-Identifier: Apache-2.0
"""A serving prediction written as `vllm bench serve --save-result` writes its measurement.

Same keys and units as vLLM's result JSON (vllm/benchmarks/serve.py, the `result` dict of
`benchmark()` plus the run fields `main` adds: date, backend, model_id, num_prompts,
request_rate, burstiness, max_concurrency), so a prediction and a measurement can be compared
field by field and read by the same tools. Metric semantics as vLLM's: TTFT per request; TPOT per
request = (e2e - TTFT) / (output tokens - 1), requests with one output token left out; ITL every
gap between consecutive tokens of every request, pooled; E2EL per request. Percentiles are
reported for 99 (vLLM's default --metric-percentiles).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import numpy as np

from simulate.serving.arrival import ArrivalProcess, ArrivalSpec, parse_arrival

METRICS = (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("itl", "itl_s"), ("e2el", "e2e_latency_s"))
_ARRAY = {"ttft": "ttft", "tpot": "tpot", "e2el": "e2e"}


def _std(latencies: Mapping[str, np.ndarray] | None, metric: str) -> float | None:
    if latencies is None or metric not in _ARRAY:
        return None
    values = np.asarray(latencies[_ARRAY[metric]], dtype=float)
    if metric == "tpot":
        values = values[np.asarray(latencies["output_len"]) > 1]
    return float(values.std() * 1e3) if values.size else None


def vllm_bench_result(data: Mapping[str, Any], *, model_id: str,
                      arrival: ArrivalSpec | Mapping[str, Any],
                      latencies: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
    """The prediction `data` (``llmsim simulate --json`` of a serving scenario) in vLLM's shape.

    arrival: the scenario's ``serving.arrival`` (sets request_rate / max_concurrency);
    latencies: per-request arrays (`SimulationOutput.latencies`) for the standard deviations.
    """
    if not isinstance(arrival, ArrivalSpec):
        arrival = parse_arrival(arrival)
    n = int(data["num_requests"])
    duration = float(data["duration_s"])
    process = arrival.process or ArrivalProcess.POISSON
    timed = process in (ArrivalProcess.POISSON, ArrivalProcess.GAMMA)
    rate: float | str = arrival.qps if timed and arrival.qps is not None else "inf"
    out_tokens = float(data["throughput_tokens_per_s"]) * duration
    total_tokens = float(data["total_tokens_per_s"]) * duration
    result: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S"),
        "backend": "llmsim", "model_id": model_id, "tokenizer_id": model_id,
        "num_prompts": n, "request_rate": rate,
        "burstiness": 1.0 / arrival.cv ** 2 if process is ArrivalProcess.GAMMA and arrival.cv
        else 1.0,
        "max_concurrency": arrival.concurrency if process is ArrivalProcess.CLOSED else None,
        "duration": duration, "completed": n,
        "total_input_tokens": round(total_tokens - out_tokens),
        "total_output_tokens": round(out_tokens),
        "request_throughput": float(data["requests_per_s"]),
        "request_goodput": data.get("goodput_requests_per_s"),
        "output_throughput": float(data["throughput_tokens_per_s"]),
        "total_token_throughput": float(data["total_tokens_per_s"]),
    }
    for metric, key in METRICS:
        stats = data.get(key) or {}
        result[f"mean_{metric}_ms"] = _ms(stats.get("mean"))
        result[f"median_{metric}_ms"] = _ms(stats.get("p50"))
        result[f"std_{metric}_ms"] = _std(latencies, metric)
        result[f"p99_{metric}_ms"] = _ms(stats.get("p99"))
    return result


def _ms(value: Any) -> float | None:
    return float(value) * 1e3 if value is not None else None
