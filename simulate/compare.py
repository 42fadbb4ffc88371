# SPDX-License-Identifier: Apache-2.0
"""Two predictions side by side: every scalar field of both results and their difference.

`llmsim compare A B` prints `compare_rows(run(A).data, run(B).data)`. Nested objects flatten to
dotted names (``memory.total_gib``); lists (timelines, per-request arrays) are left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalars of a nested result by dotted name; lists and private keys dropped."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if str(key).startswith("_"):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        elif not isinstance(value, (list, tuple)):
            out[name] = value
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def compare_rows(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per field of either result: a, b, b - a and (b - a) / |a| for numbers."""
    a, b = flatten(first), flatten(second)
    rows = []
    for name in list(dict.fromkeys([*a, *b])):
        x, y = a.get(name), b.get(name)
        row: dict[str, Any] = {"field": name, "a": x, "b": y, "diff": None, "rel": None}
        nx, ny = _number(x), _number(y)
        if nx is not None and ny is not None:
            row["diff"] = ny - nx
            row["rel"] = (ny - nx) / abs(nx) if nx else None
        elif x != y:
            row["diff"] = "differs"
        rows.append(row)
    return rows
