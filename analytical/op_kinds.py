# SPDX-License-Identifier: Apache-2.0
"""The closed choices of the operator vocabulary (`analytical.ops`) and the per-kind cost
tables its specs read: attention phases, collective kinds with their nccl-tests bus factors,
memory-bound kinds with their per-element traffic, MoE permutation kinds. `analytical.ops`
re-exports every name; import them from there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    PREFILL = "prefill"  # many query tokens, training forward/backward included
    DECODE = "decode"  # few query tokens against a KV cache


class CollectiveKind(StrEnum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    SEND_RECV = "send_recv"


# nccl-tests "bus bandwidth" factors: bytes each rank puts on the wire per byte of `size_bytes`.
# See NVIDIA nccl-tests doc/PERFORMANCE.md.
BUS_FACTOR: dict[CollectiveKind, Callable[[int], float]] = {
    CollectiveKind.ALL_REDUCE: lambda n: 2.0 * (n - 1) / n,
    CollectiveKind.ALL_GATHER: lambda n: (n - 1) / n,
    CollectiveKind.REDUCE_SCATTER: lambda n: (n - 1) / n,
    CollectiveKind.ALL_TO_ALL: lambda n: (n - 1) / n,
    CollectiveKind.BROADCAST: lambda n: 1.0,
    CollectiveKind.SEND_RECV: lambda n: 1.0,
}


class MemoryOpKind(StrEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"
    GELU = "gelu"
    SILU = "silu"
    SWIGLU = "swiglu"  # silu(gate) * up: reads 2 rows of `cols`, writes 1
    ADD = "add"  # residual add: reads 2, writes 1
    MUL = "mul"
    SOFTMAX = "softmax"
    ROTARY = "rotary"
    EMBEDDING = "embedding"  # gather rows of a table
    DROPOUT = "dropout"
    CROSS_ENTROPY = "cross_entropy"  # over vocab logits
    COPY = "copy"  # cast / contiguous / transpose
    OPTIMIZER = "optimizer"  # fused Adam over `cols` parameters per row


@dataclass(frozen=True, slots=True)
class MemoryCost:
    reads: float  # tensors of size rows*cols read (forward)
    writes: float
    flops_per_element: float
    bwd_reads: float
    bwd_writes: float


# Per-element traffic, in units of one [rows, cols] tensor. Backward reads the saved input(s)
# and the output gradient and writes the input gradient(s).
MEMORY_OP_COSTS: dict[MemoryOpKind, MemoryCost] = {
    MemoryOpKind.LAYERNORM: MemoryCost(1, 1, 8, 2, 1),
    MemoryOpKind.RMSNORM: MemoryCost(1, 1, 4, 2, 1),
    MemoryOpKind.GELU: MemoryCost(1, 1, 8, 2, 1),
    MemoryOpKind.SILU: MemoryCost(1, 1, 4, 2, 1),
    MemoryOpKind.SWIGLU: MemoryCost(2, 1, 5, 3, 2),
    MemoryOpKind.ADD: MemoryCost(2, 1, 1, 1, 2),
    MemoryOpKind.MUL: MemoryCost(2, 1, 1, 3, 2),
    MemoryOpKind.SOFTMAX: MemoryCost(1, 1, 5, 2, 1),
    MemoryOpKind.ROTARY: MemoryCost(1, 1, 3, 1, 1),
    MemoryOpKind.EMBEDDING: MemoryCost(1, 1, 0, 1, 1),
    MemoryOpKind.DROPOUT: MemoryCost(1, 1, 2, 1, 1),
    MemoryOpKind.CROSS_ENTROPY: MemoryCost(1, 0, 5, 1, 1),
    MemoryOpKind.COPY: MemoryCost(1, 1, 0, 1, 1),
    # Adam, mixed precision: read fp32 master, m, v, grad; write master, m, v (+ bf16 copy);
    # counted as 4 reads and 4 writes of a `dtype` tensor per element.
    MemoryOpKind.OPTIMIZER: MemoryCost(4, 4, 10, 0, 0),
}


class MoEOpKind(StrEnum):
    DISPATCH = "dispatch"  # permute tokens into per-expert contiguous buffers
    COMBINE = "combine"  # un-permute and weight-sum the top-k expert outputs
