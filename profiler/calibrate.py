# SPDX-License-Identifier: Apache-2.0
"""Measure the machine at hand for a hardware catalog entry (``llmsim hardware calibrate``).

`measure` times dense GEMMs (``torch.matmul``, growing square sizes, per dtype), streaming
memory bandwidth (tensor copy and add, bytes counted as read + write) and the host link (CUDA:
pinned host-to-device copy; CPU: the TCP loopback that gloo uses between local ranks), and
reads the device's memory, compute units and L2. Every timing goes through `profiler.timers`,
the profiler's one timer (CPU: GC off, warm-up, budget -> repetitions; CUDA: the ``do_bench``
event recipe). On a CPU no cache flush runs between calls: these are peak rates (the largest
memory size that fits the budget wins, so the bandwidth is not a cache's). The
result is an `analytical.calibrate.Measurement`; `calibrate` turns it into a catalog entry with
`analytical.calibrate.hardware_entry`. The full operator sweeps are `profiler.runner`'s job.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from analytical.calibrate import Measurement, hardware_entry
from analytical.errors import SpecError
from analytical.hardware import hardware_file
from profiler.cpu_caches import cache_instances
from profiler.fingerprint import cpu_model_name, hardware_name_for_device
from profiler.timers import Budget, time_cpu, time_cuda

_GEMM_SIZES = (256, 512, 1024, 2048, 4096, 8192)  # square m = n = k
_MEM_BYTES = (16 * 2**20, 64 * 2**20, 256 * 2**20, 1024 * 2**20)  # per tensor
_LOOPBACK_BYTES = 32 * 2**20
MIN_REPS = 3
MAX_REPS = 30


def median_s(run: Callable[[], object], device: str, budget_s: float) -> float:
    """Median seconds of ``run()`` by `profiler.timers` (one warm-up call, then `MIN_REPS` to
    `MAX_REPS` repetitions filling ``budget_s``; on a CPU without a cache flush)."""
    budget = Budget(warmup_s=0.0, measure_s=max(budget_s, 0.0), min_reps=MIN_REPS,
                    max_reps=MAX_REPS)
    if device.startswith("cuda"):
        return time_cuda(run, budget, device=device).median_s
    return time_cpu(run, budget, flush_bytes=0).median_s


def _resolve_device(device: str) -> str:
    import torch  # noqa: PLC0415 - only calibration needs torch

    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise SpecError("device", f"{device!r} requested but torch sees no CUDA device")
        return "cuda:0" if device == "cuda" else device
    raise SpecError("device", f"expected 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def _gemm_fn(dtype: str, n: int, device: str) -> Callable[[], Any]:
    import torch  # noqa: PLC0415

    if dtype == "fp8":
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major
        one = torch.tensor(1.0, device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    torch_dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
                   "fp16": torch.float16}[dtype]
    a = torch.randn(n, n, device=device, dtype=torch_dtype)
    b = torch.randn(n, n, device=device, dtype=torch_dtype)
    out = torch.empty(n, n, device=device, dtype=torch_dtype)
    return lambda: torch.matmul(a, b, out=out)


def _gemm_rate(dtype: str, device: str, budget_s: float) -> tuple[float, int]:
    """Best FLOP/s over growing square sizes; stops when the next size would not fit budget."""
    deadline = time.perf_counter() + budget_s
    best, best_n, last_s, last_n = 0.0, 0, 0.0, 0
    for n in _GEMM_SIZES:
        remaining = deadline - time.perf_counter()
        predicted = last_s * (n / last_n) ** 3 if last_n else 0.0
        if last_n and predicted * (MIN_REPS + 2) > remaining:
            break
        fn = _gemm_fn(dtype, n, device)
        seconds = median_s(fn, device, max(remaining / 3, 0.0))
        rate = 2.0 * n**3 / seconds  # FLOPs of an n x n x n GEMM: 2 n^3
        if rate > best:
            best, best_n = rate, n
        last_s, last_n = seconds, n
        del fn
    return best, best_n


def _memory_rates(device: str, budget_s: float) -> dict[str, float]:
    """Copy (2 x bytes moved) and add (3 x bytes) bandwidth on the largest tensors that fit.

    Returns {"copy": bytes/s, "add": bytes/s, "bytes": size of one tensor}.
    """
    deadline = time.perf_counter() + budget_s
    best = {"copy": 0.0, "add": 0.0, "bytes": 0.0}
    last_s, last_bytes = 0.0, 0
    for size in _MEM_BYTES:
        remaining = deadline - time.perf_counter()
        if last_bytes and last_s * (size / last_bytes) * 2 * (MIN_REPS + 2) > remaining:
            break
        copy_s, add_s = _stream_times(size, device, max(remaining / 6, 0.0))
        # The largest size wins (not the fastest): small tensors may sit in cache.
        best["copy"] = 2 * size / copy_s  # read a, write c
        best["add"] = 3 * size / add_s  # read a and b, write c
        best["bytes"] = float(size)
        last_s, last_bytes = copy_s + add_s, size
    return best


def _stream_times(size: int, device: str, budget_s: float) -> tuple[float, float]:
    """Median seconds of a copy and of an add on tensors of ``size`` bytes."""
    import torch  # noqa: PLC0415

    a = torch.ones(size // 4, device=device)
    b = torch.ones(size // 4, device=device)
    c = torch.empty(size // 4, device=device)
    return (median_s(lambda: c.copy_(a), device, budget_s),
            median_s(lambda: torch.add(a, b, out=c), device, budget_s))


def _pcie_rate(device: str, budget_s: float) -> float:
    """Pinned host -> device copy bandwidth (one direction)."""
    import torch  # noqa: PLC0415

    size = 256 * 2**20
    host = torch.ones(size // 4, pin_memory=True)
    dev = torch.empty(size // 4, device=device)
    return size / median_s(lambda: dev.copy_(host, non_blocking=True), device, budget_s)


def _loopback(budget_s: float) -> tuple[float, float]:
    """TCP over 127.0.0.1 (gloo's transport between local ranks): (bytes/s, one-way s)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def _serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = bytearray(1 << 20)
            while not stop.is_set():
                got = conn.recv_into(buf)
                if got == 0:
                    return
                if got == 1:  # a ping: answer it
                    conn.sendall(b"x")

    thread = threading.Thread(target=_serve, daemon=True)
    thread.start()
    payload = bytes(_LOOPBACK_BYTES)
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _ping() -> None:
            client.sendall(b"p")
            client.recv(1)

        rtt_s = median_s(_ping, "cpu", budget_s / 4)
        # Bulk throughput: the receiver drains in 1 MiB reads; sendall returns once the
        # kernel has taken the data, so the last socket-buffer's worth is not yet read.
        bulk_s = median_s(lambda: client.sendall(payload), "cpu", budget_s / 2)
        stop.set()
    thread.join(timeout=5)
    server.close()
    return _LOOPBACK_BYTES / bulk_s, rtt_s / 2


def _dtypes(device: str, skipped: dict[str, str]) -> list[str]:
    """The GEMM dtypes to time on ``device``; the others go into ``skipped`` with why."""
    import torch  # noqa: PLC0415

    if not device.startswith("cuda"):
        skipped["fp16"] = "CPU fp16 matmul is ~300x slower than bf16 here; fp16 peak set to bf16"
        skipped["tf32"] = "no TF32 on CPU; tf32 peak set to fp32"
        return ["fp32", "bf16"]
    if torch.cuda.get_device_capability(device) >= (8, 9) and hasattr(torch, "_scaled_mm"):
        return ["fp32", "tf32", "bf16", "fp16", "fp8"]
    skipped["fp8"] = "needs compute capability >= 8.9"
    return ["fp32", "tf32", "bf16", "fp16"]


def _gemm_rates(device: str, budget_s: float, skipped: dict[str, str]
                ) -> tuple[dict[str, float], dict[str, int]]:
    """Best GEMM FLOP/s and its size per dtype, ``budget_s`` shared between the dtypes."""
    import torch  # noqa: PLC0415

    dtypes = _dtypes(device, skipped)
    rates: dict[str, float] = {}
    sizes: dict[str, int] = {}
    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for dtype in dtypes:
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            try:
                rates[dtype], sizes[dtype] = _gemm_rate(dtype, device, budget_s / len(dtypes))
            except (RuntimeError, TypeError) as exc:  # kernel missing for this build/device
                skipped[dtype] = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32
    if "fp32" not in rates or "bf16" not in rates:
        raise SpecError("device", f"could not time fp32/bf16 matmul on {device}: {skipped}")
    return rates, sizes


def _cpu_l2_bytes() -> float:
    """Total L2 over all cores from sysfs (each shared instance counted once); 0 if unknown."""
    return float(sum(cache_instances(2).values()))


def _device_facts(device: str) -> dict[str, Any]:
    """Name, vendor, memory capacity (bytes), compute units and L2 (bytes) of ``device``."""
    import torch  # noqa: PLC0415

    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        return {"device_name": torch.cuda.get_device_name(device),
                "vendor": "amd" if getattr(torch.version, "hip", None) else "nvidia",
                "memory_capacity_bytes": float(props.total_memory),
                "compute_units": props.multi_processor_count,
                "l2_bytes": float(getattr(props, "L2_cache_size", 0))}
    name = cpu_model_name()
    return {"device_name": name, "vendor": name.split()[0].lower().strip("()r") or "cpu",
            "memory_capacity_bytes": float(os.sysconf("SC_PAGE_SIZE")
                                           * os.sysconf("SC_PHYS_PAGES")),
            "compute_units": os.cpu_count() or 1, "l2_bytes": _cpu_l2_bytes()}


def measure(device: str = "auto", *, budget_s: float) -> Measurement:
    """Run the microbenchmarks on ``device`` ("auto", "cpu", "cuda", "cuda:N") in ~budget_s:
    60% GEMMs, 25% memory, 10% the host link."""
    import torch  # noqa: PLC0415

    if budget_s <= 0:
        raise SpecError("budget_s", f"must be > 0, got {budget_s}")
    dev = _resolve_device(device)
    skipped: dict[str, str] = {}
    rates, sizes = _gemm_rates(dev, 0.6 * budget_s, skipped)
    memory = _memory_rates(dev, 0.25 * budget_s)
    if dev.startswith("cuda"):
        link_bw, link_lat = _pcie_rate(dev, 0.1 * budget_s), 0.0
    else:
        link_bw, link_lat = _loopback(0.1 * budget_s)
    return Measurement(
        device=dev, **_device_facts(dev), gemm_flops_per_s=rates, gemm_sizes=sizes,
        memory_bw_bytes_per_s=max(memory["copy"], memory["add"]), memory_detail=memory,
        host_link_bw_bytes_per_s=link_bw, host_link_latency_s=link_lat, skipped=skipped,
        measured_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        software=f"torch {torch.__version__}", budget_s=budget_s,
    )


def calibrate(device: str = "auto", *, name: str, budget_s: float,
              reference: str | None = None) -> dict[str, Any]:
    """Measure this machine and return a hardware dict in the catalog YAML schema (see
    `analytical.calibrate.hardware_entry` for ``reference``)."""
    return hardware_entry(measure(device, budget_s=budget_s), name=name, reference=reference)


def default_name(device: str) -> tuple[str, str | None]:
    """(name, reference) for a calibration: "cpu" on a CPU; on a GPU "<catalog>-calibrated",
    referenced to its catalog entry when there is one (so its efficiencies are measured)."""
    import torch  # noqa: PLC0415

    if device == "cpu" or not torch.cuda.is_available():
        return "cpu", None
    suffix = device.removeprefix("cuda:")
    index = int(suffix) if suffix.isdigit() else 0  # a bad suffix is rejected by measure
    catalog = hardware_name_for_device(torch.cuda.get_device_name(index))
    return f"{catalog}-calibrated", catalog if hardware_file(catalog) is not None else None
