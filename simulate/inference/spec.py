# SPDX-License-Identifier: Apache-2.0
"""The ``inference`` and ``serving`` blocks of a scenario, parsed into frozen specs.

Unknown keys are rejected by dotted path; every number is checked where it is read. The model
and hardware lookups themselves happen in `simulate.inference.run`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analytical.dtypes import DType, parse_dtype
from analytical.errors import SpecError
from simulate.fields import check_keys, choice_field, float_field, int_field, optional_float
from simulate.serving.arrival import ArrivalSpec, Length, parse_arrival, parse_length
from simulate.serving.choices import Endpoint, EngineBackend, Preemption, Scheduler, ServingEngine

PRECISIONS = (DType.BF16, DType.FP16, DType.FP8, DType.FP4, DType.INT8, DType.INT4)


def pos_int(block: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int:
    return int_field(block, key, path, default=default)


def fraction(block: Mapping[str, Any], key: str, path: str, default: float, *,
             allow_one: bool = True, allow_zero: bool = True) -> float:
    return float_field(block, key, path, default=default, minimum=0.0, maximum=1.0,
                       exclusive_min=not allow_zero, exclusive_max=not allow_one)


def _targets(value: Any, path: str, known: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise SpecError(path, f"must be a non-empty list of names, got {value!r}")
    bad = sorted(set(value) - set(known))
    if bad:
        raise SpecError(path, f"unknown {bad[0]!r}; known: {', '.join(known)}")
    return tuple(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeSpec:
    draft_model: str
    k: int
    acceptance: float
    draft_tp: int  # 0 = the target's tp (vLLM's default)


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceSpec:
    tp: int
    pp: int
    dp: int
    ep: int
    precision: DType
    kv_cache_dtype: DType
    batch_size: int
    input_len: Length | None  # a fixed length or a distribution; None: the serving trace's
    output_len: Length | None
    speculative: SpeculativeSpec | None = None
    prefix_hit_ratio: float = 0.0
    prefix_warm_requests: int = 0  # the first n requests' whole prompts are already cached
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ()
    lora_adapters: int = 0

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


def parse_inference(block: Any, path: str = "inference", *,
                    lengths_from_trace: bool = False) -> InferenceSpec:
    """With ``lengths_from_trace`` (a serving trace gives every request's lengths) the
    ``input_len``/``output_len`` keys are optional and stay None when absent."""
    b = check_keys(block, path, {"parallel", "precision", "kv_cache_dtype", "batch_size",
                                 "input_len", "output_len", "speculative", "prefix_cache", "lora"},
                   set() if lengths_from_trace else {"input_len", "output_len"})
    par = check_keys(b.get("parallel", {}), f"{path}.parallel", {"tp", "pp", "dp", "ep"})
    precision = parse_dtype(b.get("precision", "bf16"), field=f"{path}.precision")
    if precision not in PRECISIONS:
        raise SpecError(f"{path}.precision", f"{precision} is not an inference precision; known: "
                        + ", ".join(p.value for p in PRECISIONS))
    default_kv = precision if precision in (DType.BF16, DType.FP16, DType.FP8) else DType.BF16
    kv = parse_dtype(b.get("kv_cache_dtype", default_kv), field=f"{path}.kv_cache_dtype")
    if kv not in (DType.BF16, DType.FP16, DType.FP8, DType.INT8):
        raise SpecError(f"{path}.kv_cache_dtype", f"unsupported KV-cache dtype {kv}")
    spec = None
    if "speculative" in b:
        s = check_keys(b["speculative"], f"{path}.speculative",
                       {"draft_model", "k", "acceptance", "draft_tp"},
                       {"draft_model", "k", "acceptance"})
        spec = SpeculativeSpec(
            draft_model=str(s["draft_model"]), k=pos_int(s, "k", f"{path}.speculative"),
            acceptance=fraction(s, "acceptance", f"{path}.speculative", 0.0),
            draft_tp=pos_int(s, "draft_tp", f"{path}.speculative", 1) if "draft_tp" in s else 0)
    hit, warm = 0.0, 0
    if "prefix_cache" in b:
        p = check_keys(b["prefix_cache"], f"{path}.prefix_cache", {"hit_ratio", "warm_requests"})
        if not p:
            raise SpecError(f"{path}.prefix_cache", "give hit_ratio or warm_requests")
        hit = fraction(p, "hit_ratio", f"{path}.prefix_cache", 0.0, allow_one=False)
        warm = pos_int(p, "warm_requests", f"{path}.prefix_cache", 1) if "warm_requests" in p \
            else 0
    lora_rank, targets, adapters = 0, (), 0
    if "lora" in b:
        lo = check_keys(b["lora"], f"{path}.lora", {"rank", "targets", "adapters"}, {"rank"})
        lora_rank = pos_int(lo, "rank", f"{path}.lora")
        targets = _targets(lo.get("targets", ["qkv", "o", "gate_up", "down"]),
                           f"{path}.lora.targets", ("qkv", "o", "gate_up", "down"))
        adapters = pos_int(lo, "adapters", f"{path}.lora", 1)
    return InferenceSpec(
        tp=pos_int(par, "tp", f"{path}.parallel", 1), pp=pos_int(par, "pp", f"{path}.parallel", 1),
        dp=pos_int(par, "dp", f"{path}.parallel", 1), ep=pos_int(par, "ep", f"{path}.parallel", 1),
        precision=precision, kv_cache_dtype=kv,
        batch_size=pos_int(b, "batch_size", path, 1),
        input_len=parse_length(b.get("input_len"), f"{path}.input_len")
        if "input_len" in b or not lengths_from_trace else None,
        output_len=parse_length(b.get("output_len"), f"{path}.output_len")
        if "output_len" in b or not lengths_from_trace else None,
        speculative=spec, prefix_hit_ratio=hit, prefix_warm_requests=warm, lora_rank=lora_rank, lora_targets=targets,
        lora_adapters=adapters,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSpec:
    instances: int
    tp: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingSpec:
    scheduler: Scheduler
    arrival: ArrivalSpec
    max_num_seqs: int
    max_batched_tokens: int
    block_size: int
    preemption: Preemption
    step_overhead_s: float
    gpu_memory_utilization: float
    step_overhead_per_seq_s: float = 0.0  # host time per request scheduled in a step
    frontend_s: float = 0.0  # per request, client to scheduler (API server: HTTP, tokenization)
    # the API server tokenizes prompts one at a time, this long per prompt token (0: not modelled)
    tokenize_s_per_token: float = 0.0
    # the API server streams output tokens one at a time, this long each (0: not modelled)
    stream_token_s: float = 0.0
    api_request_s: float = 0.0  # ... and takes each request in, one at a time, this long
    endpoint: Endpoint = Endpoint.COMPLETIONS  # the API the client streams from
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    prefill_pool: PoolSpec | None = None
    decode_pool: PoolSpec | None = None
    engine: ServingEngine | None = None  # its defaults fill unset fields (serving.engine_presets)
    engine_version: str = ""
    engine_backend: EngineBackend | None = None  # TensorRT-LLM only (datasets/engines/trtllm.yaml)
    explicit: frozenset[str] = frozenset()  # keys the scenario set (they override an engine preset)


def parse_serving(block: Any, path: str = "serving") -> ServingSpec:
    b = check_keys(block, path, {"scheduler", "arrival", "max_num_seqs", "max_batched_tokens",
                                 "chunk_size", "block_size", "preemption", "step_overhead_ms",
                                 "step_overhead_per_seq_us", "frontend_ms",
                                 "tokenize_us_per_token", "stream_token_us", "api_request_us",
                                 "gpu_memory_utilization", "slo", "disaggregated", "engine",
                                 "engine_version", "engine_backend", "endpoint"}, {"arrival"})
    scheduler = choice_field(b, "scheduler", path, Scheduler, Scheduler.CONTINUOUS)
    arrival = parse_arrival(b["arrival"], f"{path}.arrival")
    overhead = float_field(b, "step_overhead_ms", path, default=0.0, maximum=3.6e6)
    per_seq = float_field(b, "step_overhead_per_seq_us", path, default=0.0, maximum=3.6e9)
    frontend = float_field(b, "frontend_ms", path, default=0.0, maximum=3.6e6)
    tokenize = float_field(b, "tokenize_us_per_token", path, default=0.0, maximum=1e6)
    stream = float_field(b, "stream_token_us", path, default=0.0, maximum=1e6)
    request = float_field(b, "api_request_us", path, default=0.0, maximum=1e9)
    budget_key = "chunk_size" if "chunk_size" in b else "max_batched_tokens"
    slo = check_keys(b.get("slo", {}), f"{path}.slo", {"ttft_s", "tpot_s"})
    pools: dict[str, PoolSpec] = {}
    if "disaggregated" in b:
        d = check_keys(b["disaggregated"], f"{path}.disaggregated", {"prefill", "decode"},
                       {"prefill", "decode"})
        for role in ("prefill", "decode"):
            p = check_keys(d[role], f"{path}.disaggregated.{role}", {"instances", "tp"},
                           {"instances", "tp"})
            pools[role] = PoolSpec(instances=pos_int(p, "instances", f"{path}.disaggregated.{role}"),
                                   tp=pos_int(p, "tp", f"{path}.disaggregated.{role}"))
    engine = choice_field(b, "engine", path, ServingEngine, ServingEngine.VLLM) \
        if "engine" in b else None
    backend = choice_field(b, "engine_backend", path, EngineBackend, EngineBackend.PYTORCH) \
        if "engine_backend" in b else None
    if backend is not None and engine is not ServingEngine.TRTLLM:
        raise SpecError(f"{path}.engine_backend", "only engine trtllm has backends "
                        f"(pytorch, tensorrt); engine is {engine or 'not set'}")
    return ServingSpec(
        scheduler=scheduler, arrival=arrival,
        max_num_seqs=pos_int(b, "max_num_seqs", path, 256),
        max_batched_tokens=pos_int(b, budget_key, path,
                                   2048 if scheduler is Scheduler.CHUNKED_PREFILL else 8192),
        block_size=pos_int(b, "block_size", path, 16),
        preemption=choice_field(b, "preemption", path, Preemption, Preemption.RECOMPUTE),
        step_overhead_s=float(overhead) / 1e3,
        step_overhead_per_seq_s=float(per_seq) / 1e6, frontend_s=float(frontend) / 1e3,
        tokenize_s_per_token=float(tokenize) / 1e6, stream_token_s=float(stream) / 1e6,
        api_request_s=float(request) / 1e6,
        endpoint=choice_field(b, "endpoint", path, Endpoint, Endpoint.COMPLETIONS),
        gpu_memory_utilization=fraction(b, "gpu_memory_utilization", path, 0.9, allow_zero=False),
        slo_ttft_s=optional_float(slo, "ttft_s", f"{path}.slo", exclusive_min=True),
        slo_tpot_s=optional_float(slo, "tpot_s", f"{path}.slo", exclusive_min=True),
        prefill_pool=pools.get("prefill"), decode_pool=pools.get("decode"),
        engine=engine, engine_version=str(b.get("engine_version", "")), engine_backend=backend,
        explicit=frozenset(b),
    )

