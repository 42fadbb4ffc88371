# SPDX-License-Identifier: Apache-2.0
"""The ends of the model around the layers: embedding lookup, final norm and LM head.

Vocab-parallel embedding and LM head over TP (Megatron-LM, Shoeybi et al. 2019 sec. 3). The LM
head GEMM runs in the activation dtype under fp8/int4 weights: Transformer Engine recipes keep
the output layer in bf16, and vLLM's quantisation methods leave ``ParallelLMHead`` unquantised
(as `analytical.memory.weight_bytes` counts it). Training computes logits and cross-entropy for
every token; inference only for the rows that sample, then gathers the vocab shards.
"""

from __future__ import annotations

from collections.abc import Sequence

from analytical.dtypes import DType
from analytical.layer_spec import LayerPhase, Node, Precision, Sharding, Stream
from analytical.layers import coll, gemm, mem, norm_kind
from analytical.model_spec import ModelSpec
from analytical.ops import CollectiveKind, MemoryBoundSpec, MemoryOpKind


def vocab_per_rank(model: ModelSpec, tp: int) -> int:
    return -(-model.vocab // tp)


def embedding_ops(model: ModelSpec, sh: Sharding, tokens: int,
                  precision: Precision | None = None) -> list[Node]:
    """Gather rows of the local vocab shard, then all-reduce the partial sums over TP
    (reduce-scatter into the sequence-parallel layout with SP)."""
    act = (precision or Precision()).act
    nodes = [mem("embedding", MemoryOpKind.EMBEDDING, tokens, model.hidden, act)]
    if sh.tp > 1:
        kind = CollectiveKind.REDUCE_SCATTER if sh.sp else CollectiveKind.ALL_REDUCE
        nodes.append(coll(f"embedding.tp_{kind}", kind, tokens * model.hidden * act.bytes, sh.tp,
                          sh.tp_rpn, Stream.TP, act))
    return nodes


def final_norm_op(model: ModelSpec, sh: Sharding, tokens: int,
                  precision: Precision | None = None) -> Node:
    rows = tokens // sh.tp if sh.sp else tokens
    return mem("final_norm", norm_kind(model), rows, model.hidden, (precision or Precision()).act)


def lm_head_ops(model: ModelSpec, sh: Sharding, rows: int, phase: LayerPhase,
                precision: Precision | None = None) -> list[Node]:
    """Logits of ``rows`` positions on the local vocab shard; training adds the cross-entropy
    (fp32, over the shard), inference the gather of fp32 logits to sample."""
    act = (precision or Precision()).act
    vocab = vocab_per_rank(model, sh.tp)
    nodes = gemm("lm_head", rows, vocab, model.hidden, act)
    if phase == LayerPhase.TRAIN:
        nodes.append(mem("cross_entropy", MemoryOpKind.CROSS_ENTROPY, rows, vocab, DType.FP32))
    elif sh.tp > 1:
        nodes.append(coll("lm_head.gather_logits", CollectiveKind.ALL_GATHER,
                          rows * vocab * sh.tp * DType.FP32.bytes, sh.tp, sh.tp_rpn, Stream.TP,
                          DType.FP32))
    return nodes


# Megatron-Core's unfused vocab-parallel cross entropy (`VocabParallelCrossEntropy` and
# `_VocabParallelCrossEntropy`, megatron/core/tensor_parallel/cross_entropy.py, core_r0.8.0) runs
# one eager kernel per expression over the [tokens, vocab / tp] logits: forward `.float()` (read
# 2, write 4 bytes per logit), max (read 4), in-place subtract of the max (4 + 4), exp (4 + 4),
# sum (4), in-place divide by the sum (4 + 4): 38 bytes; backward the in-place multiply by the
# output gradient (4 + 4) and the cast of the fp32 gradient back to the bf16 logits (4 + 2): 14
# bytes. The graph's cross entropy is one fused pass (4 bytes forward, 8 backward:
# `analytical.op_kinds`), so the unfused loss adds 34 and 6 bytes per logit, counted as fp32
# copy passes of 8 bytes. Which runs take it: `simulate.torch_kernels.unfused_loss_nodes`.
UNFUSED_LOSS_PASSES = ((38 - 4) / 8, (14 - 8) / 8)  # (forward, backward) fp32 copy passes


def unfused_loss_passes(head: Sequence[Node]) -> tuple[list[Node], list[Node]]:
    """The forward and backward copy passes the unfused cross entropy adds over each cross
    entropy of ``head`` (comment above)."""
    ce = [n.op for n in head if isinstance(n.op, MemoryBoundSpec)
          and n.op.kind == MemoryOpKind.CROSS_ENTROPY]

    def passes(name: str, count: float) -> list[Node]:
        return [Node(name=name, count=count, op=MemoryBoundSpec(
            kind=MemoryOpKind.COPY, rows=op.rows, cols=op.cols, dtype=DType.FP32)) for op in ce]

    return (passes("loss_unfused", UNFUSED_LOSS_PASSES[0]),
            passes("loss_unfused.bwd", UNFUSED_LOSS_PASSES[1]))
