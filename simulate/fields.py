# SPDX-License-Identifier: Apache-2.0
"""Reading scenario blocks: unknown keys and bad numbers are errors that name the dotted path.

Shared by the training scenario (`simulate.scenario`) and the inference/serving blocks
(`simulate.inference.spec`), so both say the same thing about the same mistake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analytical.errors import SpecError

__all__ = ["check_keys", "int_field"]


def check_keys(block: Any, path: str, allowed: set[str], required: set[str] = frozenset(),
               source: str | None = None) -> Mapping[str, Any]:
    """``block`` itself if it is a mapping with only ``allowed`` keys and every ``required``."""
    if not isinstance(block, Mapping):
        raise SpecError(path, f"expected a mapping, got {type(block).__name__}", source=source)
    unknown = sorted(set(block) - allowed)
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}" if path else unknown[0],
                        f"unknown key; allowed: {', '.join(sorted(allowed))}", source=source)
    missing = sorted(required - set(block))
    if missing:
        raise SpecError(f"{path}.{missing[0]}" if path else missing[0], "missing", source=source)
    return block


def int_field(block: Mapping[str, Any], key: str, path: str, *, source: str | None = None,
              default: int | None = None, minimum: int = 1) -> int:
    """``block[key]`` (or ``default``) as an integer >= ``minimum``; bools are not integers."""
    value = block.get(key, default)
    if value is None:
        raise SpecError(f"{path}.{key}", "missing", source=source)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"{path}.{key}", f"must be an integer >= {minimum}, got {value!r}",
                        source=source)
    return value
