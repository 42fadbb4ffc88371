# SPDX-License-Identifier: Apache-2.0
"""How fast a flash-attention kernel runs at a given shape, against its long-sequence rate.

The hardware file's ``efficiency.attention`` (and `simulate.efficiency`'s per-backend fractions)
is the rate of long causal attention at head dim 128; two shape effects move it.

Tiles: a flash kernel (FlashAttention-2 and -3, cuDNN) walks, per 128-row query tile, the
128-key K/V tiles the mask leaves, the diagonal one whole, and pays about one more tile's time
per query tile (Q load, output and log-sum-exp store, final rescale). Fraction of the computed
rate = useful score pairs / (tiles walked + one per query tile), in tiles. Read off Shah et al.
2024, "FlashAttention-3", arXiv 2407.08608, Fig. 5 (H100 forward, 16k tokens per batch, 16
heads x 128, so 32 heads at head dim 64): cuDNN causal head dim 64 runs 225 / 288 / 334 / 363
/ 379 / 388 TFLOP/s at 512..16k, 0.58 / 0.74 / 0.86 / 0.94 / 0.98 of its 16k rate; this
model gives 0.59 / 0.75 / 0.86 / 0.94 / 0.98 (non-causal 512: 335 / 413 = 0.81 measured, 0.81
modelled; FlashAttention-2 causal 512: 180 / 299 = 0.60). A 128-token sliding window
(`analytical.layers.windowed_blocks`: 128 x 128 blocks) is one tile per query tile, so half
the long-sequence rate, and its FLOPs are the window's.

Head dim: the per-score-element softmax work (exp, max, rescale) does not shrink with the head
dim while the two matmuls' FLOPs per score do, so time per score pair ~ d + s with s the
softmax's cost in matmul-dimension units: rate(d) / rate(128) = d (128 + s) / (128 (d + s)).
s from the same figure (causal, 8k): cuDNN head dim 64 379 against head dim 128 529 TFLOP/s
(0.72, s = 84); FlashAttention-2 295 / 333 (0.89, s = 19). The store's TensorRT-LLM context
attention (aiconfigurator rows, causal, 16k) shows 0.83 on H100 and 0.65 on B200. At and above
128 the rate is kept (Fig. 5, head dim 256: cuDNN 581 vs 595 non-causal).
"""

from __future__ import annotations

from analytical.op_kinds import Phase
from analytical.ops import AttentionSpec

__all__ = ["CUDNN_SOFTMAX_DIMS", "FLASH2_SOFTMAX_DIMS", "head_dim_rate", "shape_rate",
           "tile_efficiency"]

TILE = 128  # query rows and K/V rows of one tile (FA2/FA3/cuDNN forward at head dim 64-128)
TILE_OVERHEAD = 1.0  # per query tile, in K/V-tile times (FA3 paper Fig. 5, module docstring)
REFERENCE_SEQ = 8192  # the causal sequence the per-backend fractions were read at
REFERENCE_HEAD_DIM = 128


def _softmax_dims(ratio_64: float) -> float:
    """s such that rate(64) / rate(128) = ``ratio_64``: 128 + s = 2 ratio (64 + s)."""
    return (128.0 - 128.0 * ratio_64) / (2.0 * ratio_64 - 1.0)


CUDNN_SOFTMAX_DIMS = _softmax_dims(379 / 529)  # FA3 paper Fig. 5, causal, 8k
FLASH2_SOFTMAX_DIMS = _softmax_dims(295 / 333)


def _tiles(n: int) -> int:
    return -(-n // TILE)


def tile_efficiency(q_len: int, kv_len: int, causal: bool) -> float:
    """Useful score pairs over the pairs the kernel spends time on (tiles walked plus one
    tile's overhead per query tile), the queries being the last ``q_len`` of ``kv_len``."""
    nq = _tiles(q_len)
    if causal:  # query tile i ends at key kv - q + (i + 1) T (the last at kv)
        offset = _tiles(kv_len - q_len) if kv_len > q_len else 0
        walked = (nq - 1) * offset + (nq - 1) * nq // 2 + _tiles(kv_len)
        pairs = q_len * (kv_len - q_len) + q_len * (q_len + 1) / 2.0
    else:
        walked = nq * _tiles(kv_len)
        pairs = float(q_len * kv_len)
    return pairs / (TILE * TILE) / (walked + TILE_OVERHEAD * nq)


_REFERENCE_TILES = tile_efficiency(REFERENCE_SEQ, REFERENCE_SEQ, True)


def head_dim_rate(head_dim: int, softmax_dims: float = CUDNN_SOFTMAX_DIMS) -> float:
    """Rate at ``head_dim`` over the rate at 128 (1 at and above 128)."""
    if head_dim >= REFERENCE_HEAD_DIM:
        return 1.0
    ref = REFERENCE_HEAD_DIM
    return head_dim * (ref + softmax_dims) / (ref * (head_dim + softmax_dims))


def shape_rate(op: AttentionSpec, softmax_dims: float = CUDNN_SOFTMAX_DIMS) -> float:
    """Rate of ``op`` over the long causal head-dim-128 rate, at most 1 (the figure's rate
    flattens past 8k); decode kernels (split-K over the cache, bandwidth-bound) keep 1."""
    if op.phase == Phase.DECODE:
        return 1.0
    tiles = min(1.0, tile_efficiency(op.q_len, op.kv_len, op.causal) / _REFERENCE_TILES)
    return tiles * head_dim_rate(op.head_dim, softmax_dims)
