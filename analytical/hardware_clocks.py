"""A hardware file's optional ``clocks`` block: SM base/boost clock (MHz) and board power (W).

Its own module because the catalog reader (`analytical.hardware`) is at its size limit; the
cross-GPU transfer model reads the boost clock to turn its launch floor into SM cycles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# file key -> (HardwareSpec field, factor from the file's unit to the field's)
CLOCK_KEYS: dict[str, tuple[str, float]] = {
    "base_mhz": ("base_clock_hz", 1e6),
    "boost_mhz": ("boost_clock_hz", 1e6),
    "power_limit_w": ("power_limit_w", 1.0),
}


def clock_fields(read: Callable[[str], float]) -> dict[str, float]:
    """HardwareSpec keyword arguments from ``read(file_key)`` (0 where the file omits it)."""
    return {field: read(key) * factor for key, (field, factor) in CLOCK_KEYS.items()}


def clocks_block(hw: Any, human: Callable[[float], float | int]) -> dict[str, float | int]:
    """The ``clocks`` mapping to write back for ``hw``: only the stated (non-zero) values."""
    return {key: human(getattr(hw, field) / factor)
            for key, (field, factor) in CLOCK_KEYS.items() if getattr(hw, field)}
