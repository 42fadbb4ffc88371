# SPDX-License-Identifier: Apache-2.0
"""Attention rate by shape: the FlashAttention-3 paper's sequence and head-dim sweeps."""

from __future__ import annotations

import pytest

from analytical.attention_tiles import (
    CUDNN_SOFTMAX_DIMS,
    FLASH2_SOFTMAX_DIMS,
    head_dim_rate,
    shape_rate,
    tile_efficiency,
)
from analytical.hardware import get_hardware
from analytical.ops import AttentionSpec, Phase
from analytical.roofline import roofline_estimate


def _spec(q: int, kv: int, *, causal: bool = True, head_dim: int = 128,
          phase: Phase = Phase.PREFILL) -> AttentionSpec:
    return AttentionSpec(batch=2, q_len=q, kv_len=kv, heads=16, kv_heads=16, head_dim=head_dim,
                         causal=causal, phase=phase)


def test_tiles_follow_the_fa3_causal_sweep() -> None:
    """cuDNN causal head dim 64 (FA3 paper Fig. 5): 225 / 288 / 334 / 363 / 379 of 388."""
    long = tile_efficiency(16384, 16384, True)
    measured = {512: 225, 1024: 288, 2048: 334, 4096: 363, 8192: 379}
    for seq, tflops in measured.items():
        assert tile_efficiency(seq, seq, True) / long == pytest.approx(tflops / 388, abs=0.02)


def test_a_short_window_runs_at_half_the_long_rate() -> None:
    """A 128 x 128 sliding-window block is one K/V tile per query tile plus its overhead."""
    assert shape_rate(_spec(128, 128, causal=False)) == pytest.approx(0.52, abs=0.01)
    # the window's causal head block has half the pairs in the same tile
    assert shape_rate(_spec(128, 128)) < 0.6 * shape_rate(_spec(128, 128, causal=False))


def test_head_dim_64_is_slower_per_flop_and_128_up_is_not() -> None:
    assert head_dim_rate(64, CUDNN_SOFTMAX_DIMS) == pytest.approx(379 / 529)
    assert head_dim_rate(64, FLASH2_SOFTMAX_DIMS) == pytest.approx(295 / 333)
    assert head_dim_rate(64) < head_dim_rate(96) < head_dim_rate(128) == 1.0
    assert head_dim_rate(256) == 1.0


def test_long_causal_and_decode_keep_the_file_rate() -> None:
    assert shape_rate(_spec(8192, 8192)) == pytest.approx(1.0)
    assert shape_rate(_spec(65536, 65536)) == 1.0  # capped: no faster than the reference
    assert shape_rate(_spec(1, 4096, head_dim=64, phase=Phase.DECODE)) == 1.0


def test_roofline_prices_the_shape() -> None:
    hw = get_hardware("h100-sxm")
    long, short = _spec(8192, 8192, head_dim=64), _spec(128, 128, causal=False, head_dim=64)
    per_flop = [roofline_estimate(s, hw).compute_s / s.flops for s in (long, short)]
    assert per_flop[1] / per_flop[0] == pytest.approx(
        shape_rate(long) / shape_rate(short), rel=1e-9)
    assert per_flop[1] > 1.8 * per_flop[0]
