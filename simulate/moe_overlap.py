# SPDX-License-Identifier: Apache-2.0
"""Expert-parallel all-to-all hidden behind another micro-batch's compute: Megatron-Core's
``overlap_moe_expert_parallel_comm`` (Megatron-Bridge ``moe_a2a_overlap``; scenario
``training.overlap.moe_a2a``).

The combined 1F1B schedule (``schedule_layer_1f1b``, megatron/core/models/common/
model_chunk_schedule_plan.py, NVIDIA/Megatron-LM core_r0.14+) runs one micro-batch's layer
forward (F) beside another micro-batch's layer backward (B), all-to-alls on a communication
stream, each behind one compute chunk of the other pass:

- B's combine all-to-all behind F's attention,
- F's dispatch all-to-all behind B's expert MLP,
- B's dispatch all-to-all behind F's expert MLP,
- F's combine all-to-all behind B's attention.

So a pass's all-to-all costs only what its chunk does not cover, the chunk slowed by the SMs
the all-to-all takes while they overlap (`overlap.overlap_window`). The warm-up forwards and the
cool-down backwards run unpaired, exposed (`paired_fraction`). Chunks are the compute
operators of the layer's graph: attention = every operator before the pre-MLP norm (its
backward: after the norm's backward), expert MLP = the operators between the two all-to-alls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from analytical.layer_spec import Node, Stream
from simulate.costs import BlockCost
from simulate.graph import Block
from simulate.overlap import overlap_window
from simulate.scenario import TrainingSpec

__all__ = ["a2a_overlap_costs", "paired_fraction"]

A2A = "ep_all_to_all"


def paired_fraction(num_microbatches: int, pp: int, vpp: int) -> float:
    """Share of a stage's passes that run paired: all but the warm-up forwards (and as many
    cool-down backwards) of the first stage, the most (Megatron-Core schedules.py,
    ``get_pp_rank_microbatches``: (pp - 1) x 2 + (vpp - 1) x pp interleaved, pp - 1 otherwise;
    one more with the a2a overlap, and one with pp = 1)."""
    total = num_microbatches * vpp
    warmup = (pp - 1) * (2 if vpp > 1 else 1) + (vpp - 1) * pp + 1
    return max(0.0, (total - min(warmup, total)) / total)


def _seconds(nodes: Sequence[Node], est: Mapping[str, Any], stream: Stream = Stream.COMPUTE
             ) -> float:
    return sum(est[n.op.key].latency_s * n.count for n in nodes if n.stream == stream)


def _chunks(nodes: Sequence[Node], norm: str, est: Mapping[str, Any], *, backward: bool
            ) -> tuple[float, float, float, float] | None:
    """(first all-to-all, second all-to-all, attention compute, expert-MLP compute) of a pass."""
    names = [n.name for n in nodes]
    a2a = [i for i, n in enumerate(names) if n.startswith(A2A)]
    if len(a2a) != 2 or norm not in names:
        return None
    cut = names.index(norm)
    attn = nodes[cut + 1:] if backward else nodes[:cut]
    first, second = (_seconds([nodes[i]], est, nodes[i].stream) for i in a2a)
    return first, second, _seconds(attn, est), _seconds(nodes[a2a[0] + 1:a2a[1]], est)


def _hidden(comm_s: float, compute_s: float, slowdown: float) -> float:
    """Seconds a collective run beside a compute chunk saves against running after it."""
    return comm_s + compute_s - overlap_window(compute_s, comm_s, slowdown)[0]


def a2a_overlap_costs(costs: Mapping[Any, BlockCost], blocks: Mapping[Any, Block],
                      est: Mapping[str, Any], t: TrainingSpec, slowdown: float
                      ) -> dict[Any, BlockCost]:
    """``costs`` with each MoE layer's all-to-alls hidden as the combined 1F1B schedule hides
    them (module docstring) in the paired passes, under ``training.overlap.moe_a2a``."""
    out = dict(costs)
    if not t.overlap.moe_a2a:
        return out
    par = t.parallel
    fraction = paired_fraction(t.num_microbatches, par.pp, par.vpp)
    for key, block in blocks.items():
        f = _chunks(block.fwd, "mlp_norm", est, backward=False)
        b = _chunks(block.bwd, "mlp_norm.bwd", est, backward=True)
        if key not in costs or f is None or b is None:
            continue
        f_dispatch, f_combine, f_attn, f_mlp = f
        b_combine, b_dispatch, b_attn, b_mlp = b
        hide_f = _hidden(f_dispatch, b_mlp, slowdown) + _hidden(f_combine, b_attn, slowdown)
        hide_b = _hidden(b_combine, f_attn, slowdown) + _hidden(b_dispatch, f_mlp, slowdown)
        c = costs[key]
        out[key] = BlockCost(
            fwd=replace(c.fwd, elapsed_s=max(c.fwd.compute_s, c.fwd.elapsed_s - fraction * hide_f)),
            bwd=replace(c.bwd, elapsed_s=max(c.bwd.compute_s, c.bwd.elapsed_s - fraction * hide_b)))
    return out
