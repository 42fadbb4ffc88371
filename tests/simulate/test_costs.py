# SPDX-License-Identifier: Apache-2.0
"""Block cost: compute back to back, communication exposed or hidden as documented."""

from __future__ import annotations

import pytest

from analytical.layer_spec import Node, Stream
from analytical.ops import AttentionSpec, CollectiveKind, CollectiveSpec, GemmSpec
from simulate.costs import add_engine_time, block_cost, pass_timeline
from simulate.engines import Estimate
from simulate.graph import Block

GEMM = GemmSpec(m=64, n=64, k=64)
ATTN = AttentionSpec(batch=1, q_len=64, kv_len=64, heads=2, kv_heads=2, head_dim=64)


def _coll(kind=CollectiveKind.ALL_REDUCE, size=1 << 20):
    return CollectiveSpec(kind=kind, size_bytes=size, group_size=2, ranks_per_node=2)


def _est(**seconds):
    ops = {"gemm": GEMM, "attn": ATTN, "tp": _coll(), "ep": _coll(CollectiveKind.ALL_TO_ALL),
           "ring": _coll(CollectiveKind.SEND_RECV, 1 << 10)}
    return {ops[k].key: Estimate(latency_s=v, engine="store" if k == "gemm" else "roofline")
            for k, v in seconds.items()}


def _block(*nodes):
    return Block(name="b", fwd=tuple(nodes), bwd=())


def test_compute_only_is_the_sum_with_counts():
    est = _est(gemm=2.0, attn=3.0)
    cost = block_cost(_block(Node(name="g", op=GEMM, count=2), Node(name="a", op=ATTN)), est,
                      tp_overlap=False, slowdown=1.0).fwd
    assert cost.elapsed_s == cost.compute_s == 7.0 and cost.exposed_comm_s == 0.0
    assert cost.engine_s == {"store": 4.0, "roofline": 3.0}


def test_tp_exposed_unless_overlapped_with_non_attention_compute():
    est = _est(gemm=2.0, attn=3.0, tp=1.5)
    block = _block(Node(name="g", op=GEMM), Node(name="a", op=ATTN),
                   Node(name="ar", op=_coll(), stream=Stream.TP))
    exposed = block_cost(block, est, tp_overlap=False, slowdown=1.0).fwd
    hidden = block_cost(block, est, tp_overlap=True, slowdown=1.0).fwd
    assert exposed.elapsed_s == pytest.approx(6.5)
    assert hidden.elapsed_s == pytest.approx(5.0)  # 1.5 s fits behind the 2 s GEMM
    assert hidden.engine_s == exposed.engine_s == {"store": 2.0, "roofline": 4.5}


def test_ep_all_to_all_is_exposed_and_ring_hides_behind_attention():
    est = _est(attn=3.0, ep=0.5, ring=1.0)
    block = _block(Node(name="a", op=ATTN),
                   Node(name="ring", op=_coll(CollectiveKind.SEND_RECV, 1 << 10), stream=Stream.CP),
                   Node(name="a2a", op=_coll(CollectiveKind.ALL_TO_ALL), stream=Stream.EP, count=2))
    cost = block_cost(block, est, tp_overlap=False, slowdown=1.0).fwd
    assert cost.elapsed_s == pytest.approx(3.0 + 1.0)  # ring hidden, two all-to-alls exposed


def test_add_engine_time():
    total = {"store": 1.0}
    add_engine_time(total, {"store": 2.0, "roofline": 1.0}, 3)
    add_engine_time(total, {"roofline": 0.5})
    assert total == {"store": 7.0, "roofline": 3.5}


def test_pass_timeline_exposed_and_hidden_collectives():
    est = _est(gemm=2.0, attn=3.0, tp=1.5)
    nodes = (Node(name="g", op=GEMM), Node(name="ar", op=_coll(), stream=Stream.TP),
             Node(name="a", op=ATTN))
    exposed = pass_timeline(nodes, est, tp_overlap=False)
    assert [(e.name, e.stream, e.start_s, e.end_s) for e in exposed] == [
        ("g", "compute", 0.0, 2.0), ("ar", "tp", 2.0, 3.5), ("a", "compute", 3.5, 6.5)]
    hidden = pass_timeline(nodes, est, tp_overlap=True)
    assert hidden[2].start_s == 2.0  # attention starts while the all-reduce runs
