# SPDX-License-Identifier: Apache-2.0
"""Backward and recompute nodes of a layer, derived from its forward nodes (`analytical.layers`).

A forward GEMM [T, k] @ [k, n] has two backward GEMMs: dgrad [T, n] @ [n, k] and wgrad
[k, T] @ [T, n] (for an activation GEMM the "wgrad" is the gradient of its second input). Frozen
base weights under LoRA have no wgrad. Elementwise and attention ops run their backward kernel;
MoE dispatch and combine swap. Collectives follow Korthikanti et al. 2022, sec. 4.2.2: an
all-reduce stays an all-reduce; an SP all-gather becomes a reduce-scatter plus the gather again
for wgrad (the gathered input is not kept), an SP reduce-scatter an all-gather; the expert-TP
gather (kept by Megatron-Core's dispatcher) a reduce-scatter; an all-to-all an all-to-all. The CP
ring also returns dK/dV (twice the bytes); the CP all-gather adds a reduce-scatter of dK/dV.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from analytical.layer_spec import Node, Param, Stream
from analytical.ops import (
    AttentionSpec,
    CollectiveKind,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MoEOpKind,
    MoESpec,
)
from analytical.parallel import Recompute, RecomputeModule

RECOMPUTE_PREFIX = "recompute."  # names of the forward nodes re-run before backward
REGATHER = "regather"  # suffix of the SP all-gather repeated in backward for the wgrad



def own_backward_reduce_scatter(node: Node) -> bool:
    """Whether a backward pass's node is a reduce-scatter of the backward itself, not of a
    forward re-run before it (`recompute_nodes`): the ones an async TP that fuses only a
    reduce-scatter fed by one matmul leaves unfused (torchtitan's, under Inductor)."""
    return (isinstance(node.op, CollectiveSpec)
            and node.op.kind == CollectiveKind.REDUCE_SCATTER
            and not node.name.startswith(RECOMPUTE_PREFIX))


_SWAP = {MoEOpKind.DISPATCH: MoEOpKind.COMBINE, MoEOpKind.COMBINE: MoEOpKind.DISPATCH}


def _gemm_bwd(node: Node, op: GemmSpec, frozen_base: bool) -> list[Node]:
    dgrad = GemmSpec(m=op.m, n=op.k, k=op.n, dtype=op.dtype, batch=op.batch)
    out = [replace(node, name=f"{node.name}.dgrad", op=dgrad)]
    if not (frozen_base and node.param == Param.BASE):
        wgrad = GemmSpec(m=op.k, n=op.n, k=op.m, dtype=op.dtype, batch=op.batch)
        out.append(replace(node, name=f"{node.name}.wgrad", op=wgrad))
    return out


def _collective_bwd(node: Node, op: CollectiveSpec) -> list[Node]:
    ag, rs = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER

    def make(suffix: str, kind: CollectiveKind, size: int = op.size_bytes) -> Node:
        return replace(node, name=f"{node.name}.{suffix}",
                       op=replace(op, kind=kind, size_bytes=size))

    if node.stream == Stream.CP:
        if op.kind == CollectiveKind.SEND_RECV:
            return [make("bwd", op.kind, 2 * op.size_bytes)]
        return [make("bwd", ag), make("dkv", rs)]
    if op.kind == ag and node.stream == Stream.TP:  # SP gather: regather for wgrad, scatter dX
        return [make(REGATHER, ag), make("bwd", rs)]
    if op.kind == ag:
        return [make("bwd", rs)]
    if op.kind == rs:
        return [make("bwd", ag)]
    return [make("bwd", op.kind)]


def backward_node(node: Node, *, frozen_base: bool = False) -> list[Node]:
    """The backward nodes of one forward node."""
    op = node.op
    if isinstance(op, GemmSpec):
        return _gemm_bwd(node, op, frozen_base)
    if isinstance(op, CollectiveSpec):
        return _collective_bwd(node, op)
    if isinstance(op, MoESpec):
        return [replace(node, name=f"{node.name}.bwd", op=replace(op, kind=_SWAP[op.kind]))]
    if isinstance(op, (AttentionSpec, MemoryBoundSpec)):
        return [replace(node, name=f"{node.name}.bwd", op=replace(op, backward=True))]
    raise TypeError(f"no backward for {type(op).__name__}")


def backward_nodes(fwd: Sequence[Node], *, frozen_base: bool = False) -> tuple[Node, ...]:
    """Backward of a forward pass, in reverse order."""
    return tuple(b for n in reversed(fwd) for b in backward_node(n, frozen_base=frozen_base))


def recompute_nodes(fwd: Sequence[Node], recompute: Recompute, *, per_op: bool = False,
                    modules: Collection[RecomputeModule] = ()) -> tuple[Node, ...]:
    """Forward nodes repeated before backward: selective repeats the attention core
    (Korthikanti et al. 2022, sec. 5), Megatron-Core's ``modules`` where given
    (`module_recompute`), or with ``per_op`` torchtitan's policy (`per_op_recompute`); full the
    whole layer, its communication included."""
    if recompute == Recompute.SELECTIVE and modules:
        chosen = module_recompute(fwd, modules)
    elif recompute == Recompute.SELECTIVE and per_op:
        chosen = per_op_recompute(fwd)
    elif recompute == Recompute.SELECTIVE:
        chosen = [n for n in fwd if n.core and n.stream == Stream.COMPUTE]
    elif recompute == Recompute.FULL:
        chosen = [n for n in fwd if n.stream != Stream.FSDP]
    else:
        chosen = []
    return tuple(replace(n, name=f"{RECOMPUTE_PREFIX}{n.name}") for n in chosen)


def per_op_recompute(fwd: Sequence[Node]) -> list[Node]:
    """torchtitan's per-op selective checkpoint of one block: matmul outputs are saved except
    every second matmul of the block (its counter restarts per checkpointed block), SDPA and
    TP reduce-scatter outputs are saved, every other operator (norms, activations, rotary,
    residuals, TP all-gathers) is recomputed (`_save_list` and `_get_custom_policy`,
    torchtitan/parallelisms/parallelize_llama.py, 2024-12; activation_checkpoint.py since)."""
    chosen, matmuls = [], 0
    for n in fwd:
        if isinstance(n.op, GemmSpec) and not n.core:
            matmuls += 1
            if matmuls % 2 == 0:
                chosen.append(n)
        elif n.stream == Stream.COMPUTE and not isinstance(n.op, AttentionSpec) and not n.core:
            chosen.append(n)
        elif (n.stream == Stream.TP and isinstance(n.op, CollectiveSpec)
              and n.op.kind == CollectiveKind.ALL_GATHER):
            chosen.append(n)
    return chosen


_MOE_NODES = ("router", "dispatch", "ep_all_to_all", "experts.", "combine", "shared_expert",
              "mlp.tp_all_reduce")
_MODULE_NODES = {  # node-name prefixes each Megatron-Core module's checkpoint re-runs
    RecomputeModule.MOE_ACT: ("experts.act",),  # the activation, with its clamp passes
    RecomputeModule.MLA_UP_PROJ: ("q_down_norm", "q_up", "kv_down_norm", "kv_up", "rotary"),
    RecomputeModule.MOE: _MOE_NODES,
    RecomputeModule.SHARED_EXPERTS: ("shared_expert",),
}


def module_recompute(fwd: Sequence[Node], modules: Collection[RecomputeModule]) -> list[Node]:
    """The forward nodes Megatron-Core's selective ``recompute_modules`` re-run in backward
    (`analytical.activations.recompute_modules_freed` says which and why): ``layernorm`` the
    norms that are their own module (MLA's input norm, an MoE layer's pre-MLP norm), ``mlp``
    a dense layer's whole MLP with its TP communication, ``core_attn`` the attention core."""
    names = {n.name for n in fwd}
    is_moe, is_mla = "router" in names, "kv_down" in names
    prefixes: list[str] = [p for m in modules for p in _MODULE_NODES.get(RecomputeModule(m), ())]
    if RecomputeModule.LAYERNORM in modules:
        prefixes += (["attn_norm"] if is_mla else []) + (["mlp_norm"] if is_moe else [])
    if RecomputeModule.MLP in modules and not is_moe:
        prefixes += ["mlp_norm", "mlp."]
    core = RecomputeModule.CORE_ATTN in modules
    return [n for n in fwd if (core and n.core and n.stream == Stream.COMPUTE)
            or n.name.startswith(tuple(prefixes))]
