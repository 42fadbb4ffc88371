# SPDX-License-Identifier: Apache-2.0
"""The vocabulary of the layer builder (`analytical.layers`): how a layer is sharded, which
tokens it sees, in which precision, with which LoRA adapters, and the `Node` it returns.

One `Sharding`, one `LoraSpec` (one target vocabulary), one KV-heads-per-rank rule and one
expert tensor-parallel rule, shared by training, inference and the profiler.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from analytical.activations import check_tensor_parallel, local_kv_heads
from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.model_spec import ModelSpec
from analytical.ops import OpSpec


class LayerPhase(StrEnum):
    TRAIN = "train"  # training forward: dropout on where the model uses it
    PREFILL = "prefill"  # inference, many query tokens per sequence
    DECODE = "decode"  # inference, a few query tokens against a KV cache


class CpAlgorithm(StrEnum):
    RING = "ring"  # Megatron-Core p2p ring: one KV block per step
    ALL_GATHER = "all_gather"  # gather all KV before attention, reduce-scatter dKV after


# The node of PyTorch context parallel's all-gather rotation (`Sharding.cp_torch`): the pass
# costs hide it behind the local attention block only, its dK/dV behind the remote blocks.
CP_ROTATE_GATHER = "cp_rotate_all_gather_kv"


class Stream(StrEnum):
    """Where a node or an executed task runs: the compute stream or a communication stream (one
    per parallel group, as Megatron-Core issues each group's collectives on its own stream)."""

    COMPUTE = "compute"
    TP = "tp"  # tensor/sequence-parallel collectives
    CP = "cp"  # context-parallel KV exchange
    EP = "ep"  # expert-parallel all-to-all and expert-TP collectives
    FSDP = "fsdp"  # parameter all-gather / gradient reduce-scatter
    P2P = "p2p"  # pipeline sends between stages
    DP = "dp"  # data-parallel gradient reduction
    OPS = "ops"  # trace track only: the operators inside a compute task


COMM_STREAMS = (Stream.TP, Stream.CP, Stream.EP, Stream.FSDP)


def ranks_per_node(group: int, stride: int, gpus_per_node: int) -> int:
    """Members of a group of ranks ``stride`` apart that share one node (Megatron-Core's rank
    order: tp fastest, then cp, then dp/ep, then pp)."""
    if stride >= gpus_per_node:
        return 1
    return math.gcd(group, max(1, gpus_per_node // stride))


@dataclass(frozen=True, slots=True, kw_only=True)
class Sharding:
    """How one layer is split over GPUs; ``*_rpn`` = ranks of that group per node.

    ``etp`` is the expert tensor-parallel degree; 0 means ``tp``, Megatron-Core's default
    (megatron/training/arguments.py: ``expert_tensor_parallel_size = tensor_model_parallel_size``
    when unset). Inference states its own (vLLM spreads experts over the TP ranks: tp // ep).
    """

    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 0
    pp: int = 1
    sp: bool = False
    tp_rpn: int = 1
    cp_rpn: int = 1
    ep_rpn: int = 1
    cp_algorithm: CpAlgorithm = CpAlgorithm.RING
    # PyTorch's experimental context_parallel (torchtitan): it rotates the K/V handed to SDPA,
    # which torchtitan has repeated to the query heads (`repeat_kv`, torchtitan/models/llama/
    # model.py at 9dec370), and its all-gather rotation (`_RotateMethod.ALL_GATHER`) is issued
    # before the local causal block and waited on after it (torch/distributed/tensor/
    # experimental/_attention.py `_templated_ring_attention`), dK/dV passed on around the ring.
    cp_torch: bool = False
    fsdp_group: int = 1  # > 1: ZeRO-3/FSDP gathers each layer's parameters over this group
    fsdp_rpn: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "cp", "ep", "pp", "tp_rpn", "cp_rpn", "ep_rpn", "fsdp_group",
                     "fsdp_rpn"):
            _positive_int(self, name, 1)
        _positive_int(self, "etp", 0)
        if self.sp and self.tp == 1:
            raise SpecError("parallel.sp", "sequence parallelism needs tp > 1")

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def etp_rpn(self) -> int:
        """The expert TP group is a subgroup of the TP ranks (stride 1)."""
        return math.gcd(self.expert_tp, self.tp_rpn)


def _positive_int(spec: object, name: str, minimum: int) -> None:
    value = getattr(spec, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"parallel.{name}", f"must be an integer >= {minimum}, got {value!r}")


def heads_per_rank(model: ModelSpec, tp: int) -> tuple[int, int]:
    """(query heads, KV heads) on one TP rank; KV heads are replicated when tp > kv_heads."""
    check_tensor_parallel(model, tp)
    return model.heads // tp, (model.heads // tp if model.is_mla
                               else local_kv_heads(model.kv_heads, tp))


@dataclass(frozen=True, slots=True, kw_only=True)
class Precision:
    """GEMM (weight) dtype, activation dtype and the attention kernel's dtype (0: activations)."""

    gemm: DType = DType.BF16
    act: DType = DType.BF16
    attention: DType | None = None

    @property
    def attn(self) -> DType:
        return self.attention or self.act


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenBatch:
    """``seqs`` sequences of ``q_len`` new tokens each, attending to ``kv_len`` positions
    (whole sequences: context parallelism splits them inside the builder)."""

    seqs: int
    q_len: int
    kv_len: int = 0  # 0: q_len (no cached prefix)

    def __post_init__(self) -> None:
        for name in ("seqs", "q_len"):
            if isinstance(getattr(self, name), bool) or getattr(self, name) < 1:
                raise SpecError(f"tokens.{name}", f"must be >= 1, got {getattr(self, name)!r}")
        if self.kv_len and self.kv_len < self.q_len:
            raise SpecError("tokens.kv_len", f"{self.kv_len} < q_len={self.q_len}")

    @property
    def context(self) -> int:
        return self.kv_len or self.q_len

    @property
    def tokens(self) -> int:
        return self.seqs * self.q_len


class Param(StrEnum):
    NONE = ""  # no parameter (activation GEMM, elementwise op, collective)
    BASE = "base"  # a model weight (frozen under LoRA)
    ADAPTER = "adapter"  # a LoRA adapter weight (trains)


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """One operator of a layer: ``count`` identical instances on ``stream``.

    ``core`` marks the attention core (what selective recompute repeats and what inference
    costs per sequence); ``param`` says whose weight a GEMM multiplies.
    """

    name: str
    op: OpSpec
    stream: Stream = Stream.COMPUTE
    count: float = 1.0
    core: bool = False
    param: Param = Param.NONE


# ---- LoRA ------------------------------------------------------------------------------------

LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
# Merged spellings (vLLM's fused qkv_proj / gate_up_proj) accepted on input.
LORA_ALIASES = {"qkv": ("q", "k", "v"), "gate_up": ("gate", "up")}


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraSpec:
    """LoRA adapters (Hu et al. 2021) of rank ``rank`` on ``targets``, normalised to the
    per-projection names of `LORA_TARGETS` (PEFT's q_proj ... down_proj, suffix dropped)."""

    rank: int
    targets: tuple[str, ...] = ("q", "v")  # PEFT's default for Llama
    FIELD: ClassVar[str] = "lora"

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise SpecError(f"{self.FIELD}.rank", f"must be an integer >= 1, got {self.rank!r}")
        object.__setattr__(self, "targets", normalise_targets(self.targets,
                                                              f"{self.FIELD}.targets"))


def normalise_targets(targets: Iterable[str], field: str = "lora.targets") -> tuple[str, ...]:
    """Expand merged names (qkv, gate_up), drop repeats, keep `LORA_TARGETS` order."""
    if isinstance(targets, str):
        targets = (targets,)
    wanted: set[str] = set()
    for target in targets:
        expanded = LORA_ALIASES.get(str(target), (str(target),))
        bad = [t for t in expanded if t not in LORA_TARGETS]
        if bad:
            raise SpecError(field, f"unknown {target!r}; known: "
                            f"{', '.join((*LORA_TARGETS, *LORA_ALIASES))}")
        wanted.update(expanded)
    if not wanted:
        raise SpecError(field, "needs at least one projection")
    return tuple(t for t in LORA_TARGETS if t in wanted)


def lora_dims(model: ModelSpec, target: str) -> tuple[int, int, bool]:
    """(in, out, column_parallel) of one targeted projection of a dense-MLP layer."""
    if model.is_mla and target in ("q", "k", "v"):
        raise SpecError("lora.targets", f"{target!r} on MLA's low-rank projections is not "
                        "modelled; target o or the MLP")
    if model.is_moe and target in ("gate", "up", "down"):
        raise SpecError("lora.targets", f"{target!r} on MoE experts is not modelled; "
                        "target attention projections")
    if target == "gate" and not model.gated_mlp:
        raise SpecError("lora.targets", f"{model.name} has no gate projection (not gated)")
    h, d = model.hidden, model.head_dim
    table = {
        "q": (h, model.heads * d, True), "k": (h, model.kv_heads * d, True),
        "v": (h, model.kv_heads * d, True), "o": (model.heads * model.value_head_dim, h, False),
        "gate": (h, model.ffn_hidden, True), "up": (h, model.ffn_hidden, True),
        "down": (model.ffn_hidden, h, False),
    }
    return table[target]


def lora_params_per_layer(model: ModelSpec, lora: LoraSpec) -> int:
    """rank * (in + out) summed over the targets (PEFT's count, one layer)."""
    return sum(lora.rank * (i + o) for i, o, _ in (lora_dims(model, t) for t in lora.targets))
