# SPDX-License-Identifier: Apache-2.0
"""Parallel layout and execution choices shared by the memory model and the simulator.

Convention (see analytical/README.md): every parallel axis has a *degree*; the GPU count of a
training job is tp * pp * dp * cp, and expert parallelism (ep) splits the experts inside the
dp * cp * tp ranks, each expert split over ``etp`` ranks (the expert tensor-parallel degree,
default tp as in Megatron-Core: megatron/training/arguments.py sets
``expert_tensor_parallel_size = tensor_model_parallel_size`` when unset); experts are replicated
over the remaining expert-data-parallel ranks, tp * dp * cp / (etp * ep).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from analytical.errors import SpecError


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"  # recompute attention core (Korthikanti et al. 2022)
    FULL = "full"  # keep only each layer's input, recompute the layer


class RecomputeModule(StrEnum):
    """Megatron-Core's selective-recompute submodules (``TransformerConfig.recompute_modules``,
    megatron/core/transformer/transformer_config.py): with ``recompute_granularity: selective``
    the listed ones, and only those, are recomputed (default ``core_attn`` alone)."""

    CORE_ATTN = "core_attn"
    MOE_ACT = "moe_act"
    LAYERNORM = "layernorm"
    MLA_UP_PROJ = "mla_up_proj"
    MLP = "mlp"
    MOE = "moe"
    SHARED_EXPERTS = "shared_experts"


class Schedule(StrEnum):
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    GPIPE = "gpipe"


class PipelineSplit(StrEnum):
    """How layers are cut into pipeline chunks. ``embedding-loss`` counts the embedding and the
    loss as one layer each (Megatron-Core ``account_for_embedding_in_pipeline_split`` and
    ``account_for_loss_in_pipeline_split``; Llama 3, arXiv 2407.21783 section 3.3.2: "we reduce
    one Transformer layer each from the first and the last stages")."""

    EVEN = "even"
    EMBEDDING_LOSS = "embedding-loss"


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelConfig:
    """Degrees of each parallel axis, plus the sharding of optimizer state."""

    tp: int = 1  # tensor parallel
    pp: int = 1  # pipeline stages
    dp: int = 1  # data parallel replicas
    cp: int = 1  # context parallel (sequence split for attention)
    ep: int = 1  # expert parallel
    etp: int = 0  # expert tensor parallel; 0 = tp (Megatron-Core's default)
    vpp: int = 1  # virtual pipeline chunks per stage (interleaved schedule)
    sp: bool = False  # sequence parallel for the TP region (norms, dropout)
    zero: int = 0  # ZeRO stage 0-3 over dp (and cp)
    fsdp: bool = False  # fully sharded (equivalent to ZeRO-3 for memory)
    pipeline_split: PipelineSplit = PipelineSplit.EVEN

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "ep", "vpp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"parallel.{name}", f"must be an integer >= 1, got {value!r}")
        if isinstance(self.etp, bool) or not isinstance(self.etp, int) or self.etp < 0:
            raise SpecError("parallel.etp", f"must be an integer >= 0, got {self.etp!r}")
        if self.zero not in (0, 1, 2, 3):
            raise SpecError("parallel.zero", f"must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.sp and self.tp == 1:
            raise SpecError("parallel.sp", "sequence parallelism needs tp > 1")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def expert_shard_group(self) -> int:
        """Ranks that hold the same experts (expert data parallel): tp*dp*cp / (etp*ep)."""
        return max(1, self.tp * self.dp * self.cp // (self.expert_tp * self.ep))

    @property
    def experts_tile_stage(self) -> bool:
        """Megatron-Core's rule (parallel_state.initialize_model_parallel): the etp x ep expert
        grid tiles the tp*cp*dp ranks of one pipeline stage."""
        return self.tp * self.dp * self.cp % (self.expert_tp * self.ep) == 0

    @property
    def zero_stage(self) -> int:
        """FSDP shards parameters, gradients and optimizer state like ZeRO-3."""
        return 3 if self.fsdp else self.zero

    @property
    def shard_group(self) -> int:
        """Ranks that share (and may shard) one replica's optimizer state: dp * cp."""
        return self.dp * self.cp

    @property
    def fsdp_group(self) -> int:
        """Ranks a ZeRO-3 / FSDP unit's parameters are gathered over: the shard group under
        ZeRO-3 or FSDP, else 1 (parameters replicated)."""
        return self.shard_group if self.zero_stage >= 3 else 1
