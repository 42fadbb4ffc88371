# SPDX-License-Identifier: Apache-2.0
"""Microbenchmarks, one module per operator family; `measure_point` times one sweep point.

`BUILDERS` maps a family to the function that builds its `Bench` for (spec, backend, device).
Collectives need a process group and are measured by `collective.measure_collective` under
`profiler.dispatch.torchrun`. torch is imported inside the builders, never at import time.
"""

from __future__ import annotations

from collections.abc import Callable

from analytical.ops import OpSpec
from profiler.benchmarks.attention import build_attention
from profiler.benchmarks.common import Bench, Outcome, Unsupported, measure_bench
from profiler.benchmarks.gemm import build_gemm
from profiler.benchmarks.memory import build_memory
from profiler.benchmarks.moe import build_moe
from profiler.measurement import Status
from profiler.timers import Budget

__all__ = ["BUILDERS", "Bench", "Outcome", "Unsupported", "measure_point"]

BUILDERS: dict[str, Callable[[OpSpec, str, str], Bench]] = {
    "gemm": build_gemm,
    "attention": build_attention,
    "memory": build_memory,
    "moe": build_moe,
}


def measure_point(op: OpSpec, backend: str, budget: Budget, device: str, *,
                  flush_bytes: int | None = None) -> Outcome:
    """Measure one operator with one backend on ``device`` ("cpu", "cuda", "cuda:1");
    ``flush_bytes`` as in `measure_bench` (CPU only)."""
    build = BUILDERS.get(op.family)
    if build is None:
        return Outcome(status=Status.UNSUPPORTED,
                       error=f"{op.family} is measured under torchrun (llmsim profile "
                             "collectives), not in a single process")
    return measure_bench(lambda: build(op, backend, device), budget, device,
                         flush_bytes=flush_bytes)
