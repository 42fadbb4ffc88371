# SPDX-License-Identifier: Apache-2.0
"""Evaluation splits, identical for every model and baseline of a family.

- ``random``: 80/20, seeded.
- ``heldout_large``: the largest 20% by FLOPs (by bytes for collectives and memory-bound ops):
  extrapolation to bigger shapes than any seen in training.
- ``heldout_shape``: a shape region never seen in training: unseen (n, k) pairs for GEMM (a new
  model's weight shapes), unseen (heads, kv_heads, head_dim) configurations for attention (a new
  model's attention), unseen message sizes for collectives, unseen cols for memory-bound ops,
  unseen hidden sizes for MoE.
- ``heldout_seq`` (attention only): unseen kv_len values inside the measured range. The
  measured kv_len grid steps by 2x, so this asks a model to interpolate over a doubling of the
  sequence, across the kernels' own switch points (split-KV, multi-block decode): the hardest
  split, reported beside the others.
Rule-based splits depend only on the data and the seed, so the same data always gives the same
split.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analytical.errors import LlmsimError
from analytical.ops import (
    AttentionSpec,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MoESpec,
    OpSpec,
)

RANDOM = "random"
HELDOUT_LARGE = "heldout_large"
HELDOUT_SHAPE = "heldout_shape"
HELDOUT_SEQ = "heldout_seq"
SPLIT_NAMES = (RANDOM, HELDOUT_LARGE, HELDOUT_SHAPE, HELDOUT_SEQ)
PRIMARY_SPLIT = HELDOUT_SHAPE  # what `promote` compares and the README leads with
TEST_FRACTION = 0.2
# The least share of the rows the held-out shape region holds (`_region`, `heldout_shape`
# only): half the test fraction.
MIN_REGION_FRACTION = TEST_FRACTION / 2

ShapeKey = tuple[int, ...]  # the shape values a region is made of
# A region key takes the family's own spec class; the table below is indexed by family at run
# time, so its callables accept any spec (``Any``) and each reads its own class's fields.
KeyFn = Callable[[Any], ShapeKey]


@dataclass(frozen=True, slots=True, kw_only=True)
class Split:
    name: str
    train: np.ndarray  # row indices
    test: np.ndarray
    description: str


def random_split(n: int, *, seed: int, test_fraction: float = TEST_FRACTION) -> Split:
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(1, int(round(n * test_fraction)))
    return Split(name=RANDOM, train=np.sort(order[n_test:]), test=np.sort(order[:n_test]),
                 description=f"random {1 - test_fraction:.0%}/{test_fraction:.0%}, seed {seed}")


# Families whose size is the bytes they move; every other family is sized by its FLOPs.
BYTES_SIZED_FAMILIES = frozenset({"collective", "memory", "moe"})


def size_of(op: OpSpec) -> float:
    """The size measure of `largest_split`: FLOPs, or bytes for data-movement families."""
    return op.bytes if op.family in BYTES_SIZED_FAMILIES else op.flops


def largest_split(ops: Sequence[OpSpec], *, test_fraction: float = TEST_FRACTION) -> Split:
    """The largest ``test_fraction`` of rows by FLOPs (bytes for data-movement families)."""
    sizes = np.array([size_of(op) for op in ops])
    order = np.argsort(sizes, kind="stable")
    n_test = max(1, int(round(len(ops) * test_fraction)))
    measure = "bytes" if ops and ops[0].family in BYTES_SIZED_FAMILIES else "FLOPs"
    return Split(name=HELDOUT_LARGE, train=np.sort(order[:-n_test]), test=np.sort(order[-n_test:]),
                 description=f"largest {test_fraction:.0%} by {measure}")


def _region(ops: Sequence[OpSpec], key: KeyFn, what: str, *, seed: int,
            interior: bool, test_fraction: float, name: str = HELDOUT_SHAPE) -> Split:
    """Hold out a seeded ``test_fraction`` of the distinct values of ``key`` (excluding the
    smallest and largest when ``interior``, so the region is inside the measured range)."""
    keys = [key(op) for op in ops]
    distinct = sorted(set(keys))
    candidates = distinct[1:-1] if interior and len(distinct) > 2 else distinct
    n_pick = max(1, int(round(len(distinct) * test_fraction)))
    if len(distinct) < 2:
        raise LlmsimError(f"cannot hold out a {what} region: only {len(distinct)} distinct values")
    rng = np.random.default_rng(seed)
    picked = {candidates[i] for i in rng.choice(len(candidates), size=min(n_pick, len(candidates)),
                                                replace=False)}
    # a value measured on few rows (a vocabulary size, which only the embedding and the loss
    # have) can leave a region of a handful of rows of one shape, too few for a held-out figure
    # (H200 memory ops: 8 of 196 rows) or for the tie interval of `promote.ties`: further
    # values join, in a seeded order, until the region holds `MIN_REGION_FRACTION` of the rows
    if name == HELDOUT_SHAPE:
        counts = Counter(keys)
        held = sum(counts[p] for p in picked)
        rest = [c for c in candidates if c not in picked]
        for i in rng.permutation(len(rest)).tolist():
            if held >= MIN_REGION_FRACTION * len(keys):
                break
            picked.add(rest[i])
            held += counts[rest[i]]
    mask = np.array([k in picked for k in keys])
    shown = ", ".join(str(p if len(p) > 1 else p[0]) for p in sorted(picked)[:6])
    more = "" if len(picked) <= 6 else f" (+{len(picked) - 6} more)"
    return Split(name=name, train=np.flatnonzero(~mask), test=np.flatnonzero(mask),
                 description=f"unseen {what}: {shown}{more}")


# family -> (the shape a held-out region is made of, its name, interior only). Collectives:
# holding out a whole group size (e.g. 4 of {2, 4, 8}) leaves two points along that axis and
# every model extrapolates the bus algorithm change, so the region is unseen message sizes and
# the largest sizes are `heldout_large`.
def _gemm_shape(op: GemmSpec) -> ShapeKey:
    return (op.n, op.k)


def _attention_shape(op: AttentionSpec) -> ShapeKey:
    return (op.heads, op.kv_heads, op.head_dim)


def _collective_shape(op: CollectiveSpec) -> ShapeKey:
    return (op.size_bytes,)


def _memory_shape(op: MemoryBoundSpec) -> ShapeKey:
    return (op.cols,)


def _moe_shape(op: MoESpec) -> ShapeKey:
    return (op.hidden,)


SHAPE_KEYS: dict[str, tuple[KeyFn, str, bool]] = {
    "gemm": (_gemm_shape, "(n, k) pairs", False),
    "attention": (_attention_shape, "(heads, kv_heads, head_dim)", False),
    "collective": (_collective_shape, "message sizes", True),
    "memory": (_memory_shape, "cols values", True),
    "moe": (_moe_shape, "hidden sizes", True),
}


def shape_key(family: str) -> KeyFn:
    """The shape `heldout_shape` holds out for this family."""
    if family not in SHAPE_KEYS:
        raise LlmsimError(f"no held-out shape rule for family {family!r}")
    return SHAPE_KEYS[family][0]


def shape_region_split(ops: Sequence[OpSpec], *, seed: int,
                       test_fraction: float = TEST_FRACTION) -> Split:
    family = ops[0].family if ops else ""
    key = shape_key(family)
    _, what, interior = SHAPE_KEYS[family]
    return _region(ops, key, what, interior=interior, seed=seed, test_fraction=test_fraction)


def _kv_len(op: AttentionSpec) -> ShapeKey:
    return (op.kv_len,)


def sequence_split(ops: Sequence[OpSpec], *, seed: int,
                   test_fraction: float = TEST_FRACTION) -> Split:
    """Attention: unseen kv_len values, inside the measured range."""
    return _region(ops, _kv_len, "kv_len values", interior=True, seed=seed,
                   test_fraction=test_fraction, name=HELDOUT_SEQ)


def region_axes(family: str) -> list[tuple[KeyFn, bool]]:
    """(key, interior only) of every region the protocol holds out by rule for this family:
    the shape of `heldout_shape`, and for attention the kv_len of `heldout_seq`. The search's
    inner validation holds out a part of each, so it rewards what the splits measure."""
    key = shape_key(family)
    axes = [(key, SHAPE_KEYS[family][2])]
    if family == "attention":
        axes.append((_kv_len, True))
    return axes


def evaluation_splits(ops: Sequence[OpSpec], *, seed: int) -> list[Split]:
    """The splits of the protocol for this family, in `SPLIT_NAMES` order."""
    splits = [random_split(len(ops), seed=seed), largest_split(ops),
              shape_region_split(ops, seed=seed)]
    if ops and ops[0].family == "attention":
        splits.append(sequence_split(ops, seed=seed))
    return splits
