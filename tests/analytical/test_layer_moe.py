# SPDX-License-Identifier: Apache-2.0
"""MoE decode: only the experts the step's tokens reach are read (`experts_touched`)."""

from __future__ import annotations

import pytest

from analytical.layer_moe import experts_touched
from analytical.layer_spec import LayerPhase, Sharding, TokenBatch
from analytical.layers import layer_ops
from analytical.model import load_model


@pytest.mark.parametrize(("tokens", "expected"), [
    (1, 8),  # one token reaches exactly its top-8
    (2, 16),  # 128 * (1 - (120/128)^2) = 15.5 -> 16
    (10, 61),  # 128 * (1 - (120/128)^10) = 60.2 -> 61
    (64, 126),  # 128 * (1 - (120/128)^64) = 125.6 -> 126
    (4096, 128),  # prefill / training: every expert
])
def test_expected_distinct_experts_of_uniform_top_k_routing(tokens, expected):
    assert experts_touched(tokens, 8, 128, 128) == expected


def test_touched_experts_are_counted_per_rank_and_never_zero():
    # 16 local experts (ep=8): one token reaches 8/128 of them in expectation -> 1 (rounded up)
    assert experts_touched(1, 8, 128, 16) == 1
    assert experts_touched(10, 8, 128, 16) == 8  # 16 * (1 - (120/128)^10) = 7.5 -> 8
    assert experts_touched(0, 8, 128, 16) == 16


def test_decode_of_one_request_reads_only_its_top_k_experts():
    """Qwen3-235B-A22B (128 experts, top-8) at tp=8, tokens replicated over TP: one decode
    token runs 8 experts of one row each; a prefill of 2048 tokens runs all 128, 2048*8/128
    rows each (the balanced split as before)."""
    m = load_model("qwen3-235b-a22b")
    sh = Sharding(tp=8, ep=1)

    def up(batch: TokenBatch, phase: LayerPhase):
        nodes = {n.name: n for n in layer_ops(m, sh, batch, phase, moe=True)}
        return nodes["experts.up_gate"].op

    one = up(TokenBatch(seqs=1, q_len=1, kv_len=1024), LayerPhase.DECODE)
    assert (one.batch, one.m) == (8, 1)
    full = up(TokenBatch(seqs=1, q_len=2048), LayerPhase.PREFILL)
    assert (full.batch, full.m) == (128, 2048 * 8 // 128)
    # expert weights read at one token: 8/128 of the layer's
    assert one.batch * one.n * one.k * 16 == full.batch * full.n * full.k
