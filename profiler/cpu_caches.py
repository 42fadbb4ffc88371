# SPDX-License-Identifier: Apache-2.0
"""CPU cache sizes of this machine, read from Linux sysfs (``/sys/devices/system/cpu``).

Each ``cpuN/cache/indexM`` directory describes one cache the CPU sees: ``level``, ``type``
(Data, Instruction, Unified), ``size`` (``"32768K"``) and ``shared_cpu_list`` (the CPUs sharing
that instance); see the kernel's ``Documentation/ABI/testing/sysfs-devices-system-cpu``. In a
virtual machine these are what the hypervisor exposes. Every reader returns 0 when sysfs does
not say (not Linux, a container hiding it), so callers fall back to their cold default.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SYSFS_CPU", "cache_instances", "cpu_cache_bytes", "last_level_cache_bytes"]

SYSFS_CPU = Path("/sys/devices/system/cpu")
_SCALE = {"K": 2**10, "M": 2**20, "G": 2**30}


def _size_bytes(text: str) -> int:
    text = text.strip().upper()
    scale = _SCALE.get(text[-1:], 1)
    try:
        return int(float(text.rstrip("KMGB") or 0) * scale)
    except ValueError:
        return 0


def _caches(directory: Path) -> list[tuple[int, str, int, str]]:
    """(level, type, bytes, shared_cpu_list) of every cache index under ``directory``."""
    out = []
    for index in sorted(directory.glob("index[0-9]*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _size_bytes((index / "size").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        out.append((level, kind, size, shared))
    return out


def cache_instances(level: int, root: Path = SYSFS_CPU) -> dict[str, int]:
    """Bytes of each distinct data/unified cache instance of ``level`` over all CPUs, keyed by
    the CPUs sharing it (an instance shared by several CPUs counted once)."""
    seen: dict[str, int] = {}
    for cpu in root.glob("cpu[0-9]*"):
        for lvl, kind, size, shared in _caches(cpu / "cache"):
            if lvl == level and kind != "Instruction":
                seen[shared] = size
    return seen


def cpu_cache_bytes(level: int, cpu: int = 0, root: Path = SYSFS_CPU) -> int:
    """Bytes of the data/unified cache of ``level`` that CPU ``cpu`` sees; 0 if unknown."""
    return max((size for lvl, kind, size, _ in _caches(root / f"cpu{cpu}" / "cache")
                if lvl == level and kind != "Instruction"), default=0)


def last_level_cache_bytes(cpu: int = 0, root: Path = SYSFS_CPU) -> int:
    """Bytes of the highest-level data/unified cache CPU ``cpu`` sees; 0 if unknown."""
    caches = [(lvl, size) for lvl, kind, size, _ in _caches(root / f"cpu{cpu}" / "cache")
              if kind != "Instruction"]
    return max(caches)[1] if caches else 0
