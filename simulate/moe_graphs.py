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
from analytical.paths import DATASETS_DIR

__all__ = ["CudaGraphScope", "ROUTING_PARTS", "UNFUSED_ROUTER", "attention_bases",
           "eager_nodes", "eager_routing", "forward_base"]


class CudaGraphScope(StrEnum):
    """Parts of an MoE layer captured in CUDA graphs (Megatron-Core ``cuda_graph_scope``), and
    ``full_iteration`` (``cuda_graph_impl: full_iteration``: the whole step)."""

    ATTN = "attn"
    MOE_ROUTER = "moe_router"
    MOE_PREPROCESS = "moe_preprocess"
    FULL_ITERATION = "full_iteration"


# Kernels of the routing path per MoE layer that the operator graph does not list, (forward,
# backward) per part, measured with Megatron-Core's own code: scripts/count_moe_ops.py ran
# megatron-core 0.15.0's ``MoELayer`` (``alltoall`` dispatcher, dropless, aux-loss, 128 experts
# top-8 as Qwen3-30B-A3B / 235B-A22B) on EP 2/4/8 gloo ranks and counted its ATen ops
# (datasets/measurements/llmsim/cpu/moe-op-counts/, `MEASURED_COUNTS`), with router and permute
# fusion on as Megatron-Bridge sets them (every performance recipe sets ``moe_router_fusion``;
# ``Qwen3MoEModelProvider`` sets ``moe_permute_fusion = True``), TE's fused functions counted
# per TE's code (the script's ``TE_KERNELS``). A part's count is its kernels, collectives and
# device-to-host copies less the graph's own nodes (`GRAPH_NODES`): router = the gating GEMM's
# casts, the fused top-k, aux-loss scores and aux loss with their bookkeeping (7, 11);
# preprocess = the token counts, their all-gather over EP, split sums and four device-to-host
# copies (11, 0); permute = the probabilities' all-to-alls and chunk sort, TE's row-id map,
# the input-gradient sum (7, 2). Identical for EP 2, 4, 8 and 4096 or 16384 tokens.
# (Estimates before: router 30 / 20, preprocess 10 / 0, permute 15 / 20.)
ROUTING_PARTS = {"router": (7, 11), "preprocess": (11, 0), "permute": (7, 2)}
# The router without `--moe-router-fusion` (Megatron-Core's default,
# `TransformerConfig.moe_router_fusion = False`), measured the same way (forward, backward).
# Megatron-LM's DeepSeek-V3 GB200 note counts 72 forward kernels for its router (docs/
# discussions/deepseek-v3-gb200-optimization, 2.1.4): group-limited sigmoid top-k with expert
# bias and sequence aux loss, not Qwen3's softmax top-k with aux loss.
UNFUSED_ROUTER = (22, 15)
MEASURED_COUNTS = DATASETS_DIR / "measurements" / "llmsim" / "cpu" / "moe-op-counts"
# Graph nodes (forward, backward) per part that the measured counts include: the router's
# GEMM (forward; dgrad and wgrad), and dispatch, two ``ep_all_to_all``, two ``sort_chunks``
# and combine (each with its backward node).
GRAPH_NODES = {"router": (1, 2), "preprocess": (0, 0), "permute": (6, 6)}
_GRAPHED_PARTS = {CudaGraphScope.MOE_ROUTER: "router", CudaGraphScope.MOE_PREPROCESS: "preprocess"}

ATTN_END = "mlp_norm"  # the attention part is every forward node up to the pre-MLP norm
ROUTER = "router"


def forward_base(name: str) -> str:
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
    eager = [n for n in nodes if forward_base(n.name) not in captured]
    return eager, sum(g != CudaGraphScope.FULL_ITERATION for g in set(graphs))


def eager_routing(graphs: Collection[CudaGraphScope], *, backward: bool,
                  router_fusion: bool = True) -> int:
    """Routing kernels (`ROUTING_PARTS`) the CPU issues outside the captured parts; an unfused
    router issues `UNFUSED_ROUTER` kernels instead of the fused counts."""
    side = 1 if backward else 0
    parts = dict(ROUTING_PARTS)
    if not router_fusion:
        parts["router"] = UNFUSED_ROUTER
    return sum(k[side] for part, k in parts.items()
               if part not in {_GRAPHED_PARTS.get(g) for g in graphs})
