# SPDX-License-Identifier: Apache-2.0
"""Reading scenario blocks: unknown keys and bad numbers are errors that name the dotted path.

Shared by the training scenario (`simulate.scenario`), the inference/serving blocks
(`simulate.inference.spec`), the workload (`simulate.serving.workload`) and the search space, so
all say the same thing about the same mistake. Every number is checked where it is read: its type
(a string or a bool is not a number), finiteness (YAML's ``.nan``/``.inf`` are floats), sign and
range.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from analytical.dtypes import DType, parse_dtype
from analytical.errors import SpecError

__all__ = ["bool_field", "check_keys", "choice_field", "choice_value", "dtype_field", "float_field",
           "float_value", "int_field", "int_value", "names_field", "optional_float",
           "version_field"]

E = TypeVar("E", bound=StrEnum)

MAX_INT = 2**53  # beyond this a count is a typo (and stops being exact as a float)


def check_keys(block: Any, path: str, allowed: set[str], required: set[str] = frozenset(),
               source: str | None = None) -> Mapping[str, Any]:
    """``block`` itself if it is a mapping with only ``allowed`` keys and every ``required``."""
    if not isinstance(block, Mapping):
        raise SpecError(path or "(top level)", f"expected a mapping, got {type(block).__name__}",
                        source=source)
    unknown = sorted((k for k in block if k not in allowed), key=str)
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}" if path else str(unknown[0]),
                        f"unknown key; allowed: {', '.join(sorted(allowed))}", source=source)
    missing = sorted(required - set(block))
    if missing:
        raise SpecError(f"{path}.{missing[0]}" if path else missing[0], "missing", source=source)
    return block


def int_value(value: Any, field: str, *, source: str | None = None, minimum: int = 1,
              maximum: int = MAX_INT) -> int:
    """``value`` as an integer in [minimum, maximum]; bools, floats and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field, f"must be an integer >= {minimum}, got {value!r}", source=source)
    if value < minimum or value > maximum:
        wanted = f">= {minimum}" if maximum == MAX_INT else f"in [{minimum}, {maximum:,}]"
        raise SpecError(field, f"must be an integer {wanted}, got {value!r}", source=source)
    return value


def int_field(block: Mapping[str, Any], key: str, path: str, *, source: str | None = None,
              default: int | None = None, minimum: int = 1, maximum: int = MAX_INT) -> int:
    """``block[key]`` (or ``default``) as an integer in [minimum, maximum]."""
    value = block.get(key, default)
    field = f"{path}.{key}" if path else key
    if value is None:
        raise SpecError(field, "missing", source=source)
    return int_value(value, field, source=source, minimum=minimum, maximum=maximum)


def float_value(value: Any, field: str, *, source: str | None = None, minimum: float = 0.0,
                maximum: float = math.inf, exclusive_min: bool = False,
                exclusive_max: bool = False) -> float:
    """``value`` as a finite float in the stated range; NaN, inf, bools and strings refused."""
    low = "(" if exclusive_min else "["
    high = ")" if exclusive_max or maximum == math.inf else "]"
    wanted = f"a finite number in {low}{minimum:g}, {maximum:g}{high}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, f"must be {wanted}, got {value!r}", source=source)
    number = float(value)
    if not math.isfinite(number):
        raise SpecError(field, f"must be {wanted}, got {value!r}", source=source)
    too_low = number <= minimum if exclusive_min else number < minimum
    too_high = number >= maximum if exclusive_max else number > maximum
    if too_low or too_high:
        raise SpecError(field, f"must be {wanted}, got {value!r}", source=source)
    return number


def float_field(block: Mapping[str, Any], key: str, path: str, *, source: str | None = None,
                default: float | None = None, minimum: float = 0.0, maximum: float = math.inf,
                exclusive_min: bool = False, exclusive_max: bool = False) -> float:
    """``block[key]`` (or ``default``) as a checked finite float; missing is an error."""
    value = block.get(key, default)
    field = f"{path}.{key}" if path else key
    if value is None:
        raise SpecError(field, "missing", source=source)
    return float_value(value, field, source=source, minimum=minimum, maximum=maximum,
                       exclusive_min=exclusive_min, exclusive_max=exclusive_max)


def optional_float(block: Mapping[str, Any], key: str, path: str, *,
                   source: str | None = None, minimum: float = 0.0, maximum: float = math.inf,
                   exclusive_min: bool = False) -> float | None:
    """Like `float_field`, but an absent (or null) value is None."""
    if block.get(key) is None:
        return None
    return float_field(block, key, path, source=source, minimum=minimum, maximum=maximum,
                       exclusive_min=exclusive_min)


def choice_value(value: Any, field: str, enum: type[E], *, source: str | None = None) -> E:
    """``value`` as a member of the closed choice ``enum``; an unknown value lists the known."""
    try:
        return enum(value) if isinstance(value, str) else enum(str(value))
    except ValueError:
        known = ", ".join(m.value for m in enum)
        raise SpecError(field, f"unknown value {value!r}; known: {known}", source=source) from None


def choice_field(block: Mapping[str, Any], key: str, path: str, enum: type[E], default: E, *,
                 source: str | None = None) -> E:
    """``block[key]`` (or ``default``) as a member of ``enum``."""
    return choice_value(block.get(key, default), f"{path}.{key}" if path else key, enum,
                        source=source)


def bool_field(block: Mapping[str, Any], key: str, path: str, default: bool, *,
               source: str | None = None) -> bool:
    """``block[key]`` as a YAML boolean (not a string or a number), ``default`` if absent."""
    value = block.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"{path}.{key}", f"must be true or false, got {value!r}", source=source)
    return value


def names_field(block: Mapping[str, Any], key: str, path: str, enum: type[E], *,
                source: str | None = None) -> tuple[E, ...]:
    """A list (or comma-separated string) of ``enum`` values at ``key``; empty if absent."""
    raw = block.get(key) or ()
    names = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(names, (list, tuple)):
        raise SpecError(f"{path}.{key}", f"expected a list of names, got {raw!r}", source=source)
    return tuple(choice_value(str(n).strip(), f"{path}.{key}", enum, source=source)
                 for n in names)


def version_field(block: Mapping[str, Any], key: str, path: str, default: str, *,
                  source: str | None = None) -> str:
    """``block[key]`` (or ``default``) as a dotted release number ("2", "1.8"); a YAML float is
    refused (``1.10`` reads as 1.1): quote it."""
    value = block.get(key, default)
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise SpecError(f"{path}.{key}", f"must be a version such as \"1.8\" (quoted), got "
                        f"{value!r}", source=source)
    return text


def dtype_field(block: Mapping[str, Any], key: str, path: str, allowed: tuple[DType, ...], *,
                source: str | None = None) -> DType | None:
    """``block[key]`` as one of the ``allowed`` dtypes, or None when absent (the default)."""
    if block.get(key) is None:
        return None
    dtype = parse_dtype(block[key], field=f"{path}.{key}", source=source)
    if dtype not in allowed:
        raise SpecError(f"{path}.{key}", f"{dtype} is not allowed here; use "
                        f"{', '.join(d.value for d in allowed)}", source=source)
    return dtype
