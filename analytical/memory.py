# SPDX-License-Identifier: Apache-2.0
"""Memory per GPU: training (weights, gradients, optimizer states, activations) and inference
(weights, KV cache, how many KV tokens fit).

Model states follow the ZeRO paper (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward
Training Trillion Parameter Models", section 3.1 and Figure 1): mixed-precision Adam keeps
2 + 2 + 12 = 16 bytes per parameter (bf16 weights, bf16 gradients, fp32 master weights, momentum
and variance); ZeRO-1 shards the 12, ZeRO-2 also the gradients, ZeRO-3 (and FSDP) also the
weights over the data-parallel ranks. Activations per layer live in `analytical.activations`.
Layout conventions (which ranks hold which weights) are in `analytical/README.md`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from analytical.activations import (
    DROPOUT_MASK_BYTES,
    activation_bytes_per_layer,
    eager_llama_extra_bytes,
    fp8_saved_input_savings,
    frozen_linear_input_bytes,
    op_sac_bytes_per_layer,
    recompute_modules_freed,
)
from analytical.errors import SpecError
from analytical.inference_memory import (  # re-exported: inference callers import them here
    kv_cache_bytes,
    kv_cache_capacity_tokens,
    weight_bytes,
)
from analytical.model_spec import ModelSpec
from analytical.optimizer_states import model_states_bytes, second_moment_bytes
from analytical.parallel import ParallelConfig, PipelineSplit, Recompute, RecomputeModule, Schedule
from analytical.stage import StageParams, stage_params
from analytical.step_peak import TrainingMemory, torchtitan_phases

__all__ = [
    "Framework",
    "TrainingMemory",
    "activation_bytes_per_layer",
    "kv_cache_bytes",
    "kv_cache_capacity_tokens",
    "model_states_bytes",
    "training_memory",
    "weight_bytes",
]



class Framework(StrEnum):
    """The training framework whose memory and scheduling behaviour a scenario follows."""

    MEGATRON = "megatron"  # Megatron-LM / Megatron-Core
    NEMO = "nemo"  # NeMo (Megatron-Core underneath)
    TORCHTITAN = "torchtitan"  # PyTorch FSDP2 / DTensor
    DEEPSPEED = "deepspeed"
    COMPOSER = "composer"  # MosaicML Composer / llm-foundry (PyTorch FSDP1)


# PyTorch FSDP (and ZeRO-3) materialise the current layer's full weights plus the prefetched
# next one (BackwardPrefetch.BACKWARD_PRE, forward_prefetch).
ZERO3_GATHERED_LAYERS = 2
TORCHTITAN_REDUCE_BYTES = 4.0  # FSDP2 reduce dtype in torchtitan: fp32 (mixed_precision_reduce)
# torchtitan builds the model in fp32 and FSDP2 casts to bf16 only for compute
# (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), parallelize_llama.py at 9dec370):
# the sharded parameters are fp32 and are the optimizer's weights (no master copy), and
# foreach_reduce casts the reduced gradients back to them: 4 + 4 + 8 bytes, the ZeRO paper's 16.
TORCHTITAN_PARAM_BYTES = 4.0
LOGITS_BYTES = 4.0  # fp32 logits kept for the vocab-parallel cross entropy (Megatron-LM)
# Loss working set per logit where the framework runs a plain fp32 cross entropy on the whole
# logits: torchtitan's loss_fn is cross_entropy(pred.float(), labels) (train.py at 9dec370). The
# backward of log_softmax holds its saved fp32 output, the incoming fp32 gradient and the fp32
# input gradient at once: 3 x 4 bytes per logit. Megatron's fused vocab-parallel cross entropy
# keeps one fp32 copy (LOGITS_BYTES).
FP32_CROSS_ENTROPY_BYTES = 12.0
# torchtitan compiles its loss with the model since 2025-04 (torchtitan/components/loss.py
# `build_cross_entropy_loss`: "Compiling the loss function with torch.compile", bbb1b616,
# 2025-04-02): Inductor fuses the upcast into the log-softmax and its backward, so neither fp32
# copy is materialised; the bf16 logits are saved and their bf16 gradient written: 2 x 2 bytes.
COMPILED_CROSS_ENTROPY_BYTES = 4.0
# llm-foundry's MPT defaults to loss_fn 'fused_crossentropy' (llmfoundry/models/mpt/
# modeling_mpt.py), flash-attn's Triton cross entropy: it keeps the bf16 logits and writes their
# gradient in place (flash_attn/losses/cross_entropy.py, inplace_backward).
FUSED_BF16_CROSS_ENTROPY_BYTES = 2.0



def framework_grad_bytes(framework: Framework, param_dtype_bytes: float = 2.0) -> float:
    """Gradient bytes per parameter before any ZeRO sharding.

    Megatron-LM (and NeMo on Megatron-Core) accumulates and reduces bf16 models' gradients in an
    fp32 main-grad buffer (megatron/training/arguments.py: "bfloat16 requires gradient
    accumulation and all-reduce to be performed in fp32"; docs/user-guide/features/
    dist_optimizer.md: bf16 parameters with fp32 gradients take 18 bytes, 6 + 12/d with the
    distributed optimizer). Others keep gradients in the parameter dtype (the ZeRO paper's 2).
    """
    if framework in (Framework.MEGATRON, Framework.NEMO) and param_dtype_bytes == 2.0:
        return 4.0
    return param_dtype_bytes


def _saves_fp8_inputs(framework: Framework) -> bool:
    """Megatron and NeMo run fp8 through Transformer Engine, which saves fp8 linear inputs."""
    return framework in (Framework.MEGATRON, Framework.NEMO)


def _logit_bytes(framework: Framework, compiled_loss: bool = False) -> float:
    if framework == Framework.TORCHTITAN:
        return COMPILED_CROSS_ENTROPY_BYTES if compiled_loss else FP32_CROSS_ENTROPY_BYTES
    if framework == Framework.COMPOSER:
        return FUSED_BF16_CROSS_ENTROPY_BYTES
    return LOGITS_BYTES


def _inflight_factor(parallel: ParallelConfig, schedule: Schedule, num_microbatches: int,
                     stage: int = 0) -> float:
    """Micro-batches of activations pipeline ``stage`` holds at its peak.

    1F1B: min(pp - stage, m) (Narayanan et al. 2021, PipeDream-Flush); GPipe: all m; interleaved
    1F1B: min(pp + (pp - 1 - 2*stage)/vpp, m) stage-sized micro-batches, i.e. the chunks of
    Megatron-Core's warm-up, (pp - stage - 1) * 2 + (vpp - 1) * pp, plus the one forward before
    the first backward, but never more than all m * vpp chunks (with m == pp every forward runs
    first: ``forward_backward_pipelining_with_interleaving``, megatron/core/pipeline_parallel/
    schedules.py, ``all_warmup_microbatches``); stage 0: pp * (1 + (pp-1)/(pp*vpp)) (Narayanan
    et al. 2021 section 2.2; Korthikanti et al. 2022 section 4.2.3) when m > pp.
    """
    pp, vpp = parallel.pp, parallel.vpp
    if schedule == Schedule.GPIPE:
        return float(num_microbatches)
    if schedule == Schedule.INTERLEAVED:
        if vpp < 2:
            raise SpecError("training.schedule", "interleaved needs parallel.vpp >= 2")
        if num_microbatches % pp:
            raise SpecError("training.num_microbatches", f"interleaved needs a multiple of "
                            f"pp={pp}, got {num_microbatches}")
        return min(pp + (pp - 1 - 2 * stage) / vpp, float(num_microbatches))
    if vpp > 1:
        raise SpecError("parallel.vpp", f"vpp={vpp} needs schedule 'interleaved', got {schedule}")
    return float(min(pp - stage, num_microbatches))


def _merged_passes(parallel: ParallelConfig, num_microbatches: int, stage: int) -> bool:
    """Whether pipeline ``stage`` runs any merged forward-and-backward pass of Megatron-Core's
    combined 1F1B (``overlap_moe_expert_parallel_comm``; Megatron-Core only runs it without a
    pipeline or interleaved: TransformerConfig.__post_init__, NVIDIA/Megatron-LM b0cc2706): its
    warm-up, the interleaved one plus one more forward (``get_pp_rank_microbatches``) or with
    pp = 1 the first forward alone (``combined_1f1b_schedule_for_no_pipelining``), leaves some
    of its m * vpp chunks for the steady state."""
    pp, vpp = parallel.pp, parallel.vpp
    warmup = 1 if pp == 1 else (pp - stage - 1) * 2 + (vpp - 1) * pp + 1
    return warmup < num_microbatches * vpp


def _positive(value: int, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(field, f"must be an integer >= 1, got {value!r}")


def training_memory(model: ModelSpec, parallel: ParallelConfig, *, micro_batch: int, seq_len: int,
                    recompute: Recompute, schedule: Schedule, num_microbatches: int,
                    param_dtype_bytes: float = 2.0, grad_dtype_bytes: float = 2.0,
                    optimizer: str = "adam", lora_params: int | None = None,
                    lora_base_bytes: float | None = None, lora_targets: tuple[str, ...] = (),
                    optimizer_state_bytes: float = 4.0, flash_attention: bool = True,
                    dropout: bool = False, framework: Framework = Framework.MEGATRON,
                    fp8: bool = False, recompute_modules: tuple[RecomputeModule, ...] = (),
                    compiled_loss: bool = False, combined_1f1b: bool = False,
                    compiled: bool = True) -> TrainingMemory:
    """Training memory of the most loaded pipeline stage's GPU: the first, or under an
    ``embedding-loss`` pipeline split (one layer less on the first stage) the first or second.

    ``grad_dtype_bytes``: 2 for bf16 gradients (ZeRO paper), 4 for fp32 main gradients (Megatron-LM's
    default); ``optimizer_state_bytes``: the master copy's and moments' dtype
    (`analytical.optimizer_states`: 4, or 2 for apex's bf16 state). With ``lora_params`` (trainable
    adapter parameters of the whole model) the base is frozen: no gradients or optimizer states,
    this GPU's adapter share in proportion to its share of the base weights, the frozen linear
    weights in ``lora_base_bytes`` (fp8: 1; None: ``param_dtype_bytes``) and no saved inputs for
    frozen linears no adapter (``lora_targets``) reads. ``framework``: each framework's behaviour
    (torchtitan's per-op selective checkpointing and FSDP2 resharding, the loss working set); ``fp8`` with Megatron/NeMo saves linear inputs in fp8 (Transformer
    Engine); ``recompute_modules``: Megatron-Core's selective modules (`recompute_modules_freed`;
    empty: the attention core); ``compiled_loss`` / ``compiled``: torchtitan's loss / blocks
    under torch.compile (eager blocks store more); ``combined_1f1b``: Megatron-Core's combined
    1F1B order of the EP all-to-all overlap (`_stage_activations`). Raises SpecError (bad layout).
    """
    _positive(micro_batch, "training.micro_batch")
    _positive(seq_len, "training.seq_len")
    _positive(num_microbatches, "training.num_microbatches")
    # Under an embedding-loss split stage 0 holds a layer less: stage 1 may be the most loaded.
    ranks = (0,) if parallel.pipeline_split == PipelineSplit.EVEN or parallel.pp == 1 else (0, 1)
    stages = [stage_params(model, tp=parallel.tp, pp=parallel.pp, vpp=parallel.vpp,
                           ep=parallel.ep, stage=rank, etp=parallel.etp,
                           split=parallel.pipeline_split) for rank in ranks]
    if not parallel.experts_tile_stage:
        raise SpecError("parallel.ep", f"ep={parallel.ep} x expert tp={parallel.expert_tp} "
                        f"must divide tp*cp*dp={parallel.tp * parallel.shard_group}")
    layer = _LayerActivations(model=model, parallel=parallel, micro_batch=micro_batch,
                              seq_len=seq_len, flash_attention=flash_attention, dropout=dropout,
                              framework=framework, fp8=fp8, modules=recompute_modules,
                              lora_targets=lora_targets if lora_params is not None else None,
                              compiled_loss=compiled_loss, compiled=compiled)
    stored, grad_bytes = param_dtype_bytes, grad_dtype_bytes
    if framework == Framework.TORCHTITAN:
        stored = grad_bytes = TORCHTITAN_PARAM_BYTES
    out = []
    for rank, stage in zip(ranks, stages, strict=True):
        weights, grads, opt = _model_states(model, parallel, stage, stored, grad_bytes,
                                            optimizer, lora_params, optimizer_state_bytes,
                                            lora_base_bytes)
        mem = TrainingMemory(
            weights_bytes=weights, gradients_bytes=grads, optimizer_bytes=opt,
            activations_bytes=_stage_activations(layer, stage, recompute, schedule,
                                                 num_microbatches, rank, combined_1f1b),
            other_bytes=_gathered_weights(parallel, stage, framework, param_dtype_bytes))
        if framework == Framework.TORCHTITAN:
            mem = _torchtitan_step(mem, layer, stage, optimizer, num_microbatches,
                                   param_dtype_bytes)
        out.append(mem)
    return max(out, key=lambda m: m.total_bytes)


def _torchtitan_step(mem: TrainingMemory, layer: _LayerActivations, stage: StageParams,
                     optimizer: str, num_microbatches: int,
                     param_dtype_bytes: float) -> TrainingMemory:
    """``mem`` with torchtitan's step phases (`torchtitan_phases`): its fp32 states' second
    moment, and the logits its eager fp32 loss holds on the stage with the LM head."""
    parallel = layer.parallel
    logits = (layer.micro_batch * layer.seq_len / parallel.cp * layer.model.vocab / parallel.tp
              if stage.has_lm_head and not layer.compiled_loss else 0.0)
    moment = second_moment_bytes(mem.optimizer_bytes, optimizer=optimizer,
                                 param_dtype_bytes=TORCHTITAN_PARAM_BYTES)
    return torchtitan_phases(mem, parallel, stage, num_microbatches=num_microbatches,
                             second_moment_bytes=moment, param_dtype_bytes=param_dtype_bytes,
                             gathered_layers=ZERO3_GATHERED_LAYERS, loss_logits=logits)


def _model_states(model: ModelSpec, parallel: ParallelConfig, stage: StageParams,
                  param_dtype_bytes: float, grad_dtype_bytes: float, optimizer: str,
                  lora_params: int | None, state_bytes: float = 4.0,
                  base_bytes: float | None = None) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes: dense and expert parameters each ZeRO-sharded
    over its own group; under LoRA the frozen base plus this GPU's share of the adapters."""
    zero, dense_shard = parallel.zero_stage, parallel.shard_group
    expert_shard = parallel.expert_shard_group  # dp*cp/ep when etp = tp
    if lora_params is None:
        dense = model_states_bytes(stage.dense, zero_stage=zero, shard=dense_shard,
                                   param_dtype_bytes=param_dtype_bytes,
                                   grad_dtype_bytes=grad_dtype_bytes, optimizer=optimizer,
                                   state_dtype_bytes=state_bytes)
        expert = model_states_bytes(stage.expert, zero_stage=zero, shard=expert_shard,
                                    param_dtype_bytes=param_dtype_bytes,
                                    grad_dtype_bytes=grad_dtype_bytes, optimizer=optimizer,
                                    state_dtype_bytes=state_bytes)
        return dense[0] + expert[0], dense[1] + expert[1], dense[2] + expert[2]
    if lora_params < 0:
        raise SpecError("training.lora_params", f"must be >= 0, got {lora_params}")
    # frozen base: its linear weights in ``base_bytes`` (TE fp8_model_init: 1), the rest as stored
    linear = base_bytes if base_bytes is not None else param_dtype_bytes
    # routed experts are all linear weights (``StageParams.linear`` includes them)
    dense_base = stage.dense * param_dtype_bytes - (stage.linear - stage.expert) * (
        param_dtype_bytes - linear)
    expert_base = stage.expert * linear
    base = dense_base + expert_base
    if zero >= 3:  # each group's frozen weights sharded over its own group
        base = dense_base / dense_shard + expert_base / expert_shard
    local_lora = lora_params * stage.total / model.params_total
    weights, grads, opt = model_states_bytes(
        local_lora, zero_stage=zero, shard=dense_shard, param_dtype_bytes=param_dtype_bytes,
        grad_dtype_bytes=grad_dtype_bytes, optimizer=optimizer, state_dtype_bytes=state_bytes)
    return weights + base, grads, opt


def _stage_activations(layer: _LayerActivations, stage: StageParams, recompute: Recompute,
                       schedule: Schedule, num_microbatches: int, rank: int = 0,
                       combined_1f1b: bool = False) -> float:
    """Peak activations: stored tensors of the stage's layers, embedding and head times the
    micro-batches in flight, plus one layer's recomputed tensors during its backward.

    The combined 1F1B order holds the same chunks as the plain one when a step starts: its
    extra warm-up forward is the plain step's forward that runs before the first backward.
    What it adds is inside a merged pass: layer by layer, the forward micro-batch's layer runs
    its attention, dispatch, experts and combine before the paired backward layer's attention
    backward and ``release_state`` free that layer (``TransformerLayerSchedulePlan.run`` and
    ``TransformerModelChunkSchedulePlan.run``, megatron/core/models/common/
    model_chunk_schedule_plan.py at NVIDIA/Megatron-LM b0cc2706), so one more layer's stored
    tensors at most (`_merged_passes`: on stages that run a merged pass).
    """
    model, parallel = layer.model, layer.parallel
    per_mb = _stored_by_layer(layer, stage.layer_is_moe, recompute)
    per_mb += _embedding_and_head_activations(model, parallel, stage, layer.micro_batch,
                                              layer.seq_len, layer.dropout,
                                              _logit_bytes(layer.framework,
                                                           layer.compiled_loss))
    activations = per_mb * _inflight_factor(parallel, schedule, num_microbatches, rank)
    if combined_1f1b and _merged_passes(parallel, num_microbatches, rank):
        activations += max((layer.stored(is_moe, recompute) for is_moe in set(stage.layer_is_moe)),
                           default=0.0)
    if recompute != Recompute.NONE:
        # Backward re-runs one layer at a time, so what recompute dropped exists for one layer.
        activations += max(layer.stored(is_moe, Recompute.NONE) - layer.stored(is_moe, recompute)
                           for is_moe in set(stage.layer_is_moe))
    return activations


def _stored_by_layer(layer: _LayerActivations, layer_is_moe: tuple[bool, ...],
                     recompute: Recompute) -> float:
    """What all of a stage's layers store for one micro-batch: each layer kind computed once
    (the search asks this for many layouts), summed layer by layer in order."""
    kinds = {k: layer.stored(k, recompute) for k in set(layer_is_moe)}
    return sum(kinds[is_moe] for is_moe in layer_is_moe)


@dataclass(frozen=True, slots=True, kw_only=True)
class _LayerActivations:
    """What one layer of one micro-batch stores under a recompute policy, per framework."""

    model: ModelSpec
    parallel: ParallelConfig
    micro_batch: int
    seq_len: int
    flash_attention: bool
    dropout: bool
    framework: Framework
    fp8: bool
    modules: tuple[RecomputeModule, ...] = ()
    compiled_loss: bool = False  # torchtitan's loss under torch.compile (`_logit_bytes`)
    compiled: bool = True  # torchtitan's blocks under torch.compile (`eager_llama_extra_bytes`)
    lora_targets: tuple[str, ...] | None = None  # LoRA: frozen base (`frozen_linear_input_bytes`)

    def stored(self, is_moe: bool, policy: Recompute) -> float:
        kw = dict(micro_batch=self.micro_batch, seq_len=self.seq_len)
        if policy == Recompute.SELECTIVE and self.modules:
            core = RecomputeModule.CORE_ATTN in self.modules
            out = replace(self, modules=(), lora_targets=None).stored(
                is_moe, Recompute.SELECTIVE if core else Recompute.NONE)
            fp8 = self.fp8 and _saves_fp8_inputs(self.framework)
            return out - recompute_modules_freed(self.model, self.parallel, self.modules,
                                                 moe_layer=is_moe, fp8=fp8, **kw)
        if (self.framework == Framework.TORCHTITAN and policy == Recompute.SELECTIVE
                and not is_moe):
            return op_sac_bytes_per_layer(self.model, self.parallel, **kw)
        out = activation_bytes_per_layer(self.model, self.parallel, recompute=policy,
                                         moe_layer=is_moe, flash_attention=self.flash_attention,
                                         dropout=self.dropout, **kw)
        if (self.framework == Framework.TORCHTITAN and policy == Recompute.NONE
                and not self.compiled):
            out += eager_llama_extra_bytes(self.model, self.parallel, moe_layer=is_moe, **kw)
        fp8 = self.fp8 and _saves_fp8_inputs(self.framework)
        if fp8 and policy != Recompute.FULL:
            out -= fp8_saved_input_savings(self.model, self.parallel, moe_layer=is_moe, **kw)
        if self.lora_targets is not None and policy != Recompute.FULL and not is_moe:
            out -= frozen_linear_input_bytes(self.model, self.parallel, self.lora_targets,
                                             fp8=fp8, **kw)
        return out


def _gathered_weights(parallel: ParallelConfig, stage: StageParams, framework: Framework,
                      param_dtype_bytes: float) -> float:
    """Unsharded weights (and gradients) ZeRO-3/FSDP holds beside the shards.

    Default: the current layer plus the prefetched next one (`ZERO3_GATHERED_LAYERS`).
    torchtitan with pipeline parallelism sets FSDP2 ``reshard_after_forward=False``
    (parallelize_llama.py at 9dec370: "reshard_after_forward = False" when pp is enabled), so
    the whole stage stays unsharded from its forward to its backward; and torch's pipeline
    stage turns gradient sync and resharding off for every micro-batch but the last
    (torch/distributed/pipelining/stage.py, backward_maybe_with_nosync:
    set_requires_gradient_sync(False)), so FSDP2 accumulates the stage's unsharded gradients
    upcast to the reduce dtype (_fsdp_param.py, to_accumulated_grad_if_needed), fp32 in
    torchtitan (--training.mixed_precision_reduce float32).
    """
    if parallel.zero_stage < 3:
        return 0.0
    if framework == Framework.TORCHTITAN and parallel.pp > 1:
        return stage.total * (param_dtype_bytes + TORCHTITAN_REDUCE_BYTES)
    return ZERO3_GATHERED_LAYERS * stage.largest_layer * param_dtype_bytes


def _embedding_and_head_activations(model: ModelSpec, parallel: ParallelConfig, stage: StageParams,
                                    micro_batch: int, seq_len: int, dropout: bool,
                                    logit_bytes: float = LOGITS_BYTES) -> float:
    """Per micro-batch: the embedding dropout mask on the first stage; on the last stage the
    final-norm and LM-head inputs and the fp32 logits (vocab split over tp)."""
    tokens = micro_batch * seq_len / parallel.cp
    rep = 1.0 / parallel.tp if parallel.sp else 1.0
    out = 0.0
    if stage.has_embedding and dropout:
        out += DROPOUT_MASK_BYTES * model.hidden * rep * tokens
    if stage.has_lm_head:
        out += 2 * 2.0 * model.hidden * rep * tokens
        out += logit_bytes * model.vocab / parallel.tp * tokens
    return out
