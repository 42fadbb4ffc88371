# SPDX-License-Identifier: Apache-2.0
"""Local dispatch: run a sweep file's single-process points in this process."""

from __future__ import annotations

from pathlib import Path

from profiler.runner import RunSummary, run_sweep
from profiler.sweep import load_sweep

__all__ = ["run_local"]


def run_local(sweep_path: str | Path, db: str | Path | None, *, device: str | None = None,
              shard: tuple[int, int] | None = None, progress: bool = True,
              threads: int | None = None) -> RunSummary:
    """Load ``sweep_path`` and measure it into ``db`` (the default store when None)."""
    sweep = load_sweep(sweep_path)
    return run_sweep(sweep, db, device=device, shard=shard, progress=progress, threads=threads,
                     command=f"llmsim profile run {sweep_path}")
