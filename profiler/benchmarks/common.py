# SPDX-License-Identifier: Apache-2.0
"""What every family benchmark shares: the `Bench` it builds, outcomes and error handling.

A family module turns (spec, backend, device) into a `Bench`: ``run`` is the timed call,
``prepare`` (optional) runs untimed before each call (a fresh forward before a timed backward,
``.grad`` dropped so nothing accumulates), ``context`` (optional) is entered once around all of
the timing (a pinned SDPA kernel: entered per call it costs the host more than a small kernel
costs the GPU). `measure` times it with the device's timer and turns
every failure into an outcome: `Unsupported` -> UNSUPPORTED, out of memory -> OOM (memory freed),
any other error -> ERROR; the sweep goes on.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from analytical.dtypes import DType
from profiler.measurement import Status
from profiler.timers import TIMERS, Budget
from profiler.timing import Timing

__all__ = ["Bench", "Outcome", "Unsupported", "classify_error", "device_kind", "measure_bench",
           "torch_dtype"]


class Unsupported(Exception):  # noqa: N818 - reads as a status, like StopIteration
    """This backend cannot run this operator here (dtype, device, library version)."""


@dataclass(frozen=True, slots=True)
class Bench:
    """A timed call, its untimed per-repetition preparation and the context both run in."""

    run: Callable[[], object]
    prepare: Callable[[], object] | None = None
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """The result of measuring one point: a timing when status is OK, else the error text."""

    status: Status
    timing: Timing | None = None
    error: str = ""


def device_kind(device: str) -> str:
    """"cuda:1" -> "cuda"; "cpu" -> "cpu"."""
    return device.split(":", 1)[0]


def torch_dtype(dtype: DType, device: str) -> Any:
    """The torch element type that stores ``dtype``; raises Unsupported for the rest."""
    import torch  # noqa: PLC0415

    table = {DType.FP32: torch.float32, DType.TF32: torch.float32, DType.BF16: torch.bfloat16,
             DType.FP16: torch.float16}
    if dtype in table:
        return table[dtype]
    if dtype == DType.FP8 and hasattr(torch, "float8_e4m3fn"):
        return torch.float8_e4m3fn
    if dtype == DType.INT8:
        return torch.int8
    raise Unsupported(f"dtype {dtype} has no torch storage type here")


def classify_error(exc: BaseException) -> Status:
    """OOM for allocator failures (CUDA or CPU), UNSUPPORTED when a pinned kernel refuses the
    shape (SDPA's "No available kernel"), ERROR for anything else."""
    text = str(exc).lower()
    if type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text \
            or "can't allocate memory" in text:
        return Status.OOM
    if "no available kernel" in text:
        return Status.UNSUPPORTED
    return Status.ERROR


def _free(device: str) -> None:
    gc.collect()
    if device_kind(device) == "cuda":
        import torch  # noqa: PLC0415

        torch.cuda.empty_cache()


def measure_bench(build: Callable[[], Bench], budget: Budget, device: str, *,
                  flush_bytes: int | None = None) -> Outcome:
    """Build and time one benchmark; never raises for a failing kernel. ``flush_bytes`` (CPU
    only): the cache flush before every call, default `cpu_flush_bytes()`; 0 times it warm."""
    timer = TIMERS[device_kind(device)]
    try:
        bench = build()
        with bench.context():
            if device_kind(device) == "cuda":
                timing = timer(bench.run, budget, prepare=bench.prepare, device=device)
            else:
                timing = timer(bench.run, budget, prepare=bench.prepare, flush_bytes=flush_bytes)
    except Unsupported as exc:
        return Outcome(status=Status.UNSUPPORTED, error=str(exc))
    except (RuntimeError, ValueError, TypeError, NotImplementedError, MemoryError,
            AttributeError, IndexError) as exc:
        status = classify_error(exc) if not isinstance(exc, MemoryError) else Status.OOM
        message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
        del exc
        _free(device)
        return Outcome(status=status, error=message[:500])
    bench = None
    return Outcome(status=Status.OK, timing=timing)
