# SPDX-License-Identifier: Apache-2.0
"""Where a leave-one-GPU-out fold's error sits: the held-out rows grouped by measuring stack,
dtype, the family's kernel class (attention phase; collective kind, group size and ranks per
node) and latency band, each group's MAPE and signed median error (+ = predicted too slow).

A per-GPU MAPE mixes a bias (the whole GPU too fast or too slow: a clock or power limit the
YAML does not state) with a shape effect (tiny kernels against large ones, fp8 against bf16);
the groups tell them apart, which is what decides whether a feature can help at all.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analytical.ops import AttentionSpec, CollectiveSpec, OpSpec

# Latency bands, seconds: launch-bound (< 10 us), small, medium, large, very large (>= 1 ms).
BAND_EDGES_S = (10e-6, 30e-6, 100e-6, 1e-3)
_BAND_NAMES = ("<10us", "10-30us", "30-100us", "0.1-1ms", ">=1ms")
MIN_GROUP_ROWS = 20  # smaller groups are folded into their class's "other" band row


def kernel_class(op: OpSpec) -> str:
    """What tells kernels of one family apart beyond the dtype."""
    if isinstance(op, AttentionSpec):
        return str(op.phase)
    if isinstance(op, CollectiveSpec):
        return f"{op.kind}/g{op.group_size}/rpn{op.ranks_per_node}"
    return op.family


def latency_band(seconds: float) -> str:
    return _BAND_NAMES[int(np.searchsorted(BAND_EDGES_S, seconds, side="right"))]


def residual_groups(ops: Sequence[OpSpec], stacks: Sequence[str], measured_s: np.ndarray,
                    predicted_s: np.ndarray) -> list[dict[str, object]]:
    """One dict per (stack, dtype, class, band) with at least `MIN_GROUP_ROWS` rows (the rest
    of a (stack, dtype, class) as band ``other``): n, MAPE %, signed median % (+: too slow)."""
    keys = [(s, str(op.dtype), kernel_class(op)) for s, op in zip(stacks, ops, strict=True)]
    bands = [latency_band(float(t)) for t in measured_s]
    ratio = predicted_s / measured_s
    out: list[dict[str, object]] = []
    for key in sorted(set(keys)):
        mine = np.array([k == key for k in keys])
        left = mine.copy()
        for band in _BAND_NAMES:
            rows = mine & np.array([b == band for b in bands])
            if rows.sum() >= MIN_GROUP_ROWS:
                out.append(_group(key, band, ratio[rows]))
                left &= ~rows
        if left.any():
            out.append(_group(key, "other", ratio[left]))
    return out


def _group(key: tuple[str, str, str], band: str, ratio: np.ndarray) -> dict[str, object]:
    return {"stack": key[0], "dtype": key[1], "class": key[2], "band": band,
            "n": int(ratio.size), "mape": float(np.mean(np.abs(ratio - 1.0)) * 100),
            "signed_median": float((np.median(ratio) - 1.0) * 100)}
