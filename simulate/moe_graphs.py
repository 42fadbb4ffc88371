# SPDX-License-Identifier: Apache-2.0
"""CUDA graphs of an MoE layer's static parts: what the CPU no longer issues kernel by kernel
(scenario ``training.cuda_graph``; corpus column ``cuda_graph``).

Megatron-Core captures parts of each layer with Transformer Engine's
``make_graphed_callables`` (``--cuda-graph-impl transformer_engine --cuda-graph-scope ...``):
``attn`` (the attention block), ``moe_router`` (the router, with its load-balancing loss) and
``moe_preprocess`` (the dispatcher's token-count bookkeeping before the device-to-host sync);
the routed experts stay eager, because their shapes change with the routing. A captured part,
forward and backward, is replayed by one graph launch instead of its kernels' CPU issue time.
``--cuda-graph-impl full_iteration`` captures the whole step (Megatron-Bridge 26.06 recipes,
with the device-to-host sync removed), so no MoE layer waits on its CPU. Sources:
NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization (section 2.3, "Partial CUDA
Graphs": "routed experts are dynamic while attention, router, EP preprocess, and shared experts
remain static, so we capture these static components"); the scopes each Megatron-Bridge
performance recipe sets are in ``scripts/performance/configs/*/*workload_base_configs.py``
(``cuda_graph_impl``, ``cuda_graph_scope``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from enum import StrEnum

from analytical.layer_spec import Node

__all__ = ["CudaGraphScope", "ROUTING_PARTS", "UNFUSED_ROUTER_FWD", "attention_bases",
           "eager_nodes", "eager_routing"]


class CudaGraphScope(StrEnum):
    """Parts of an MoE layer captured in CUDA graphs (Megatron-Core ``cuda_graph_scope``), and
    ``full_iteration`` (``cuda_graph_impl: full_iteration``: the whole step)."""

    ATTN = "attn"
    MOE_ROUTER = "moe_router"
    MOE_PREPROCESS = "moe_preprocess"
    FULL_ITERATION = "full_iteration"


# Kernels of the routing path per MoE layer that the operator graph does not list, (forward,
# backward) per part. Router forward: 31 kernels with `--moe-router-fusion` (72 without), as
# Megatron-LM's DeepSeek-V3 GB200 note measured them (docs/discussions/
# deepseek-v3-gb200-optimization, section 2.1.4: "reducing the total number of kernels in the
# router part from 72 to 31", TE PR 1883); every Megatron-Bridge performance recipe of
# v0.2.0-v0.6.0 sets `moe_router_fusion = True`; 30 here, the router GEMM being a graph node.
# The rest counted from megatron/core/transformer/moe at d98e8a64: the router's backward
# (`topk_routing_with_score_function` and `switch_load_balancing_loss_func` replayed by
# autograd, ~20); preprocess = the dispatcher's token counts, their all-gather over EP, split
# sums and three device-to-host copies (~10, no backward); permute = `permute` /
# `sort_chunks_by_idxs` / `unpermute` index work (~15, ~20 backward).
ROUTING_PARTS = {"router": (30, 20), "preprocess": (10, 0), "permute": (15, 20)}
# The router's forward without `--moe-router-fusion` (Megatron-Core's default,
# `TransformerConfig.moe_router_fusion = False`): the note's 72 kernels less the router GEMM.
# The note measured the forward only; the backward keeps its count (autograd's replay of the
# unfused top-k and aux-loss functions, the ~20 above, is what the fused path also runs).
UNFUSED_ROUTER_FWD = 71
_GRAPHED_PARTS = {CudaGraphScope.MOE_ROUTER: "router", CudaGraphScope.MOE_PREPROCESS: "preprocess"}

ATTN_END = "mlp_norm"  # the attention part is every forward node up to the pre-MLP norm
ROUTER = "router"


def _base(name: str) -> str:
    """The forward node a pass's node belongs to (``qkv_proj.dgrad`` -> ``qkv_proj``)."""
    name = name.split(".fp8_cast")[0]
    for suffix in (".bwd", ".dgrad", ".wgrad"):
        name = name.removesuffix(suffix)
    return name


def attention_bases(fwd: Sequence[Node]) -> frozenset[str]:
    """Forward node names of the attention part: up to and including the pre-MLP norm."""
    names = [n.name for n in fwd]
    end = names.index(ATTN_END) + 1 if ATTN_END in names else 0
    return frozenset(names[:end])


def eager_nodes(nodes: Sequence[Node], graphs: Collection[CudaGraphScope],
                attention: frozenset[str]) -> tuple[list[Node], int]:
    """The nodes of a pass the CPU still issues one by one, and the graph launches that replace
    the captured ones (one per captured part present)."""
    captured: set[str] = set()
    if CudaGraphScope.ATTN in graphs:
        captured |= attention
    if CudaGraphScope.MOE_ROUTER in graphs:
        captured.add(ROUTER)
    eager = [n for n in nodes if _base(n.name) not in captured]
    return eager, sum(g != CudaGraphScope.FULL_ITERATION for g in set(graphs))


def eager_routing(graphs: Collection[CudaGraphScope], *, backward: bool,
                  router_fusion: bool = True) -> int:
    """Routing kernels (`ROUTING_PARTS`) the CPU issues outside the captured parts; an unfused
    router issues `UNFUSED_ROUTER_FWD` forward kernels instead of the fused count."""
    side = 1 if backward else 0
    parts = dict(ROUTING_PARTS)
    if not router_fusion:
        parts["router"] = (UNFUSED_ROUTER_FWD, ROUTING_PARTS["router"][1])
    return sum(k[side] for part, k in parts.items()
               if part not in {_GRAPHED_PARTS.get(g) for g in graphs})
