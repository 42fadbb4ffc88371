# SPDX-License-Identifier: Apache-2.0
"""Sliding-window and chunked attention in the one layer builder: the blocks it prices hold
exactly the query-key pairs the mask keeps (brute force), and training sees the window."""

from __future__ import annotations

import pytest

from analytical.attention_span import AttentionKind, mean_keys
from analytical.layer_spec import LayerPhase, Sharding, TokenBatch
from analytical.layers import layer_ops, windowed_blocks
from analytical.model import load_model
from analytical.ops import AttentionSpec

SLIDING, CHUNKED, FULL = AttentionKind.SLIDING, AttentionKind.CHUNKED, AttentionKind.FULL


def _mask_pairs(kind: AttentionKind, q: int, kv: int, span: int) -> int:
    """Pairs a query at 1-based position p keeps, summed over the last q positions."""
    total = 0
    for p in range(kv - q + 1, kv + 1):
        total += min(p, span) if kind is SLIDING else (p - 1) % span + 1
    return total


@pytest.mark.parametrize("kind", [SLIDING, CHUNKED])
@pytest.mark.parametrize(("q", "kv", "span"), [
    (1, 5000, 4096), (1, 4097, 4096), (8192, 8192, 4096), (10_000, 10_000, 4096),
    (512, 6000, 4096), (3000, 9000, 1024), (7, 20, 3), (2, 9, 1), (5, 5, 4),
])
def test_blocks_keep_exactly_the_masked_pairs(kind, q, kv, span) -> None:
    blocks = windowed_blocks(kind, q, kv, span)
    specs = [AttentionSpec(batch=n, q_len=bq, kv_len=bkv, heads=1, kv_heads=1, head_dim=8,
                           causal=causal) for n, bq, bkv, causal in blocks]
    assert sum(s.batch * s.score_pairs for s in specs) == _mask_pairs(kind, q, kv, span)
    assert sum(s.batch * s.q_len for s in specs) == q  # every query priced once
    assert all(s.kv_len <= span for s in specs)


def test_prefill_pairs_match_the_attention_flop_formula() -> None:
    # ModelSpec.attention_flops_per_token uses mean_keys; the builder must agree with it
    s, w = 32_768, 4096
    pairs = sum(n * AttentionSpec(batch=1, q_len=bq, kv_len=bkv, heads=1, kv_heads=1,
                                  head_dim=8, causal=c).score_pairs
                for n, bq, bkv, c in windowed_blocks(SLIDING, s, s, w))
    assert pairs / s == pytest.approx(mean_keys(SLIDING, s, w), rel=1e-3)


def _attention_flops(model, kind, batch, phase=LayerPhase.TRAIN) -> float:
    nodes = layer_ops(model, Sharding(tp=1), batch, phase, attention=kind)
    return sum(n.count * n.op.flops for n in nodes if isinstance(n.op, AttentionSpec))


def test_mistral_layers_use_the_window_and_short_sequences_are_unchanged() -> None:
    mistral = load_model("mistral-7b")  # sliding_window 4096 on every layer
    long, short = TokenBatch(seqs=1, q_len=32_768), TokenBatch(seqs=2, q_len=2048)
    ratio = _attention_flops(mistral, SLIDING, long) / _attention_flops(mistral, FULL, long)
    assert ratio == pytest.approx(mean_keys(SLIDING, 32_768, 4096) / (32_768 / 2), rel=1e-3)
    assert ratio < 0.25
    assert _attention_flops(mistral, SLIDING, short) == _attention_flops(mistral, FULL, short)
    decode = TokenBatch(seqs=4, q_len=1, kv_len=20_000)
    (node,) = [n for n in layer_ops(mistral, Sharding(), decode, LayerPhase.DECODE,
                                    attention=SLIDING) if isinstance(n.op, AttentionSpec)]
    assert (node.op.batch, node.op.q_len, node.op.kv_len) == (4, 1, 4096)


def test_training_prices_gemma_local_layers_below_global_ones() -> None:
    from simulate.graph import TrainStep, layer_block  # noqa: PLC0415

    gemma = load_model("gemma-2-9b")  # local (4096 window) and global layers alternate
    assert {SLIDING, FULL} <= set(gemma.layer_kinds)
    step = TrainStep(sharding=Sharding(), micro_batch=1, seq_len=8192)
    local = layer_block(gemma, step, moe=False, attention=SLIDING)
    full = layer_block(gemma, step, moe=False, attention=FULL)

    def flops(block):
        return sum(n.count * n.op.flops for n in (*block.fwd, *block.bwd)
                   if isinstance(n.op, AttentionSpec))

    assert flops(local) < flops(full)
    assert local.name == "dense_layer.sliding" and full.name == "dense_layer"
