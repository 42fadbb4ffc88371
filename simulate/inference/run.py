# SPDX-License-Identifier: Apache-2.0
"""Inference predictions: one batch (TTFT, TPOT, E2E) or a served request stream.

Every path goes through the same step-cost tables (built from the engine chain) and the same
serving loop: a single batch is a burst of `batch_size` identical requests under the static
scheduler, so a single-batch answer and a served answer can never disagree on the model of a
step. Memory (weights, KV capacity) comes from `analytical.memory`; a model that does not fit
gets a verdict with the numbers and no latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from analytical import memory as mem
from analytical.dtypes import DType
from analytical.errors import InfeasibleError
from analytical.hardware import GIB, HardwareSpec
from analytical.layer_spec import lora_params_per_layer
from analytical.model import ModelSpec
from simulate.costs import add_engine_time
from simulate.engines import Estimator
from simulate.inference.fp8_gemm import Fp8GemmRatios
from simulate.inference.fused_moe import FusedMoeTable
from simulate.inference.layer_ops import (
    LoraSpec,
    Sharding,
    check_sharding,
    heads_per_rank,
    inference_sharding,
)
from simulate.inference.spec import InferenceSpec, ServingSpec
from simulate.inference.step_cost import MeteredCost, StepCostTables, build_tables
from simulate.serving.arrival import ArrivalProcess, ArrivalSpec, max_length
from simulate.serving.choices import Endpoint, Preemption, Scheduler
from simulate.serving.engine_presets import (
    EnginePreset,
    MemoryRule,
    cuda_graph_sizes,
    engine_preset,
    kv_cache_bytes,
)
from simulate.serving.loop import Speculation, Tenant
from simulate.serving.schedulers import SchedulerConfig
from simulate.serving.state import Span
from simulate.serving.stream import StreamCost
from simulate.serving.workload import Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class InstancePlan:
    """One model instance: its layout, memory and step-cost tables."""

    model: ModelSpec
    shard: Sharding
    tables: StepCostTables
    weight_bytes: float
    kv_bytes_per_token: float  # per GPU of the instance
    kv_blocks: int
    activation_reserve_bytes: float
    memory_bytes: float  # usable by this instance: capacity * utilisation * memory fraction


def activation_reserve_bytes(model: ModelSpec, shard: Sharding, max_tokens: int,
                             max_seqs: int, sampler_bytes_per_logit: float = 0.0) -> float:
    """Peak activation memory of the start-up profile: the forward pass's widest live tensors
    of a layer for `max_tokens` tokens (residual, QKV, MLP intermediate) in bf16, and logits
    for `max_seqs` rows. With `sampler_bytes_per_logit` (vLLM V1, its engine file) the sampler
    runs after the forward, on full-vocabulary logits, and one peak is taken over both; else
    the forward plus fp32 logits split over TP."""
    h, g = heads_per_rank(model, shard.tp)
    width = max(model.ffn_hidden, model.moe_ffn_hidden * max(model.top_k, 1)) // shard.tp
    per_token = 4 * model.hidden + (h + 2 * g) * model.head_dim + 3 * width
    forward = 2.0 * max_tokens * per_token
    if sampler_bytes_per_logit <= 0:
        return forward + 4.0 * max_seqs * model.vocab / shard.tp
    # profile_run keeps the forward's bf16 hidden states and its last rows (and a random copy
    # of them) alive while the sampler runs (v0.11.0 gpu_model_runner.py _dummy_sampler_run)
    held = 2.0 * model.hidden * (max_tokens + 2 * max_seqs)
    return max(forward, held + sampler_bytes_per_logit * max_seqs * model.vocab)


def lora_weight_bytes(model: ModelSpec, lora: LoraSpec | None, adapters: int, tp: int) -> float:
    """Adapter weights resident on one GPU: rank * (in + out) per target per layer, bf16."""
    if lora is None:
        return 0.0
    return 2.0 * adapters * lora_params_per_layer(model, lora) * model.layers / tp


def preset_for(serving: ServingSpec, hw: HardwareSpec, *, tp: int, pp: int,
               max_model_len: int = 0) -> EnginePreset | None:
    """The engine preset of `serving` on this GPU (of its `engine_version`, for a model of
    ``max_model_len`` tokens), or None when no engine is named."""
    if not serving.engine:
        return None
    return engine_preset(serving.engine, memory_bytes=hw.memory_bytes, device=hw.name, tp=tp,
                         pp=pp, backend=serving.engine_backend or "",
                         version=serving.engine_version, max_model_len=max_model_len)


def resolve_serving(serving: ServingSpec, hw: HardwareSpec, *, tp: int, pp: int,
                    max_model_len: int = 0) -> ServingSpec:
    """Fill every serving field the scenario did not set with its engine's default on this GPU
    (explicit fields win; without an engine the spec is returned unchanged)."""
    preset = preset_for(serving, hw, tp=tp, pp=pp, max_model_len=max_model_len)
    if preset is None:
        return serving
    given = serving.explicit
    changes: dict[str, Any] = {}
    for key in ("scheduler", "max_num_seqs", "block_size", "gpu_memory_utilization"):
        if key not in given:
            changes[key] = getattr(preset, key)
    if not {"max_batched_tokens", "chunk_size"} & given:
        changes["max_batched_tokens"] = preset.max_batched_tokens
    if "step_overhead_ms" not in given:
        changes["step_overhead_s"] = preset.step_overhead_s
    if "step_overhead_per_seq_us" not in given:
        changes["step_overhead_per_seq_s"] = preset.step_overhead_per_seq_s
    if "frontend_ms" not in given:
        changes["frontend_s"] = preset.frontend_s
    if "tokenize_us_per_token" not in given:
        changes["tokenize_s_per_token"] = preset.tokenize_s_per_token
    if "stream_token_us" not in given:
        changes["stream_token_s"] = preset.stream_token_s
    if "api_request_us" not in given:
        changes["api_request_s"] = preset.api_request_s
    return replace(serving, **changes)


def plan_instance(model: ModelSpec, hw: HardwareSpec, *, tp: int, pp: int, ep: int,
                  weight_dtype: DType, kv_dtype: DType, serving: ServingSpec,
                  estimator: Estimator, memory_fraction: float = 1.0, extra_weight_bytes: float = 0.0,
                  decode_q: int = 1, lora: LoraSpec | None = None,
                  lora_bytes: float = 0.0) -> InstancePlan:
    """Lay one instance out, check it fits, and build its step-cost tables."""
    shard = inference_sharding(tp=tp, pp=pp, ep=ep, gpus_per_node=hw.gpus_per_node)
    check_sharding(model, shard)
    weights = mem.weight_bytes(model, dtype=weight_dtype, tp=tp, pp=pp, ep=ep,
                               etp=shard.expert_tp) + lora_bytes
    preset = preset_for(serving, hw, tp=tp, pp=pp, max_model_len=model.max_seq_len)
    reserve = activation_reserve_bytes(
        model, shard, serving.max_batched_tokens, serving.max_num_seqs,
        preset.sampler_profile_bytes_per_logit if preset else 0.0)
    usable = hw.memory_bytes * serving.gpu_memory_utilization * memory_fraction
    kv_per_token = mem.kv_cache_bytes(model, tokens=1, kv_dtype=kv_dtype, tp=tp, pp=pp)
    free = kv_cache_bytes(preset.memory_rule if preset else MemoryRule.TOTAL_FRACTION,
                          capacity=hw.memory_bytes * memory_fraction,
                          utilization=serving.gpu_memory_utilization,
                          weights=weights + extra_weight_bytes, activations=reserve)
    if free <= kv_per_token * serving.block_size:
        raise InfeasibleError(
            f"{model.name} does not fit on {hw.name} at tp={tp} pp={pp}: weights "
            f"{weights / GIB:.1f} GiB + activations {reserve / GIB:.1f} GiB leave "
            f"{free / GIB:.2f} GiB of {usable / GIB:.1f} GiB usable for the KV cache",
            details={"weights_gib": weights / GIB, "activation_reserve_gib": reserve / GIB,
                     "usable_gib": usable / GIB, "kv_free_gib": free / GIB})
    blocks = int(free // (kv_per_token * serving.block_size))
    tables = build_tables(model, hw, shard, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                          estimator=estimator,
                          max_tokens=max(serving.max_batched_tokens, serving.max_num_seqs * decode_q),
                          decode_q=decode_q, lora=lora,
                          fusions=preset.fusions() if preset else None,
                          graph_max_tokens=None if preset is None
                          else preset.cuda_graph_max_bs if hw.kind == "gpu" else 0,
                          custom_all_reduce_bytes=preset.custom_all_reduce_bytes if preset
                          else 0.0,
                          eager_launch_s=preset.eager_launch_s if preset else 0.0,
                          batched_prefill_attention=bool(
                              preset and preset.batched_prefill_attention),
                          fp8_vs_bf16=preset.fp8_vs_bf16(hw.architecture) if preset
                          else Fp8GemmRatios(),
                          fused_moe=preset.fused_moe if preset else FusedMoeTable())
    return InstancePlan(model=model, shard=shard, tables=tables, weight_bytes=weights,
                        kv_bytes_per_token=kv_per_token, kv_blocks=blocks,
                        activation_reserve_bytes=reserve, memory_bytes=usable)


def memory_report(plan: InstancePlan, block_size: int) -> dict[str, float]:
    """Per-GPU memory of one instance, GiB, and the KV capacity in tokens."""
    return {
        "weights_gib": plan.weight_bytes / GIB,
        "activation_reserve_gib": plan.activation_reserve_bytes / GIB,
        "kv_cache_gib": plan.kv_blocks * block_size * plan.kv_bytes_per_token / GIB,
        "kv_capacity_tokens": float(plan.kv_blocks * block_size),
        "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token,
        "usable_gib": plan.memory_bytes / GIB,
    }


def single_batch_serving(inf: InferenceSpec) -> ServingSpec:
    """A single batch as a serving run: `batch_size` requests at t=0, static batching."""
    tokens = inf.batch_size * max_length(inf.input_len) if inf.input_len is not None else 0
    return ServingSpec(scheduler=Scheduler.STATIC,
                       arrival=ArrivalSpec(process=ArrivalProcess.BURST,
                                           num_requests=inf.batch_size),
                       max_num_seqs=inf.batch_size, max_batched_tokens=max(tokens, 1),
                       block_size=16, preemption=Preemption.RECOMPUTE, step_overhead_s=0.0,
                       gpu_memory_utilization=0.9)


def split_workload(workload: Workload, parts: int) -> list[Workload]:
    """Round-robin requests over data-parallel replicas (as a load balancer would)."""
    if parts == 1:
        return [workload]
    return [Workload(requests=workload.requests[i::parts],
                     concurrency=-(-workload.concurrency // parts) if workload.closed else 0,
                     warmup=workload.warmup)
            for i in range(parts)]


def make_tenant(name: str, plan: InstancePlan, workload: Workload, serving: ServingSpec,
            hw: HardwareSpec, speculation: Speculation | None) -> tuple[Tenant, MeteredCost]:
    cost = MeteredCost(plan.tables)
    decode_q = speculation.k + 1 if speculation else 1
    preset = preset_for(serving, hw, tp=plan.shard.tp, pp=plan.shard.pp,
                        max_model_len=plan.model.max_seq_len)
    config = SchedulerConfig(max_num_seqs=serving.max_num_seqs,
                             max_batched_tokens=serving.max_batched_tokens,
                             block_size=serving.block_size, preemption=serving.preemption,
                             decode_q=decode_q,
                             chunk_prompts=preset.chunk_prompts if preset else True,
                             reserve_output=preset.reserve_output_kv if preset else False,
                             kv_windows=tuple((w.share, w.span) for w in plan.tables.windowed)
                             if preset and preset.window_kv else (),
                             prefix_caching=preset.prefix_caching if preset else False)
    tenant = Tenant(name=name, workload=workload, scheduler=serving.scheduler, config=config,
                    cost=cost, kv_blocks=plan.kv_blocks,
                    kv_bytes_per_token=plan.kv_bytes_per_token * plan.shard.tp,
                    step_overhead_s=serving.step_overhead_s,
                    step_overhead_per_seq_s=serving.step_overhead_per_seq_s,
                    frontend_s=serving.frontend_s,
                    tokenize_s_per_token=serving.tokenize_s_per_token,
                    stream=StreamCost(per_token_s=serving.stream_token_s,
                                      per_request_s=serving.api_request_s,
                                      shared_intake=preset.stream_shares_intake
                                      if preset else True,
                                      separate_process=preset.api_server_process
                                      if preset else True),
                    empty_chunks=preset.chat_stream_empty_chunks
                    if preset and serving.endpoint is Endpoint.CHAT else 0,
                    host_overlap=preset.host_overlap if preset else False,
                    graph_sizes=cuda_graph_sizes(preset) if preset else (),
                    swap_bw_bytes_per_s=hw.pcie.bandwidth_bytes_per_s * plan.shard.tp,
                    speculation=speculation, attention_spans=_spans(plan.tables, speculation))
    return tenant, cost


def _spans(tables: StepCostTables, speculation: Speculation | None) -> tuple[Span, ...]:
    """The windowed layer kinds of the target and its draft, counted apart in each step."""
    spans = list(tables.spans)
    if speculation and isinstance(speculation.draft_cost, MeteredCost):
        spans += speculation.draft_cost.tables.spans
    return tuple(dict.fromkeys(spans))


def coverage(costs: Sequence[MeteredCost]) -> dict[str, float]:
    """Fraction of simulated GPU time each engine answered (sums to 1)."""
    total: dict[str, float] = {}
    for cost in costs:
        add_engine_time(total, cost.engine_seconds())
    norm = sum(total.values()) or 1.0
    return {engine: sec / norm for engine, sec in sorted(total.items())}
