# SPDX-License-Identifier: Apache-2.0
"""Published serving measurements as flat rows, and each row as an llmsim scenario.

The corpus files (``datasets/validation/serving/*.yaml``) group points that share a setup into
series; `load_corpus` expands them so that every row carries its full configuration and its
citation (URL, table/section, date or commit). `rows_from_vllm_bench` turns a user's own
``vllm bench serve --save-result`` JSON into rows of the same shape, so llmsim can be scored on
any run. `row_scenario` writes the scenario `llmsim simulate` runs for a row.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from analytical.errors import SpecError
from analytical.paths import DATASETS_DIR

CORPUS_DIR = DATASETS_DIR / "validation" / "serving"
MEASURES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "output_tok_s")
# a row with no published prompt count: enough requests for a steady state at its concurrency
DEFAULT_PROMPTS_PER_CLIENT, MIN_PROMPTS = 5, 50
# clients that report a steady-state window, not the start-up wave: AIPerf / genai-perf measure
# over stable windows of perf_analyzer (its stability check), so the first wave is left out
STEADY_STATE_TOOLS = ("aiperf", "genai-perf")
# Clients that drive the engine in-process (vLLM's LLM class, TensorRT-LLM's LLM API): no API
# server between them and the engine, so the engine's front-end time does not apply.
IN_PROCESS_TOOLS = ("vllm-bench-latency", "vllm-bench-throughput", "trtllm-bench")
# `--random-range-ratio` of each client's random dataset when a row does not state it, and how
# the ratio r spreads a length L: sglang python/sglang/bench_serving.py sample_random_requests,
# np.random.randint(max(int(L * r), 1), L + 1), default r = 0.0 (uniform on [1, L]);
# vLLM vllm/benchmarks/datasets.py RandomDataset, uniform on [L * (1 - r), L * (1 + r)],
# default r = 0.0 (fixed). With equal lengths a closed loop's clients finish together and
# resend their prompts in one wave, so the spread matters for TTFT under load.
UNIFORM_LENGTH_TOOLS = {"sglang-bench-serving": 0.0, "vllm-bench-serve": 0.0}
# Clients whose warm-up request is the run's first prompt and that leave the server's prefix
# cache as it is, so request 0 finds its whole prompt cached: `sglang.bench_serving`
# (python/sglang/bench_serving.py `benchmark`: `--warmup-requests` (default 1) copies of
# input_requests[0], then POST /flush_cache only with `--flush-cache` or SGLANG_IS_IN_CI), against
# SGLang's RadixAttention cache, on by default (`disable_radix_cache` False).
WARMUP_PROMPT_TOOLS = frozenset({"sglang-bench-serving"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingRow:
    """One published measurement with its whole setup; empty/None means not published."""

    id: str
    source: str
    url: str
    section: str
    date: str = ""
    commit: str = ""
    model: str
    gpu: str
    num_gpus: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    engine: str = ""
    engine_version: str = ""
    engine_backend: str = ""  # TensorRT-LLM: pytorch (default) | tensorrt (a prebuilt engine)
    weight_dtype: str = ""
    kv_dtype: str = ""
    checkpoint_kv_dtype: str = ""  # kv_cache_quant_algo the checkpoint declares (what "auto" picks)
    mode: str  # closed (fixed concurrency) | offline (all at once) | latency (one batch)
    tool: str = ""  # the benchmark client: vllm-bench-serve, aiperf, trtllm-bench, ...
    endpoint: str = ""  # the API it streams from: chat (chat completions) | "" (completions)
    input_len: int
    output_len: int
    concurrency: int = 0
    num_prompts: int = 0
    batch_size: int = 0
    gpu_memory_utilization: float | None = None
    kv_cache_tokens: int | None = None
    max_batched_tokens: int | None = None  # the launch's token budget per step (else the engine's)
    range_ratio: float | None = None  # the client's --random-range-ratio (None: its default)
    warm_prompts: int = 0  # leading prompts an earlier run left in the prefix cache
    measured: Mapping[str, float] = field(default_factory=dict)  # MEASURES present
    stats: Mapping[str, str] = field(default_factory=dict)  # measure -> mean|median|p95|...


_ROW_KEYS = {"model", "gpu", "num_gpus", "tp", "pp", "ep", "engine", "engine_version",
             "engine_backend", "tool", "endpoint",
             "weight_dtype", "kv_dtype", "checkpoint_kv_dtype", "mode", "input_len", "output_len",
             "concurrency", "num_prompts", "batch_size", "gpu_memory_utilization",
             "kv_cache_tokens", "max_batched_tokens", "range_ratio"}


def _expand(doc: Mapping[str, Any], name: str) -> list[ServingRow]:
    columns = list(doc["columns"])
    rows = []
    for si, series in enumerate(doc["series"]):
        setup = {**doc.get("defaults", {}), **series}
        stats = {f"{k}_ms": v for k, v in dict(setup.get("stats") or {}).items()}
        before: Mapping[str, Any] | None = None
        repeats, derived_kv = (_count(setup, key, f"{name}.series[{si}]")
                               for key in ("carryover_repeats", "carryover_kv_tokens"))
        for pi, point in enumerate(series["points"]):
            if len(point) != len(columns):
                raise SpecError(f"{name}.series[{si}].points[{pi}]",
                                f"expected {len(columns)} values ({', '.join(columns)})")
            values = dict(zip(columns, point, strict=True))
            merged = {**setup, **{k: v for k, v in values.items() if k in _ROW_KEYS}}
            measured = {k: float(v) for k, v in values.items() if k in MEASURES and v is not None}
            warm = _carried_prompts(merged, before, repeats, derived_kv)
            if merged.get("tool") in WARMUP_PROMPT_TOOLS:
                warm = max(warm, 1)
            before = merged
            rows.append(ServingRow(
                id=f"{name}/{si}/{pi}", source=str(doc["source"]), url=str(doc["url"]),
                section=str(series["section"]), date=str(doc.get("date", "")),
                commit=str(doc.get("commit", "")), measured=measured, stats=stats,
                warm_prompts=warm,
                **{k: merged[k] for k in _ROW_KEYS if k in merged and merged[k] is not None}))
    return rows


def _count(setup: Mapping[str, Any], key: str, where: str) -> int:
    """A series key that counts (repeats, tokens): an integer >= 0, 0 when absent."""
    value = setup.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"{where}.{key}", f"must be an integer >= 0, got {value!r}")
    return value


def _carried_prompts(point: Mapping[str, Any], before: Mapping[str, Any] | None,
                     repeats: int, derived_kv: int = 0) -> int:
    """Prompts of ``point`` already in the prefix cache when the harness ran the series' points
    in order on one server, each point ``repeats`` times with the same per-repeat seeds
    (series key `carryover_repeats`): a seeded random dataset's first n prompts are the same for
    any request count >= n, so the previous point's prompts come back. Counted only when all of
    its repeats' KV (prompt + output tokens) fit the published KV cache, a stand-in for LRU
    eviction; where the source publishes no KV size, ``derived_kv`` (series key
    `carryover_kv_tokens`: a pool size the corpus file derives from the engine's memory rule, with
    its derivation) takes its place. 0 without the key, for the first point, or without a KV
    size."""
    kv = point.get("kv_cache_tokens") or derived_kv
    if not repeats or before is None or not kv:
        return 0
    n = int(before.get("num_prompts") or 0)
    footprint = repeats * n * (int(before["input_len"]) + int(before["output_len"]))
    return min(n, int(point.get("num_prompts") or 0)) if footprint <= int(kv) else 0


def load_corpus(paths: Iterable[str | Path] | None = None) -> list[ServingRow]:
    """Every row of the given corpus files (default: all of ``datasets/validation/serving``)."""
    files = sorted(CORPUS_DIR.glob("*.yaml")) if paths is None else [Path(p) for p in paths]
    rows: list[ServingRow] = []
    for path in files:
        with Path(path).open() as fh:
            rows += _expand(yaml.safe_load(fh), Path(path).stem)
    return rows


def rows_from_vllm_bench(paths: Iterable[str | Path], *, model: str, gpu: str, num_gpus: int,
                         tp: int = 1, pp: int = 1, weight_dtype: str = "", kv_dtype: str = "",
                         engine: str = "vllm", source: str = "user") -> list[ServingRow]:
    """Rows from ``vllm bench serve --save-result`` JSON files (one run per file). Lengths are
    the run's means (total tokens / completed); the setup the JSON lacks is given here."""
    rows = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        done = int(data.get("completed") or 0)
        if done <= 0:
            raise SpecError(str(path), "no completed requests in this vllm bench result")
        measured = {f"{m}_ms": float(data[f"mean_{m}_ms"]) for m in ("ttft", "tpot", "itl", "e2el")
                    if data.get(f"mean_{m}_ms") is not None}
        if "e2el_ms" in measured:
            measured["e2e_ms"] = measured.pop("e2el_ms")
        if data.get("output_throughput") is not None:
            measured["output_tok_s"] = float(data["output_throughput"])
        conc = int(data.get("max_concurrency") or 0)
        rate = data.get("request_rate")
        mode = "closed" if conc else ("offline" if rate in (None, "inf", float("inf")) else "")
        if not mode:
            raise SpecError(str(path), "open-loop (finite request_rate) runs are not importable "
                            "as rows yet; run with --max-concurrency")
        rows.append(ServingRow(
            id=f"{source}/{Path(path).stem}", source=source, url=str(path), tool="vllm-bench-serve",
            section=str(data.get("date", "")), model=model, gpu=gpu, num_gpus=num_gpus, tp=tp,
            pp=pp, engine=engine, weight_dtype=weight_dtype, kv_dtype=kv_dtype, mode=mode,
            input_len=round(data["total_input_tokens"] / done),
            output_len=round(data["total_output_tokens"] / done), concurrency=conc,
            num_prompts=int(data.get("num_prompts") or done), measured=measured,
            stats={k: "mean" for k in measured}))
    return rows


def _kv_dtype(row: ServingRow, precision: str) -> str:
    """The KV dtype of "auto" (or unstated). vLLM (vllm/utils/torch_utils.py
    resolve_kv_cache_dtype_string) and TensorRT-LLM (tensorrt_llm/llmapi/llm_utils.py
    ModelLoader._update_from_hf_quant_config) both resolve "auto" to the KV quantization a
    pre-quantized checkpoint declares (ModelOpt hf_quant_config.json kv_cache_quant_algo), else
    to the activation dtype, bf16 for every model here. Which NVIDIA checkpoints declare one
    varies (the 2024 Llama 3.1 FP8 exports quantize only the linear layers, per their model
    cards), so only a row's `checkpoint_kv_dtype` says so; --quantization fp8 on a bf16
    checkpoint quantizes no KV."""
    if row.kv_dtype and row.kv_dtype != "auto":
        return row.kv_dtype
    if row.checkpoint_kv_dtype:
        return row.checkpoint_kv_dtype
    return "bf16" if precision in ("fp8", "fp4", "int8", "int4") else precision


def _length(row: ServingRow, mean: int) -> int | dict[str, Any]:
    """A row's length as its client drew it (`UNIFORM_LENGTH_TOOLS`), from the run's mean:
    sglang uniform on [max(int(L * r), 1), L] with L = 2 * mean / (1 + r), vLLM uniform on
    [mean * (1 - r), mean * (1 + r)]; fixed for other clients, latency rows and r giving one
    length."""
    if row.tool not in UNIFORM_LENGTH_TOOLS or row.mode == "latency" or mean <= 1:
        return mean
    r = UNIFORM_LENGTH_TOOLS[row.tool] if row.range_ratio is None else row.range_ratio
    if not 0.0 <= r <= 1.0:
        raise SpecError(f"{row.id}.range_ratio", f"must be in [0, 1], got {r!r}")
    if row.tool == "sglang-bench-serving":
        hi = max(round(2 * mean / (1 + r)) - (r == 0.0), 1)  # r = 0: mean (L + 1) / 2
        lo = max(int(hi * r), 1)
    else:
        lo, hi = max(int(mean * (1 - r)), 1), int(mean * (1 + r))
    return mean if lo >= hi else {"dist": "uniform", "min": lo, "max": hi}


def _requests(row: ServingRow, max_prompts: int | None) -> int:
    """A row's request count, capped at ``max_prompts`` for speed only where the cap leaves the
    measure unchanged: a burst's throughput at maximum load settles early. In a burst every
    request waits behind all earlier ones, so its latencies (mean TTFT of 500 prompts sent at
    once) grow with its size; and a closed loop's statistics weigh its first wave (sent
    together, taken in one at a time) and its drain (the last C requests decode in a shrinking
    batch) against the steady waves between by the row's own count: 300 requests of 512
    clients are one wave that never decodes beside new prompts, and an AIPerf window (the
    first wave left out) of 300 requests at 250 clients is the drain alone. Such rows run
    whole."""
    prompts = row.num_prompts or max(DEFAULT_PROMPTS_PER_CLIENT * row.concurrency, MIN_PROMPTS)
    if max_prompts is not None and row.mode == "offline" and not (
            set(row.measured) - {"output_tok_s"}):
        prompts = min(prompts, max(max_prompts, row.concurrency))
    return prompts


def row_scenario(row: ServingRow, *, engine_presets: bool = True, max_prompts: int | None = None,
                 step_overhead_ms: float | None = None,
                 step_overhead_per_seq_us: float | None = None) -> dict[str, Any]:
    """The llmsim scenario of one row (the same document `llmsim simulate` takes). A latency
    row (`vllm bench latency`: one batch handed to the engine at once) is a burst of
    `batch_size` requests through the engine's scheduler."""
    precision = row.weight_dtype or "bf16"  # dtype "auto" of a bf16 checkpoint
    inference: dict[str, Any] = {
        "parallel": {"tp": row.tp, "pp": row.pp, "ep": row.ep,
                     "dp": max(row.num_gpus // (row.tp * row.pp), 1)},
        "precision": precision, "kv_cache_dtype": _kv_dtype(row, precision),
        "input_len": _length(row, row.input_len), "output_len": _length(row, row.output_len)}
    if row.warm_prompts:
        inference["prefix_cache"] = {"warm_requests": row.warm_prompts}
    doc: dict[str, Any] = {
        "name": row.id.replace("/", "-"), "model": row.model,
        "hardware": {"gpu": row.gpu, "num_gpus": row.num_gpus, "gpus_per_node": 8},
        "inference": inference}
    prompts = _requests(row, max_prompts)
    if row.mode == "closed":
        arrival = {"process": "closed", "concurrency": row.concurrency,
                   "num_requests": prompts, "seed": 0}
        if row.tool in STEADY_STATE_TOOLS:
            arrival["warmup_requests"] = min(row.concurrency, prompts - 1)
    elif row.mode == "offline":
        arrival = {"process": "burst", "num_requests": prompts, "seed": 0}
    elif row.mode == "latency":
        arrival = {"process": "burst", "num_requests": row.batch_size or 1, "seed": 0}
    else:
        raise SpecError(f"{row.id}.mode", f"unknown {row.mode!r}; known: closed, offline, "
                        "latency")
    serving: dict[str, Any] = {"arrival": arrival}
    if engine_presets and row.engine:
        serving["engine"] = row.engine
        if row.engine_version:  # the release's defaults (`simulate.serving.engine_versions`)
            serving["engine_version"] = row.engine_version
        if row.engine_backend:
            serving["engine_backend"] = row.engine_backend
    if row.endpoint:  # e.g. `vllm bench serve --backend openai-chat`
        serving["endpoint"] = row.endpoint
    if row.gpu_memory_utilization is not None:
        serving["gpu_memory_utilization"] = row.gpu_memory_utilization
    if row.max_batched_tokens is not None:  # e.g. vLLM --max-num-batched-tokens
        serving["max_batched_tokens"] = row.max_batched_tokens
    if row.tool in IN_PROCESS_TOOLS:
        serving["frontend_ms"] = 0.0
        serving["tokenize_us_per_token"] = 0.0
        serving["stream_token_us"] = 0.0
        serving["api_request_us"] = 0.0
    if step_overhead_ms is not None:
        serving["step_overhead_ms"] = step_overhead_ms
    if step_overhead_per_seq_us is not None:
        serving["step_overhead_per_seq_us"] = step_overhead_per_seq_us
    doc["serving"] = serving
    return doc
