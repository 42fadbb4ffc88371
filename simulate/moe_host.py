# SPDX-License-Identifier: Apache-2.0
"""Host-bound MoE layers: the CPU launches the kernels of an eager Megatron-Core MoE layer no
faster than one per `HOST_S_PER_KERNEL`, and the layer cannot hide that behind the GPU.

Why it cannot: Megatron-Core's all-to-all token dispatcher copies the per-expert token counts to
the host and synchronises on them in every MoE layer's forward (``MoEAlltoAllTokenDispatcher``:
``_maybe_dtoh_and_synchronize`` at ``cuda_sync_point`` "before_ep_alltoall" with EP > 1, else
"before_finish"; megatron/core/transformer/moe/token_dispatcher.py at NVIDIA/Megatron-LM
d98e8a64), because the all-to-all splits and the grouped GEMM's ``m_splits`` are Python lists.
After the sync the GPU's queue is empty, so each MoE layer takes at least the CPU time to issue
its kernels. The Megatron-Core MoE README (same commit, "CPU Overhead Bottleneck") names the
symptom and the remedies: CUDA graphs, fewer kernels (router / permute fusion), a larger
micro-batch. The backward pass has no sync, but its layers are alike, so the CPU falls behind
there by the same per-layer margin; each pass takes max(GPU time, CPU issue time).

Kernels counted per pass: every operator node (one kernel or collective each), the expert GEMMs
and their fp8 casts once per local expert (Transformer Engine's ``GroupedLinear`` quantises each
expert's split and issues one cuBLAS GEMM per expert: ``general_grouped_gemm``,
transformer_engine/pytorch/cpp_extensions/gemm.py), plus the router, load-balancing loss and
token-permutation bookkeeping that the operator graph does not list (`ROUTING_KERNELS`).

Switched by framework (`HOST_BOUND_FRAMEWORKS`: Megatron-Core and NeMo run this dispatcher);
applies to MoE layer blocks only (dense layers have no sync, so the CPU runs ahead).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from analytical.layer_spec import Node
from analytical.memory import Framework
from analytical.ops import GemmSpec, MoESpec
from simulate.costs import BlockCost, PassCost
from simulate.graph import Block

__all__ = ["HOST_S_PER_KERNEL", "host_bound_costs", "pass_kernels"]

# CPU time to issue one kernel from eager PyTorch: Python, autograd and ATen dispatch and
# cudaLaunchKernel together take "~5-25 us of CPU-side work per op" ("From PyTorch op to kernel
# launch", https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html, its
# per-layer table); the middle of that range.
HOST_S_PER_KERNEL = 15e-6

# Kernels of the unfused routing path per MoE layer (forward, backward) that the operator graph
# does not list, counted from megatron/core/transformer/moe at d98e8a64:
# `topk_routing_with_score_function` (score function, top-k, gather, normalise, two scatters
# into dense probs / routing map: ~12), `switch_load_balancing_loss_func` and its tracker (~8),
# the dispatcher's preprocess (token counts, their all-gather over EP, split sums and three
# device-to-host copies: ~10), `permute` / `sort_chunks_by_idxs` / `unpermute` index work
# (~15); autograd replays most of them in backward.
ROUTING_KERNELS = (45, 40)

HOST_BOUND_FRAMEWORKS = frozenset({Framework.MEGATRON, Framework.NEMO})


def _is_moe(block: Block) -> bool:
    return any(isinstance(n.op, MoESpec) for n in block.fwd)


def _local_experts(block: Block) -> int:
    return max((n.op.batch for n in block.fwd
                if n.name.startswith("experts.") and isinstance(n.op, GemmSpec)), default=1)


def pass_kernels(nodes: Iterable[Node], local_experts: int, routing: int) -> float:
    """Kernels the CPU issues for one pass of an MoE layer (see the module docstring)."""
    total = float(routing)
    for n in nodes:
        per_expert = n.name.startswith("experts.") and (isinstance(n.op, GemmSpec)
                                                        or ".fp8_cast" in n.name)
        total += n.count * (local_experts if per_expert else 1)
    return total


def _floor(p: PassCost, kernels: float) -> PassCost:
    host_s = kernels * HOST_S_PER_KERNEL
    if host_s <= p.elapsed_s:
        return p
    # The GPU waits for the CPU inside the compute stream's critical path: counted as compute.
    return PassCost(elapsed_s=host_s, compute_s=p.compute_s + host_s - p.elapsed_s,
                    engine_s=p.engine_s)


def host_bound_costs(costs: Mapping[Any, BlockCost], blocks: Mapping[Any, Block],
                     framework: str) -> dict[Any, BlockCost]:
    """``costs`` with each MoE layer pass raised to its CPU issue time under a framework that
    synchronises in the dispatcher (unchanged otherwise)."""
    out = dict(costs)
    if Framework(framework) not in HOST_BOUND_FRAMEWORKS:
        return out
    for key, block in blocks.items():
        if key not in costs or not _is_moe(block):
            continue
        local = _local_experts(block)
        c = costs[key]
        out[key] = BlockCost(fwd=_floor(c.fwd, pass_kernels(block.fwd, local, ROUTING_KERNELS[0])),
                             bwd=_floor(c.bwd, pass_kernels(block.bwd, local, ROUTING_KERNELS[1])))
    return out
