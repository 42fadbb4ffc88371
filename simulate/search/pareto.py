# SPDX-License-Identifier: Apache-2.0
"""Pareto frontiers over result rows (plain dicts), e.g. tokens/s vs GPU count."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["pareto_front"]

MAXIMIZE, MINIMIZE = "max", "min"


def _dominates(a: Mapping[str, Any], b: Mapping[str, Any],
               objectives: Sequence[tuple[str, str]]) -> bool:
    better = False
    for key, sense in objectives:
        x, y = a[key], b[key]
        if sense == MAXIMIZE:
            x, y = -x, -y
        if x > y:
            return False
        better |= x < y
    return better


def pareto_front(rows: Sequence[Mapping[str, Any]],
                 objectives: Sequence[tuple[str, str]]) -> list[Mapping[str, Any]]:
    """Rows no other row dominates, sorted by the first objective (best first).

    ``objectives`` pairs a key with "max" or "min". Rows missing a key are skipped; of rows equal
    in every objective only the first is kept, so the front is deterministic.
    """
    for _, sense in objectives:
        if sense not in (MAXIMIZE, MINIMIZE):
            raise ValueError(f"objective sense must be 'max' or 'min', got {sense!r}")
    keys = [k for k, _ in objectives]
    pts = [r for r in rows if all(r.get(k) is not None for k in keys)]
    if len(objectives) == 2:
        return _front_2d(pts, objectives)
    front: list[Mapping[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for r in pts:
        sig = tuple(r[k] for k in keys)
        if sig in seen or any(_dominates(o, r, objectives) for o in pts):
            continue
        seen.add(sig)
        front.append(r)
    key0, sense0 = objectives[0]
    front.sort(key=lambda r: r[key0], reverse=sense0 == MAXIMIZE)
    return front


def _front_2d(pts: Sequence[Mapping[str, Any]],
              objectives: Sequence[tuple[str, str]]) -> list[Mapping[str, Any]]:
    """Sweep: sort by the first objective (best first, ties by the second, then by input order)
    and keep each row strictly better in the second than every row before it. O(n log n)."""
    (k0, s0), (k1, s1) = objectives
    sign0 = -1.0 if s0 == MAXIMIZE else 1.0
    sign1 = -1.0 if s1 == MAXIMIZE else 1.0
    order = sorted(range(len(pts)), key=lambda i: (sign0 * pts[i][k0], sign1 * pts[i][k1], i))
    front, best = [], None
    for i in order:
        v = sign1 * pts[i][k1]
        if best is None or v < best:
            front.append(pts[i])
            best = v
    return front
