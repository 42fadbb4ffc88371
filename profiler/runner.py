# SPDX-License-Identifier: Apache-2.0
"""Run a sweep in this process into the store, resumably.

Points whose key is stored with status ok are skipped, the rest are measured in sweep order and
each is committed (one transaction) as soon as it is measured, so a killed run (even ``kill -9``)
loses at most the point in flight and a rerun picks up where it stopped. A point stored with any
other status (error, timeout, oom, unsupported) is measured again on the next run and its row
replaced (`Store.insert`): a failure caused by the input or the moment (a bad budget, a busy
device) never blocks the point; an ok row is never replaced. Collective points need one process
per rank and are left to `profiler.dispatch.torchrun` (counted as ``deferred``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from analytical.errors import SpecError
from profiler.benchmarks import measure_point
from profiler.fingerprint import Fingerprint, current_fingerprint
from profiler.measurement import Measurement, point_key
from profiler.progress import advance
from profiler.progress import bar as progress_bar
from profiler.store import Store
from profiler.sweep import Sweep, SweepPoint, select_shard
from profiler.timers import gpu_clocks_mhz

__all__ = ["RunSummary", "pending_points", "resolve_device", "run_sweep"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """What one `run_sweep` call did."""

    run_id: str
    sweep: str
    device: str
    hardware: str
    points: int  # single-process points in this shard
    skipped: int  # already stored with status ok (resumed)
    measured: int
    inserted: int
    deferred: int  # collective points, measured under torchrun
    statuses: dict[str, int] = field(default_factory=dict)  # measured points by status
    elapsed_s: float = 0.0
    clocks_start_mhz: str = ""  # GPU SM/memory clocks before and after the sweep (nvidia-smi);
    clocks_end_mhz: str = ""  # a drop between them flags thermal or power throttling

    def to_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


def resolve_device(device: str) -> str:
    """"auto" -> "cuda" when torch sees a GPU, else "cpu"; "cpu", "cuda", "cuda:N" pass."""
    if device == "auto":
        import torch  # noqa: PLC0415

        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" or device == "cuda" or (device.startswith("cuda:")
                                                and device[5:].isdigit()):
        return device
    raise SpecError("device", f"expected cpu, cuda, cuda:<index> or auto, got {device!r}")


def run_sweep(sweep: Sweep, store_path: str | Path | None, *, device: str | None = None,
              shard: tuple[int, int] | None = None, progress: bool = True,
              fingerprint: Fingerprint | None = None, command: str = "",
              threads: int | None = None, flush_bytes: int | None = None) -> RunSummary:
    """Measure the sweep's single-process points on ``device`` into the store at ``store_path``.

    ``device`` defaults to the sweep's; ``shard=(i, N)`` measures every N-th point from i;
    ``fingerprint`` defaults to `current_fingerprint` of the device. On a CPU, ``threads`` sets
    torch's intra-op threads and becomes the fingerprint's device_count (a different thread
    count is different hardware to the store). ``flush_bytes`` (CPU only): the cache flush
    before every timed call, default `profiler.timers.cpu_flush_bytes()`.
    """
    started = time.perf_counter()
    device = resolve_device(device or sweep.device)
    kind = device.split(":", 1)[0]
    all_points = select_shard(sweep.points(kind), shard)
    points = [p for p in all_points if p.op.family != "collective"]
    fingerprint = fingerprint or current_fingerprint(device)
    if threads is not None and kind == "cpu":
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise SpecError("threads", f"must be an integer >= 1, got {threads!r}")
        import torch  # noqa: PLC0415

        torch.set_num_threads(threads)
        fingerprint = replace(fingerprint, device_count=threads)
    keys = [point_key(p.op, fingerprint, p.backend) for p in points]
    gpu_index = int(device.split(":")[1]) if ":" in device else 0
    clocks_start = gpu_clocks_mhz(gpu_index) if kind == "cuda" else ""
    statuses: Counter[str] = Counter()
    inserted = measured = 0
    with Store(store_path) as store:
        done = store.ok_keys(keys)
        todo = [(p, k) for p, k in zip(points, keys, strict=True) if k not in done]
        run_id = store.start_run(command=command or f"profile run {sweep.source or sweep.name}",
                                 sweep=sweep.name, fingerprint=fingerprint)
        with progress_bar(sweep.name, unit="points", total=len(todo), enabled=progress):
            for point, _key in todo:
                measurement = _measure(point, device, fingerprint, run_id, flush_bytes)
                inserted += store.insert([measurement])
                measured += 1
                statuses[str(measurement.status)] += 1
                advance(1, unit="points", label=point.op.key)
    return RunSummary(run_id=run_id, sweep=sweep.name, device=device,
                      hardware=fingerprint.hardware, points=len(points),
                      skipped=len(points) - len(todo), measured=measured, inserted=inserted,
                      deferred=len(all_points) - len(points), statuses=dict(statuses),
                      elapsed_s=time.perf_counter() - started, clocks_start_mhz=clocks_start,
                      clocks_end_mhz=gpu_clocks_mhz(gpu_index) if kind == "cuda" else "")


def _measure(point: SweepPoint, device: str, fingerprint: Fingerprint,
             run_id: str, flush_bytes: int | None = None) -> Measurement:
    outcome = measure_point(point.op, point.backend, point.budget, device,
                            flush_bytes=flush_bytes)
    return Measurement(op=point.op, fingerprint=fingerprint, backend=point.backend,
                       status=outcome.status, timing=outcome.timing, error=outcome.error,
                       run_id=run_id)


def pending_points(sweep_points: Sequence[SweepPoint], store: Store,
                   fingerprint: Fingerprint) -> list[SweepPoint]:
    """The points not yet stored with status ok (used by the torchrun worker)."""
    keys = [point_key(p.op, fingerprint, p.backend) for p in sweep_points]
    done = store.ok_keys(keys)
    return [p for p, k in zip(sweep_points, keys, strict=True) if k not in done]
