# SPDX-License-Identifier: Apache-2.0
"""Time of a graph `Block` from its operators' estimates and the overlap model.

Compute nodes run back to back on the compute stream. Communication is placed as Megatron-style
training runs it: TP/SP collectives on the critical path unless ``overlap.tp_comm`` (then each
hides behind the GEMM it feeds or drains); the CP ring
exchange hidden behind the attention blocks it feeds; EP all-to-all exposed; ZeRO-3/FSDP
parameter gathers prefetched behind the layer's compute. Hidden communication still costs the
ratio slowdown of `simulate.overlap`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from analytical.layer_backward import own_backward_reduce_scatter
from analytical.layer_spec import CP_ROTATE_GATHER, Stream
from simulate.engines import Estimate
from simulate.graph import Block, Node
from simulate.overlap import overlap_window
from simulate.tp_overlap import pipelined_rs_extra_s, split_gemm_s


@dataclass(frozen=True, slots=True, kw_only=True)
class PassCost:
    """One direction (forward or backward) of a block, seconds."""

    elapsed_s: float  # on the compute stream's critical path
    compute_s: float  # compute operators alone
    engine_s: Mapping[str, float]  # operator time per engine (compute and communication)

    @property
    def exposed_comm_s(self) -> float:
        return self.elapsed_s - self.compute_s


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockCost:
    fwd: PassCost
    bwd: PassCost


def _pass(nodes: Sequence[Node], est: Mapping[str, Estimate], *, tp_overlap: bool,
          slowdown: float, rs_splits: int = 0, rs_margin: float = 0.0,
          chunked: Mapping[str, float] | None = None, exposed_rs: bool = False) -> PassCost:
    compute = 0.0
    comm: dict[str, float] = {}
    engine_s: dict[str, float] = {}
    for node in nodes:
        e = est[node.op.key]
        t = e.latency_s * node.count
        add_engine_time(engine_s, {e.engine: e.latency_s}, node.count)
        if node.stream == Stream.COMPUTE:
            compute += t
        else:
            comm[node.stream] = comm.get(node.stream, 0.0) + t
    elapsed = compute
    if comm.get("cp", 0.0):
        elapsed += _cp_exposed_s(nodes, est, slowdown)
    tp_s = comm.get("tp", 0.0)
    if tp_s:
        elapsed += (_paired_tp_s(nodes, est, slowdown, rs_splits, exposed_rs, rs_margin,
                                 chunked or {}) if tp_overlap else tp_s)
    elapsed += comm.get("ep", 0.0)
    fsdp_s = comm.get("fsdp", 0.0)
    if fsdp_s:
        elapsed += overlap_window(compute, fsdp_s, slowdown)[0] - compute
    return PassCost(elapsed_s=elapsed, compute_s=compute, engine_s=engine_s)


def _cp_exposed_s(nodes: Sequence[Node], est: Mapping[str, Estimate], slowdown: float) -> float:
    """Time the CP exchange adds to a pass: a ring step's transfer overlaps the attention block
    it precedes; PyTorch's all-gather rotation (`CP_ROTATE_GATHER`) overlaps the local causal
    block only and its dK/dV the remote blocks; any other all-gather runs before attention."""
    def total(pick: Callable[[Node], bool]) -> float:
        return sum(est[n.op.key].latency_s * n.count for n in nodes if pick(n))

    attention = total(lambda n: n.stream == Stream.COMPUTE and n.op.family == "attention")
    cp_s = total(lambda n: n.stream == Stream.CP)
    if any(n.stream == Stream.CP and n.op.kind == "send_recv" for n in nodes):  # type: ignore[union-attr]
        return overlap_window(attention, cp_s, slowdown)[0] - attention
    if not any(n.stream == Stream.CP and CP_ROTATE_GATHER in n.name for n in nodes):
        return cp_s
    local = total(lambda n: n.stream == Stream.COMPUTE and n.op.family == "attention"
                  and "cp_block" not in n.name)
    dkv = total(lambda n: n.stream == Stream.CP and n.name.endswith(".dkv"))
    return (overlap_window(local, cp_s - dkv, slowdown)[0] - local
            + overlap_window(attention - local, dkv, slowdown)[0] - (attention - local))


def _paired_tp_s(nodes: Sequence[Node], est: Mapping[str, Estimate], slowdown: float,
                 rs_splits: int = 0, exposed_rs: bool = False, rs_margin: float = 0.0,
                 chunked: Mapping[str, float] | None = None) -> float:
    """Time TP collectives add when overlapped as TE userbuffers / async TP do it: each one is
    decomposed with the GEMM it feeds (an all-gather: the next GEMM) or drains (a reduce-scatter
    or all-reduce: the previous one), so it hides only behind that GEMM, each GEMM once
    (Wang et al. 2022, "Overlap communication with dependent computation via decomposition";
    Transformer Engine userbuffers, Megatron-Core --tp-comm-overlap). Unpaired: exposed. With
    ``rs_splits`` a reduce-scatter follows its GEMM in that many chunks, so its last chunk has
    no GEMM left to hide behind (`efficiency.tp_overlap_rs_splits`); with ``rs_margin`` as well
    that GEMM runs, every chunk, on the SMs TE's pipelined reduce-scatter leaves it
    (`tp_overlap.pipelined_rs_extra_s`) instead of the generic slowdown. A GEMM in ``chunked``
    (op key -> seconds as TE's chunks, `tp_overlap.chunked_gemms`) costs that while it hides
    a collective. With ``exposed_rs`` the
    backward's own reduce-scatters (not a recomputed forward's) stay exposed
    (`efficiency.tp_overlap_exposes_bwd_rs`)."""
    gemms = [i for i, n in enumerate(nodes) if n.stream == Stream.COMPUTE and n.op.family == "gemm"]
    free = set(gemms)
    extra = 0.0
    for i, node in enumerate(nodes):
        if node.stream != Stream.TP:
            continue
        comm = est[node.op.key].latency_s * node.count
        after = [j for j in gemms if j > i and j in free]
        before = [j for j in reversed(gemms) if j < i and j in free]
        gather = node.op.kind == "all_gather"  # type: ignore[union-attr]
        order = after + before if gather else before + after
        unfused = exposed_rs and own_backward_reduce_scatter(node)
        if not order or unfused:
            extra += comm
            continue
        free.discard(order[0])
        g = nodes[order[0]]
        gemm = est[g.op.key].latency_s * g.count
        split = split_gemm_s(gemm, (chunked or {}).get(g.op.key, gemm / g.count) * g.count)
        piped = rs_splits and node.op.kind == "reduce_scatter"  # type: ignore[union-attr]
        if piped and rs_margin:
            extra += pipelined_rs_extra_s(gemm, split, comm, rs_splits, rs_margin)
            continue
        tail = comm / rs_splits if piped else 0.0
        extra += split - gemm + tail + overlap_window(split, comm - tail, slowdown)[0] - split
    return extra


def block_cost(block: Block, est: Mapping[str, Estimate], *, tp_overlap: bool,
               slowdown: float, rs_splits: int = 0, rs_margin: float = 0.0,
               chunked: Mapping[str, float] | None = None, bwd_rs_exposed: bool = False
               ) -> BlockCost:
    """Forward and backward cost of ``block`` given estimates keyed by ``op.key``;
    ``rs_splits`` and ``rs_margin`` apply to the forward reduce-scatters only (backward ones
    overlap whole, or not at all with ``bwd_rs_exposed``); ``chunked`` to both."""
    return BlockCost(fwd=_pass(block.fwd, est, tp_overlap=tp_overlap, slowdown=slowdown,
                               rs_splits=rs_splits, rs_margin=rs_margin, chunked=chunked),
                     bwd=_pass(block.bwd, est, tp_overlap=tp_overlap, slowdown=slowdown,
                               chunked=chunked, exposed_rs=bwd_rs_exposed))


def add_engine_time(total: dict[str, float], part: Mapping[str, float], times: float = 1.0
                    ) -> None:
    """total[engine] += part[engine] * times: the one place engine seconds are summed."""
    for engine, value in part.items():
        total[engine] = total.get(engine, 0.0) + value * times


@dataclass(frozen=True, slots=True, kw_only=True)
class OpEvent:
    """One operator on a track of a pass's timeline, seconds from the pass's start."""

    name: str
    stream: Stream  # compute or the node's communication stream
    start_s: float
    end_s: float


_HIDDEN = (Stream.FSDP,)  # prefetched behind compute (see the module docstring)


def pass_timeline(nodes: Sequence[Node], est: Mapping[str, Estimate], *,
                  tp_overlap: bool) -> list[OpEvent]:
    """Operators of one pass laid on tracks, for the trace: compute back to back; a collective
    starts when the compute before it ends (and its stream is free) and holds compute back
    unless it is overlapped (TP with ``tp_overlap``, the CP ring, FSDP prefetch). The overlap
    slowdown is not drawn: the trace scales the pass to its simulated duration."""
    cursor = 0.0
    free: dict[str, float] = {}
    events: list[OpEvent] = []
    for node in nodes:
        t = est[node.op.key].latency_s * node.count
        if node.stream == Stream.COMPUTE:
            events.append(OpEvent(name=node.name, stream=Stream.COMPUTE, start_s=cursor,
                                  end_s=cursor + t))
            cursor += t
            continue
        start = max(cursor, free.get(node.stream, 0.0))
        free[node.stream] = start + t
        events.append(OpEvent(name=node.name, stream=node.stream, start_s=start, end_s=start + t))
        ring = node.stream == Stream.CP and (getattr(node.op, "kind", "") == "send_recv"
                                             or CP_ROTATE_GATHER in node.name)
        hidden = node.stream in _HIDDEN or ring or (node.stream == Stream.TP and tp_overlap)
        if not hidden:
            cursor = start + t
    return events
