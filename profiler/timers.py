# SPDX-License-Identifier: Apache-2.0
"""Timers: run a callable under a time budget and summarise the samples as a `Timing`.

CPU: ``perf_counter_ns`` with the garbage collector off while timing (as ``timeit`` does).
CUDA: the recipe of triton's ``do_bench`` (triton-lang/triton ``python/triton/testing.py``): one
call and a synchronise first, a 256 MB buffer zeroed before every repetition (L2 flush) outside
the event pair, one start/end event pair per repetition, a single synchronise at the end. Added
to it: a GPU spin (``torch.cuda._sleep``, NVBench's "blocking kernel" idea) between the flush and
the start event, long enough for the host to enqueue the timed call before the GPU reaches it,
and the garbage collector off. Without them a call whose host side outlasts the flush (an SDPA
kernel pinned per call, an autograd backward, a GC pause) is timed with the GPU waiting for the
host: on an H100, 45% of flash decode points under 20 us had a median over 1.5x their minimum,
and two runs of one sweep disagreed by over 30% on 26% of attention points. The CPU path never
imports ``torch.cuda`` or triton.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from analytical.errors import SpecError
from profiler.timing import Timing, summarize

__all__ = ["Budget", "TIMERS", "gpu_clocks_mhz", "gpu_spin", "rep_count", "spin_seconds",
           "time_cpu", "time_cuda"]

_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current L2 (H100: 50 MB, B200: 126 MB)


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """How long to warm up and measure one point."""

    warmup_s: float = 0.025
    measure_s: float = 0.1
    min_reps: int = 5
    max_reps: int = 1000

    def __post_init__(self) -> None:
        for name in ("warmup_s", "measure_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise SpecError(f"budget.{name.removesuffix('_s')}_ms",
                                f"must be a number >= 0, got {value!r}")
        for name in ("min_reps", "max_reps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"budget.{name}", f"must be an integer >= 1, got {value!r}")
        if self.min_reps > self.max_reps:
            raise SpecError("budget.min_reps",
                            f"{self.min_reps} exceeds max_reps {self.max_reps}")


@contextlib.contextmanager
def _gc_off() -> Iterator[None]:
    """The garbage collector off while timing (as ``timeit`` does), restored after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def rep_count(per_call_s: float, budget: Budget) -> int:
    """Repetitions that fill ``budget.measure_s`` at ``per_call_s`` each, clamped to the budget's
    [min_reps, max_reps]; an estimate of zero (a sub-resolution call) gives max_reps."""
    if per_call_s <= 0:
        return budget.max_reps
    return max(budget.min_reps, min(budget.max_reps, int(budget.measure_s / per_call_s)))


# CPU cache flush: a buffer written before every timed call so operands start cold, as they do
# inside a model where other layers' data passed through the caches in between. Measured on this
# project's 2-core host: with warm caches the per-operator sum of a small Llama undershot the
# real forward by 24-42%; with a 64 MiB flush it came within 3-12%. Override with
# LLMSIM_CPU_FLUSH_MB (0 disables).
CPU_FLUSH_MB_DEFAULT = 64
_cpu_flush_buffer: dict[int, object] = {}


def cpu_flush_bytes() -> int:
    return int(float(os.environ.get("LLMSIM_CPU_FLUSH_MB", CPU_FLUSH_MB_DEFAULT)) * 2**20)


# A flush larger than one chunk (a flush of twice a server LLC: 600 MiB on a 300 MiB L3) is
# written by up to one thread per CPU, a chunk each, so that it costs about what 64 MiB costs on
# one core; the calling thread writes the first chunk itself (its private L1/L2 are evicted
# only by its own writes), the others evict the shared LLC. numpy releases the GIL in fill.
FLUSH_CHUNK_BYTES = CPU_FLUSH_MB_DEFAULT * 2**20
_flush_pool: list[object] = []


def flush_chunks(nbytes: int, cpus: int | None = None) -> int:
    """How many chunks (threads) write a flush of ``nbytes``: one per `FLUSH_CHUNK_BYTES`,
    at most one per CPU, at least one."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, min(cpus, -(-nbytes // FLUSH_CHUNK_BYTES)))


def _cpu_flush(nbytes: int) -> None:
    if nbytes <= 0:
        return
    buf = _cpu_flush_buffer.get(nbytes)
    if buf is None:
        import numpy as np

        buf = _cpu_flush_buffer[nbytes] = np.empty(nbytes // 8, dtype=np.float64)
    chunks = flush_chunks(nbytes)
    if chunks == 1:
        buf.fill(0.0)  # type: ignore[attr-defined]
        return
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    if not _flush_pool:
        _flush_pool.append(ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 1) - 1)))
    pool: ThreadPoolExecutor = _flush_pool[0]  # type: ignore[assignment]
    size = len(buf)  # type: ignore[arg-type]
    parts = [buf[i * size // chunks:(i + 1) * size // chunks]  # type: ignore[index]
             for i in range(chunks)]
    futures = [pool.submit(part.fill, 0.0) for part in parts[1:]]
    parts[0].fill(0.0)
    for future in futures:
        future.result()


def time_cpu(run: Callable[[], object], budget: Budget, *,
             prepare: Callable[[], object] | None = None,
             flush_bytes: int | None = None) -> Timing:
    """Time ``run()`` on the CPU; ``prepare()`` and a cache flush (untimed) run before every call.

    One untimed first call (lazy initialisation), then warm-up calls until ``budget.warmup_s``
    has passed (at least one); their mean wall cost, flush included, sets the repetition count
    so that ``budget.measure_s`` bounds the wall time. ``flush_bytes`` defaults to
    `cpu_flush_bytes()`.
    """
    flush = cpu_flush_bytes() if flush_bytes is None else flush_bytes

    def before_call() -> None:
        if prepare is not None:
            prepare()
        _cpu_flush(flush)

    with _gc_off():
        before_call()
        run()
        warm_calls = 0
        warm_start = time.perf_counter_ns()
        deadline = warm_start + int(budget.warmup_s * 1e9)
        while warm_calls == 0 or time.perf_counter_ns() < deadline:
            before_call()
            run()
            warm_calls += 1
        # the budget bounds wall time, so a repetition costs its call plus prepare and flush
        reps = rep_count((time.perf_counter_ns() - warm_start) / warm_calls / 1e9, budget)
        samples = []
        for _ in range(reps):
            before_call()
            start = time.perf_counter_ns()
            run()
            samples.append((time.perf_counter_ns() - start) / 1e9)
    return summarize(samples)


def time_cuda(run: Callable[[], object], budget: Budget, *,
              prepare: Callable[[], object] | None = None, device: str = "cuda") -> Timing:
    """Time ``run()`` on the current CUDA stream with events (triton ``do_bench`` recipe).

    ``prepare()``, the L2 flush and a GPU spin run before each repetition, outside the event
    pair. Five flushed calls estimate the GPU cost and the host's cost of enqueueing one call;
    the spin lasts `spin_seconds` of that, so the timed region holds GPU work only. Warm-up and
    repetition counts follow from the budget.
    """
    import torch  # noqa: PLC0415 - CUDA path only

    cuda = torch.cuda
    flush = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device=device)

    def one_rep(spin_s: float = 0.0, start: object | None = None,
                end: object | None = None) -> float:
        """Enqueue one repetition; returns the host's seconds to enqueue ``run()``."""
        if prepare is not None:
            prepare()
        flush.zero_()
        if spin_s > 0:
            gpu_spin(spin_s, device)
        if start is not None:
            start.record()
        begin = time.perf_counter_ns()
        run()
        host_s = (time.perf_counter_ns() - begin) / 1e9
        if end is not None:
            end.record()
        return host_s

    with _gc_off():
        one_rep()  # compilation, autotuning, lazy init stay outside the timing
        cuda.synchronize()
        est_start, est_end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        est_start.record()
        host_s = sorted(one_rep() for _ in range(5))
        est_end.record()
        cuda.synchronize()
        per_call_s = est_start.elapsed_time(est_end) / 5 / 1e3
        spin_s = spin_seconds(host_s[len(host_s) // 2])
        warmup = max(1, int(budget.warmup_s / per_call_s)) if per_call_s > 0 else 1
        reps = rep_count(per_call_s, budget)
        for _ in range(min(warmup, budget.max_reps)):
            one_rep(spin_s)
        starts = [cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [cuda.Event(enable_timing=True) for _ in range(reps)]
        for start, end in zip(starts, ends, strict=True):
            one_rep(spin_s, start, end)
        cuda.synchronize()
    return summarize([s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)])


# The spin covers SPIN_FACTOR x the host's time to enqueue one call plus SPIN_MARGIN_S (event
# records, a scheduler hiccup), capped so a pathological host cost cannot stall a sweep.
SPIN_FACTOR = 2.0
SPIN_MARGIN_S = 20e-6
SPIN_MAX_S = 5e-3


def spin_seconds(host_enqueue_s: float) -> float:
    """How long the GPU spins before a timed call whose host side took ``host_enqueue_s``."""
    return min(SPIN_MAX_S, SPIN_FACTOR * max(0.0, host_enqueue_s) + SPIN_MARGIN_S)


_cycles_per_s: dict[str, float] = {}


def gpu_spin(seconds: float, device: str = "cuda") -> None:
    """Enqueue a kernel that keeps the GPU busy for about ``seconds`` (``torch.cuda._sleep``
    counts SM cycles; their rate is measured once per device with events)."""
    import torch  # noqa: PLC0415 - CUDA path only

    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:  # a private torch helper; without it the timing is plain do_bench
        return
    rate = _cycles_per_s.get(device)
    if rate is None:
        cycles = 1_000_000
        sleep(cycles)  # load the kernel outside the measurement
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        rate = _cycles_per_s[device] = cycles / max(start.elapsed_time(end) / 1e3, 1e-9)
    sleep(max(1, int(seconds * rate)))


def gpu_clocks_mhz(index: int = 0) -> str:
    """Current SM and memory clocks as ``"sm=1980,mem=2619"`` (nvidia-smi); "" if unavailable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ""
    try:
        out = subprocess.run([exe, "--query-gpu=clocks.sm,clocks.mem",
                              "--format=csv,noheader,nounits", f"--id={index}"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    parts = [p.strip() for p in out.strip().splitlines()[0].split(",")] if out.strip() else []
    return f"sm={parts[0]},mem={parts[1]}" if len(parts) == 2 else ""


TIMERS: dict[str, Callable[..., Timing]] = {"cpu": time_cpu, "cuda": time_cuda}
