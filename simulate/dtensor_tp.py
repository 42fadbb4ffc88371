# SPDX-License-Identifier: Apache-2.0
"""torchtitan's tensor parallelism and projections as DTensor, Inductor and its model code run
them, where they differ from the Megatron-style graph (`analytical.layers`,
`analytical.layer_backward`): no re-gather of the sequence-parallel input in backward, a
re-concatenation copy per sequence-parallel collective on dim 1, and the separate q/k/v and
w1/w3 matmuls its per-op checkpoint counts. Switched by `training.framework`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from analytical.dtypes import DType
from analytical.layer_backward import REGATHER, own_backward_reduce_scatter
from analytical.layer_spec import Node, Stream
from analytical.memory import Framework
from analytical.ops import CollectiveKind, CollectiveSpec, GemmSpec
from simulate.torch_kernels import SHARED_INPUT, Fp8Recipe, copy_pass

__all__ = ["DTENSOR_SP_COPY", "DTENSOR_TP", "FLOAT8_TP", "SEPARATE_PROJECTIONS",
           "dtensor_tp_backward", "float8_tp", "float8_tp_gathers", "projection_grad_sums",
           "separate_projections", "sp_layout_copies"]


# torchtitan's tensor parallelism is DTensor's (torch/distributed/tensor/parallel/style.py,
# `ColwiseParallel` behind `PrepareModuleInput` / `SequenceParallel`): the sequence-sharded
# input is all-gathered by a redistribute and the gathered tensor is what the linear saves for
# its weight gradient, or, under activation checkpointing, what the recompute re-gathers (the
# all-gather is not in torchtitan's per-op save list, and full checkpointing re-runs the
# block). Megatron-Core's `LinearWithGradAccumulationAndAsyncCommunication` saves the sharded
# input and all-gathers it again in backward (Korthikanti et al. 2022, sec. 4.2.2: the
# ``.regather`` nodes of `analytical.layer_backward`), which DTensor never does.
DTENSOR_TP = frozenset({Framework.TORCHTITAN})


# DTensor shards the sequence on dim 1 of torchtitan's [batch, seq, hidden] activations
# (`SequenceParallel(sequence_dim=1)`, `PrepareModuleInput(input_layouts=Shard(1))`,
# `RowwiseParallel(output_layouts=Shard(1))`), and the functional collectives it redistributes
# with run NCCL on dim 0 only: `all_gather_tensor(..., gather_dim=1)` gathers into a [tp x
# rows] buffer and re-concatenates it along the gather dim (`torch.cat(torch.chunk(res,
# group_size, dim=0), dim=gather_dim)`), and `reduce_scatter_tensor(..., scatter_dim=1)`
# concatenates the chunks along dim 0 before the reduce-scatter (torch/distributed/
# _functional_collectives.py, torch 2.5-2.8): one bf16 copy of the whole gathered (or
# unscattered) tensor on the compute stream per SP collective, forward, recomputed and
# backward. Megatron-Core's [seq, batch, hidden] layout gathers on dim 0 (no copy). Async TP's
# fused kernels read the shards in place (`restride_A_shard_for_fused_all_gather_matmul`), so
# only the collectives it does not fuse keep the copy (`efficiency.tp_overlap_exposes_bwd_rs`).
DTENSOR_SP_COPY = DTENSOR_TP


def sp_layout_copies(framework: str, nodes: Sequence[Node], tokens: int, *, tp_overlap: bool,
                     backward: bool) -> list[Node]:
    """The re-concatenation copies of DTensor's sequence-parallel collectives among
    ``nodes`` (comment above), over ``tokens`` rows; none for other frameworks. Under async TP
    only the backward's own reduce-scatters (the ones micro-pipeline TP leaves unfused)."""
    if Framework(framework) not in DTENSOR_SP_COPY:
        return []
    out = []
    for n in nodes:
        op = n.op
        if (n.stream != Stream.TP or not isinstance(op, CollectiveSpec) or op.group_size <= 1
                or op.kind not in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)):
            continue
        if tp_overlap and not (backward and own_backward_reduce_scatter(n)):
            continue
        cols = max(1, int(op.size_bytes // op.dtype.bytes) // max(1, tokens))
        out.append(copy_pass(f"{n.name}.sp_cat", tokens, cols, dtype=op.dtype))
    return out


def dtensor_tp_backward(framework: str, bwd: Sequence[Node]) -> list[Node]:
    """A layer's backward nodes as the framework's TP runs them: without Megatron's
    sequence-parallel re-gather for DTensor (comment above); unchanged otherwise."""
    if Framework(framework) not in DTENSOR_TP:
        return list(bwd)
    return [n for n in bwd if not (n.stream == Stream.TP and n.name.endswith(f".{REGATHER}"))]


# torchtitan issues wq, wk, wv and w1, w3 as separate linears (torchtitan/models/llama/model.py
# at 9dec370: `self.wq(x), self.wk(x), self.wv(x)`; `self.w2(F.silu(self.w1(x)) * self.w3(x))`),
# and Inductor leaves them separate (its horizontal GEMM fusions, `group_fusion` /
# `batch_fusion`, are off by default): three GEMMs that each read the whole input [tokens, hidden]
# where the graph's fused qkv_proj reads it once, and in backward three input gradients that
# are summed (one more read of [tokens, hidden] per extra projection, `projection_grad_sums`).
# The input's fp8 cast is one for the siblings (the same ops on the same tensor, merged by
# AOTAutograd's CSE; under torchtitan's float8 TP one cast of the shard before the gather), so
# wk, wv and w3 (`torch_kernels.SHARED_INPUT`) cast none. Its per-op checkpoint's "every second mm" counts
# seven matmuls per block, wq wk wv wo w1 w3 w2, and recomputes wk, wo and w3
# (`analytical.activations.op_sac_bytes_per_layer` counts the same order for memory).
SEPARATE_PROJECTIONS = frozenset({Framework.TORCHTITAN})


def separate_projections(framework: str, fwd: Sequence[Node], q: int, kv: int) -> list[Node]:
    """``fwd`` with the fused QKV (``q`` + 2 ``kv`` columns) and gated up projections split
    into the matmuls the framework issues, in its call order (comment above). Unchanged for
    other frameworks or other widths."""
    if Framework(framework) not in SEPARATE_PROJECTIONS:
        return list(fwd)
    out: list[Node] = []
    for n in fwd:
        op = n.op
        if isinstance(op, GemmSpec) and n.name == "qkv_proj" and op.n == q + 2 * kv:
            out += [replace(n, name=f"{n.name}.{w}", op=replace(op, n=width))
                    for w, width in (("wq", q), ("wk", kv), ("wv", kv))]
        elif isinstance(op, GemmSpec) and n.name.endswith(".up_gate") and op.n % 2 == 0:
            out += [replace(n, name=f"{n.name}.{w}", op=replace(op, n=op.n // 2))
                    for w in ("w1", "w3")]
        else:
            out.append(n)
    return out


# torchtitan's float8 tensor parallelism (torchtitan/models/llama3/parallelize_llama.py at
# 820504e, `parallelize_llama.py` at 9dec370; torchao/float8/float8_tensor_parallel.py): with
# tensorwise scaling the block plan takes `PrepareFloat8ModuleInput` / `Float8ColwiseParallel`
# / `Float8RowwiseParallel`, which cast the sequence-sharded input to float8 *before* the
# all-gather (one cast of the shard, shared by wq/wk/wv and w1/w3) and gather it in float8, and
# whose `NoopFwToFloat8BwDynamic` casts the output gradient before the backward all-gather of
# the row-parallel output, so every TP all-gather carries 1 byte per element; the
# reduce-scatters stay bf16. "For rowwise recipes, we use regular TP and all-gather happens in
# high precision" (820504e), as with bf16.
FLOAT8_TP = frozenset({Framework.TORCHTITAN})


def float8_tp(framework: str, recipe: str) -> bool:
    """Whether the framework's fp8 TP gathers in float8 (comment above); for fp8 runs."""
    return Framework(framework) in FLOAT8_TP and Fp8Recipe(recipe) == Fp8Recipe.TENSORWISE


def float8_tp_gathers(framework: str, recipe: str, fp8: bool, nodes: Sequence[Node]
                      ) -> list[Node]:
    """``nodes`` with their TP all-gathers in float8 under `float8_tp`; unchanged otherwise."""
    if not (fp8 and float8_tp(framework, recipe)):
        return list(nodes)
    out = []
    for n in nodes:
        op = n.op
        if (n.stream == Stream.TP and isinstance(op, CollectiveSpec)
                and op.kind == CollectiveKind.ALL_GATHER and op.dtype.bytes > 1):
            n = replace(n, op=replace(op, dtype=DType.FP8,
                                      size_bytes=max(1, int(op.size_bytes // op.dtype.bytes))))
        out.append(n)
    return out


def projection_grad_sums(fwd: Sequence[Node]) -> list[Node]:
    """The sums of the split projections' input gradients (comment above): one read of the
    [rows, in] gradient per projection that shares its input, in bf16 copy passes (a copy
    reads and writes: half a pass per read)."""
    out = []
    for n in fwd:
        if isinstance(n.op, GemmSpec) and n.name.endswith(SHARED_INPUT):
            out.append(copy_pass(f"{n.name}.dx_sum", n.op.m * n.op.batch, n.op.k, 0.5))
    return out
