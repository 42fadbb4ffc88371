# SPDX-License-Identifier: Apache-2.0
"""Checks of a training layout against the model, the device and the batch, before simulating.

Every impossible layout raises `SpecError` naming the scenario field to change; soft problems
(a sequence longer than the model was trained on) come back as warnings.
"""

from __future__ import annotations

from analytical.activations import check_tensor_parallel
from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.hardware import HardwareSpec
from analytical.parallel import PipelineSplit, Schedule
from analytical.stage import chunk_layers
from simulate.scenario import ClusterSpec, TrainingSpec

P = "training.parallel"


def _rename(exc: SpecError, source: str | None) -> SpecError:
    field = exc.field if exc.field.startswith("training.") else f"training.{exc.field}"
    return SpecError(field, exc.reason, source=source)


def validate_layout(model, hw: HardwareSpec, cluster: ClusterSpec, training: TrainingSpec, *,
                    source: str | None = None) -> list[str]:
    """Raise SpecError for a layout that cannot run; return warnings for doubtful ones
    (layers that do not divide evenly over the stages; a sequence beyond max_seq_len).

    KV heads: when tp > kv_heads (and tp is a multiple of it) each rank keeps one replicated KV
    head, as vLLM and Megatron-Core (``num_query_groups`` < tp) do; otherwise rejected.
    The checks run in a fixed order, so the first impossible field is the one reported.
    """
    par = training.parallel
    if par.world_size != cluster.num_gpus:
        raise SpecError(f"{P}.dp", f"tp*pp*dp*cp = {par.tp}*{par.pp}*{par.dp}*{par.cp} = "
                        f"{par.world_size} but hardware.num_gpus = {cluster.num_gpus}",
                        source=source)
    try:
        check_tensor_parallel(model, par.tp)
    except SpecError as exc:
        raise _rename(exc, source) from None
    warnings = _check_stages(model, par, source)
    _check_experts(model, par, source)
    _check_batch_and_schedule(training, source)
    _check_sequence(training, source)
    _check_precision(hw, training, source)
    if training.seq_len > model.max_seq_len:
        warnings.append(f"training.seq_len={training.seq_len} exceeds the model's "
                        f"max_seq_len={model.max_seq_len}")
    gpn = cluster.gpus_per_node or hw.gpus_per_node
    if cluster.num_gpus > gpn and cluster.num_gpus % gpn:
        raise SpecError("hardware.num_gpus", f"{cluster.num_gpus} GPUs do not fill whole nodes "
                        f"of {gpn}", source=source)
    return warnings


def _check_stages(model, par, source: str | None) -> list[str]:
    """Layers (plus embedding and loss under an ``embedding-loss`` split) over pp*vpp chunks:
    every stage needs a layer; an uneven split only warns."""
    warnings = []
    slots = model.layers + (2 if par.pipeline_split == PipelineSplit.EMBEDDING_LOSS else 0)
    if slots < par.pp * par.vpp:
        raise SpecError(f"{P}.pp", f"pp*vpp={par.pp * par.vpp} exceeds layers={model.layers}",
                        source=source)
    chunks = par.pp * par.vpp
    per_chunk = -(-slots // chunks)
    if (par.pp - 1) * per_chunk >= slots:  # the last stage's first chunk is past the end
        raise SpecError(f"{P}.pp", f"layers={model.layers} in chunks of {per_chunk} "
                        f"(ceil(layers / (pp*vpp={chunks}))) leave pipeline stage {par.pp - 1} "
                        "without layers", source=source)
    parts = chunk_layers(model.layers, chunks, par.pipeline_split)
    for stage in (0, par.pp - 1):  # an embedding-loss split can leave an end stage no layer
        if not any(parts[v * par.pp + stage] for v in range(par.vpp)):
            raise SpecError(f"{P}.pp", f"pipeline stage {stage} holds no layer of "
                            f"{model.layers} ({par.pipeline_split} split over pp*vpp={chunks})",
                            source=source)
    if slots % chunks:
        # Allowed, as Megatron's uneven first/last stages are: each virtual stage takes
        # ceil(layers / (pp*vpp)) layers and the last ones take the rest.
        warnings.append(f"layers={model.layers} do not split evenly over pp*vpp="
                        f"{par.pp * par.vpp}; the last stage holds fewer layers")
    return warnings


def _check_experts(model, par, source: str | None) -> None:
    """Expert parallelism needs an MoE model, divides the experts and the dp*cp ranks; fsdp is
    ZeRO-3."""
    if model.is_moe:
        if model.num_experts % par.ep:
            raise SpecError(f"{P}.ep", f"num_experts={model.num_experts} is not divisible by "
                            f"ep={par.ep}", source=source)
        if not par.experts_tile_stage:
            raise SpecError(f"{P}.ep", f"ep={par.ep} x expert tp={par.expert_tp} must divide "
                            f"tp*cp*dp={par.tp * par.cp * par.dp} (experts are spread over one "
                            "stage's ranks)", source=source)
        if par.tp > 1 and not par.sp:
            raise SpecError(f"{P}.sp", "MoE with tp > 1 needs sequence parallelism (sp: true), "
                            "as in Megatron-Core", source=source)
    elif par.ep > 1:
        raise SpecError(f"{P}.ep", f"ep={par.ep} needs an MoE model; {model.name} is dense",
                        source=source)
    if par.fsdp and par.zero not in (0, 3):
        raise SpecError(f"{P}.zero", f"fsdp shards like ZeRO-3; zero={par.zero} contradicts it",
                        source=source)


def _check_batch_and_schedule(training: TrainingSpec, source: str | None) -> None:
    """The global batch splits into micro-batches that the pipeline schedule can run."""
    par = training.parallel
    if training.global_batch % (training.micro_batch * par.dp):
        raise SpecError("training.global_batch", f"global_batch={training.global_batch} is not a "
                        f"multiple of micro_batch*dp={training.micro_batch * par.dp}",
                        source=source)
    m = training.num_microbatches
    if training.schedule == Schedule.INTERLEAVED:
        if par.vpp < 2 or par.pp < 2:
            raise SpecError(f"{P}.vpp", "the interleaved schedule needs pp > 1 and vpp > 1",
                            source=source)
        if m % par.pp:
            raise SpecError("training.global_batch", f"interleaved needs num_microbatches={m} "
                            f"to be a multiple of pp={par.pp}", source=source)
    elif par.vpp > 1:
        raise SpecError(f"{P}.vpp", f"vpp={par.vpp} needs schedule: interleaved", source=source)
    if training.schedule == Schedule.ONE_F_ONE_B and m < par.pp:
        raise SpecError("training.global_batch", f"1f1b needs num_microbatches={m} >= pp="
                        f"{par.pp}; raise global_batch or lower micro_batch", source=source)


def _check_sequence(training: TrainingSpec, source: str | None) -> None:
    """The sequence splits over context-parallel ranks (fused attention) and tp under sp."""
    par = training.parallel
    if not training.fused_attention and par.cp > 1:
        raise SpecError("training.attention", "context parallelism is modelled with fused "
                        "(flash) attention only", source=source)
    split = 2 * par.cp if par.cp > 1 else 1
    if training.seq_len % split:
        raise SpecError("training.seq_len", f"seq_len={training.seq_len} must be divisible by "
                        f"2*cp={split} (load-balanced causal split)", source=source)
    if par.sp and (training.seq_len // par.cp * training.micro_batch) % par.tp:
        raise SpecError("training.seq_len", "tokens per rank must be divisible by tp under "
                        "sequence parallelism", source=source)


def _check_precision(hw: HardwareSpec, training: TrainingSpec, source: str | None) -> None:
    """The device has tensor cores for the training precision."""
    if training.precision == DType.FP8 and not hw.supports(DType.FP8):
        raise SpecError("training.precision", f"{hw.name} has no fp8 tensor cores",
                        source=source)
    if not hw.supports(DType.BF16) and training.precision == DType.BF16:
        raise SpecError("training.precision", f"{hw.name} has no bf16 support", source=source)
