# SPDX-License-Identifier: Apache-2.0
"""The ``inference`` and ``serving`` blocks of a scenario, parsed into frozen specs.

Unknown keys are rejected by dotted path; every number is checked where it is read. The model
and hardware lookups themselves happen in `simulate.inference.run`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from analytical.dtypes import DType, parse_dtype
from analytical.errors import SpecError
from simulate.fields import check_keys, int_field

PRECISIONS = (DType.BF16, DType.FP16, DType.FP8, DType.FP4, DType.INT8, DType.INT4)


def pos_int(block: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int:
    return int_field(block, key, path, default=default)


def fraction(block: Mapping[str, Any], key: str, path: str, default: float, *,
             allow_one: bool = True, allow_zero: bool = True) -> float:
    value = block.get(key, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or value < 0 or value > 1 or (not allow_one and value == 1) or (
            not allow_zero and value == 0):
        raise SpecError(f"{path}.{key}", f"must be a number in [0, 1], got {value!r}")
    return float(value)


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
    input_len: Any  # int or a length distribution mapping (serving)
    output_len: Any
    speculative: SpeculativeSpec | None = None
    prefix_hit_ratio: float = 0.0
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ()
    lora_adapters: int = 0

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


def _length(block: Mapping[str, Any], key: str, path: str) -> Any:
    value = block.get(key)
    if isinstance(value, Mapping):
        return dict(value)
    return pos_int(block, key, path)


def parse_inference(block: Any, path: str = "inference") -> InferenceSpec:
    b = check_keys(block, path, {"parallel", "precision", "kv_cache_dtype", "batch_size",
                                 "input_len", "output_len", "speculative", "prefix_cache", "lora"},
                   {"input_len", "output_len"})
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
    hit = 0.0
    if "prefix_cache" in b:
        p = check_keys(b["prefix_cache"], f"{path}.prefix_cache", {"hit_ratio"}, {"hit_ratio"})
        hit = fraction(p, "hit_ratio", f"{path}.prefix_cache", 0.0, allow_one=False)
    lora_rank, targets, adapters = 0, (), 0
    if "lora" in b:
        lo = check_keys(b["lora"], f"{path}.lora", {"rank", "targets", "adapters"}, {"rank"})
        lora_rank = pos_int(lo, "rank", f"{path}.lora")
        targets = tuple(lo.get("targets", ("qkv", "o", "gate_up", "down")))
        bad = sorted(set(targets) - {"qkv", "o", "gate_up", "down"})
        if bad:
            raise SpecError(f"{path}.lora.targets", f"unknown {bad[0]!r}; known: qkv, o, "
                            "gate_up, down")
        adapters = pos_int(lo, "adapters", f"{path}.lora", 1)
    return InferenceSpec(
        tp=pos_int(par, "tp", f"{path}.parallel", 1), pp=pos_int(par, "pp", f"{path}.parallel", 1),
        dp=pos_int(par, "dp", f"{path}.parallel", 1), ep=pos_int(par, "ep", f"{path}.parallel", 1),
        precision=precision, kv_cache_dtype=kv,
        batch_size=pos_int(b, "batch_size", path, 1),
        input_len=_length(b, "input_len", path), output_len=_length(b, "output_len", path),
        speculative=spec, prefix_hit_ratio=hit, lora_rank=lora_rank, lora_targets=targets,
        lora_adapters=adapters,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSpec:
    instances: int
    tp: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingSpec:
    scheduler: str
    arrival: Mapping[str, Any]
    max_num_seqs: int
    max_batched_tokens: int
    block_size: int
    preemption: str
    step_overhead_s: float
    gpu_memory_utilization: float
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    prefill_pool: PoolSpec | None = None
    decode_pool: PoolSpec | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    engine: str = ""  # vllm | sglang | trtllm: that engine's defaults (simulate.serving.engine_presets)
    engine_version: str = ""
    explicit: frozenset[str] = frozenset()  # keys the scenario set (they override an engine preset)


def parse_serving(block: Any, path: str = "serving") -> ServingSpec:
    b = check_keys(block, path, {"scheduler", "arrival", "max_num_seqs", "max_batched_tokens",
                                 "chunk_size", "block_size", "preemption", "step_overhead_ms",
                                 "gpu_memory_utilization", "slo", "disaggregated", "engine",
                                 "engine_version"}, {"arrival"})
    scheduler = b.get("scheduler", "continuous")
    if scheduler not in ("continuous", "chunked_prefill", "static"):
        raise SpecError(f"{path}.scheduler",
                        f"unknown {scheduler!r}; known: continuous, chunked_prefill, static")
    arrival = check_keys(b["arrival"], f"{path}.arrival",
                         {"process", "qps", "cv", "num_requests", "seed", "concurrency", "trace",
                          "warmup_requests"})
    overhead = b.get("step_overhead_ms", 0.0)
    if isinstance(overhead, bool) or not isinstance(overhead, (int, float)) or overhead < 0:
        raise SpecError(f"{path}.step_overhead_ms", f"must be >= 0, got {overhead!r}")
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
    return ServingSpec(
        scheduler=scheduler, arrival=dict(arrival),
        max_num_seqs=pos_int(b, "max_num_seqs", path, 256),
        max_batched_tokens=pos_int(b, budget_key, path, 2048 if scheduler == "chunked_prefill"
                                   else 8192),
        block_size=pos_int(b, "block_size", path, 16),
        preemption=str(b.get("preemption", "recompute")),
        step_overhead_s=float(overhead) / 1e3,
        gpu_memory_utilization=fraction(b, "gpu_memory_utilization", path, 0.9, allow_zero=False),
        slo_ttft_s=slo.get("ttft_s"), slo_tpot_s=slo.get("tpot_s"),
        prefill_pool=pools.get("prefill"), decode_pool=pools.get("decode"),
        engine=str(b.get("engine", "")), engine_version=str(b.get("engine_version", "")),
        explicit=frozenset(b),
    )
