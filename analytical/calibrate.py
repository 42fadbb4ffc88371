# SPDX-License-Identifier: Apache-2.0
"""Write a hardware file for the machine at hand from a few microbenchmarks.

`calibrate` measures achievable dense-GEMM FLOP/s (``torch.matmul``, several square sizes, per
dtype) and streaming memory bandwidth (tensor copy and add, bytes counted as read + write), and
on a CPU the TCP loopback bandwidth and latency that gloo sees between local ranks. It returns a
dict in the schema of ``datasets/hardware/*.yaml``; `write_hardware_file` validates and saves it.
The full operator sweeps live in ``profiler/``; this module only fills a catalog entry.

torch is imported inside the functions so that ``analytical`` stays importable without it.
"""

from __future__ import annotations

import gc
import os
import platform
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from analytical.errors import SpecError
from analytical.hardware import GB, GIB, MB, get_hardware, hardware_dirs, hardware_from_dict

_GEMM_SIZES = (256, 512, 1024, 2048, 4096, 8192)  # square m = n = k
_MEM_BYTES = (16 * 2**20, 64 * 2**20, 256 * 2**20, 1024 * 2**20)  # per tensor
_LOOPBACK_BYTES = 32 * 2**20
_MIN_REPS = 3
_MAX_REPS = 30


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """What `measure` found; rates are the best median over the sizes tried."""

    device: str  # "cpu" or "cuda:N"
    device_name: str
    gemm_flops_per_s: dict[str, float]  # dtype -> FLOP/s
    gemm_sizes: dict[str, int]  # dtype -> square size of the best rate
    memory_bw_bytes_per_s: float  # max of copy and add
    memory_detail: dict[str, float] = field(default_factory=dict)  # copy/add bytes/s, bytes
    host_link_bw_bytes_per_s: float = 0.0  # CPU: TCP loopback; CUDA: pinned host->device
    host_link_latency_s: float = 0.0  # CPU only: half round-trip of a 1-byte message
    skipped: dict[str, str] = field(default_factory=dict)  # dtype -> why not measured
    measured_at: str = ""  # ISO 8601 UTC


def _median_s(fn: Callable[[], Any], sync: Callable[[], None], budget_s: float) -> float:
    """Median wall time of ``fn`` in seconds: one warm-up call, then repeats within budget."""
    fn()
    sync()
    t0 = time.perf_counter_ns()
    fn()
    sync()
    estimate_s = max((time.perf_counter_ns() - t0) / 1e9, 1e-9)
    reps = int(min(_MAX_REPS, max(_MIN_REPS, budget_s / estimate_s)))
    samples: list[int] = []
    gc_enabled = gc.isenabled()
    gc.disable()  # like timeit: no collector pauses inside a sample
    try:
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            fn()
            sync()
            samples.append(time.perf_counter_ns() - t0)
    finally:
        if gc_enabled:
            gc.enable()
    return statistics.median(samples) / 1e9


def _resolve_device(device: str) -> str:
    import torch  # noqa: PLC0415 - analytical must import without torch

    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise SpecError("device", f"{device!r} requested but torch sees no CUDA device")
        return "cuda:0" if device == "cuda" else device
    raise SpecError("device", f"expected 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def _gemm_rate(dtype: str, device: str, budget_s: float) -> tuple[float, int]:
    """Best FLOP/s over growing square sizes; stops when the next size would not fit budget."""
    import torch  # noqa: PLC0415

    is_cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if is_cuda else (lambda: None)
    deadline = time.perf_counter() + budget_s
    best, best_n, last_s, last_n = 0.0, 0, 0.0, 0
    for n in _GEMM_SIZES:
        remaining = deadline - time.perf_counter()
        predicted = last_s * (n / last_n) ** 3 if last_n else 0.0
        if last_n and predicted * (_MIN_REPS + 2) > remaining:
            break
        fn = _gemm_fn(dtype, n, device)
        seconds = _median_s(fn, sync, max(remaining / 3, 0.0))
        rate = 2.0 * n**3 / seconds  # FLOPs of an n x n x n GEMM: 2 n^3
        if rate > best:
            best, best_n = rate, n
        last_s, last_n = seconds, n
        del fn
    return best, best_n


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


def _memory_rates(device: str, budget_s: float) -> dict[str, float]:
    """Copy (2 x bytes moved) and add (3 x bytes) bandwidth on the largest tensors that fit.

    Returns {"copy": bytes/s, "add": bytes/s, "bytes": size of one tensor}.
    """
    import torch  # noqa: PLC0415

    is_cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if is_cuda else (lambda: None)
    deadline = time.perf_counter() + budget_s
    best = {"copy": 0.0, "add": 0.0, "bytes": 0.0}
    last_s, last_bytes = 0.0, 0
    for size in _MEM_BYTES:
        remaining = deadline - time.perf_counter()
        if last_bytes and last_s * (size / last_bytes) * 2 * (_MIN_REPS + 2) > remaining:
            break
        copy_s, add_s = _stream_times(size, device, sync, max(remaining / 6, 0.0))
        # The largest size wins (not the fastest): small tensors may sit in cache.
        best["copy"] = 2 * size / copy_s  # read a, write c
        best["add"] = 3 * size / add_s  # read a and b, write c
        best["bytes"] = float(size)
        last_s, last_bytes = copy_s + add_s, size
    return best


def _stream_times(size: int, device: str, sync: Callable[[], None],
                  budget_s: float) -> tuple[float, float]:
    import torch  # noqa: PLC0415

    a = torch.ones(size // 4, device=device)
    b = torch.ones(size // 4, device=device)
    c = torch.empty(size // 4, device=device)
    return (_median_s(lambda: c.copy_(a), sync, budget_s),
            _median_s(lambda: torch.add(a, b, out=c), sync, budget_s))


def _pcie_rate(device: str, budget_s: float) -> float:
    """Pinned host -> device copy bandwidth (one direction)."""
    import torch  # noqa: PLC0415

    size = 256 * 2**20
    host = torch.ones(size // 4, pin_memory=True)
    dev = torch.empty(size // 4, device=device)
    seconds = _median_s(lambda: dev.copy_(host, non_blocking=True), torch.cuda.synchronize,
                        budget_s)
    return size / seconds


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

        rtt_s = _median_s(_ping, lambda: None, budget_s / 4)
        # Bulk throughput: the receiver drains in 1 MiB reads; sendall returns once the
        # kernel has taken the data, so the last socket-buffer's worth is not yet read.
        bulk_s = _median_s(lambda: client.sendall(payload), lambda: None, budget_s / 2)
        stop.set()
    thread.join(timeout=5)
    server.close()
    return _LOOPBACK_BYTES / bulk_s, rtt_s / 2


def measure(device: str = "auto", *, budget_s: float) -> Measurement:
    """Run the microbenchmarks on ``device`` ("auto", "cpu", "cuda", "cuda:N") in ~budget_s."""
    import torch  # noqa: PLC0415

    if budget_s <= 0:
        raise SpecError("budget_s", f"must be > 0, got {budget_s}")
    dev = _resolve_device(device)
    is_cuda = dev.startswith("cuda")
    skipped: dict[str, str] = {}
    if is_cuda:
        name = torch.cuda.get_device_name(dev)
        dtypes = ["fp32", "tf32", "bf16", "fp16"]
        if torch.cuda.get_device_capability(dev) >= (8, 9) and hasattr(torch, "_scaled_mm"):
            dtypes.append("fp8")
        else:
            skipped["fp8"] = "needs compute capability >= 8.9"
    else:
        name = _cpu_name()
        dtypes = ["fp32", "bf16"]
        skipped["fp16"] = "CPU fp16 matmul is ~300x slower than bf16 here; fp16 peak set to bf16"
        skipped["tf32"] = "no TF32 on CPU; tf32 peak set to fp32"
    gemm_budget = 0.6 * budget_s / len(dtypes)
    rates: dict[str, float] = {}
    sizes: dict[str, int] = {}
    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for dtype in dtypes:
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            try:
                rates[dtype], sizes[dtype] = _gemm_rate(dtype, dev, gemm_budget)
            except (RuntimeError, TypeError) as exc:  # kernel missing for this build/device
                skipped[dtype] = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32
    if "fp32" not in rates or "bf16" not in rates:
        raise SpecError("device", f"could not time fp32/bf16 matmul on {dev}: {skipped}")
    memory = _memory_rates(dev, 0.25 * budget_s)
    if is_cuda:
        link_bw, link_lat = _pcie_rate(dev, 0.1 * budget_s), 0.0
    else:
        link_bw, link_lat = _loopback(0.1 * budget_s)
    return Measurement(
        device=dev, device_name=name, gemm_flops_per_s=rates, gemm_sizes=sizes,
        memory_bw_bytes_per_s=max(memory["copy"], memory["add"]), memory_detail=memory,
        host_link_bw_bytes_per_s=link_bw, host_link_latency_s=link_lat, skipped=skipped,
        measured_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _cpu_l2_bytes() -> float:
    """Total L2 over all cores from sysfs (each shared instance counted once); 0 if unknown."""
    seen: dict[str, float] = {}
    for index in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            if (index / "level").read_text().strip() != "2":
                continue
            size = (index / "size").read_text().strip().upper()
            shared = (index / "shared_cpu_list").read_text().strip()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        seen[shared] = float(size.rstrip("KMG")) * scale
    return sum(seen.values())


def _sig(value: float, digits: int = 3) -> float:
    """Round to ``digits`` significant figures: measurements are not more precise than that."""
    return float(f"{value:.{digits}g}")


def calibrate(device: str = "auto", *, name: str, budget_s: float,
              reference: str | None = None) -> dict[str, Any]:
    """Measure this machine and return a hardware dict in the catalog YAML schema.

    Args:
        device: "auto" (CUDA if present, else CPU), "cpu", "cuda" or "cuda:N".
        name: catalog name for the result (the file stem it will be saved under).
        budget_s: rough wall-clock budget for all measurements, seconds.
        reference: a catalog name whose vendor peaks, links and node layout to keep; the
            efficiency factors then become achieved / peak. Without one (e.g. a CPU, whose peak
            is unknown) the peaks are the measured rates and every efficiency is 1.0.
    """
    import torch  # noqa: PLC0415

    m = measure(device, budget_s=budget_s)
    is_cuda = m.device.startswith("cuda")
    measured = {k: _sig(v / 1e12, 4) for k, v in m.gemm_flops_per_s.items()}
    lines = [f"Measured by llmsim calibrate on {m.device} ({m.device_name}) at {m.measured_at}, "
             f"torch {torch.__version__}, budget {budget_s:g} s."]
    lines += [f"GEMM {k}: {v:g} TFLOP/s (best median, at {m.gemm_sizes[k]}^3)."
              for k, v in measured.items()]
    lines.append("Memory: copy {:.3g} GB/s, add {:.3g} GB/s on {:g} MiB tensors (bytes = reads + "
                 "writes).".format(m.memory_detail["copy"] / GB, m.memory_detail["add"] / GB,
                                   m.memory_detail["bytes"] / 2**20))
    lines += [f"Skipped {k}: {why}." for k, why in m.skipped.items()]
    if reference is not None:
        data = _from_reference(reference, m, name, lines)
    else:
        data = _from_measurement(m, name, measured, is_cuda, lines)
    data["notes"] = " ".join(lines)
    hardware_from_dict(data, source=f"calibrate({name})")  # the result must load
    return data


def _from_reference(reference: str, m: Measurement, name: str,
                    lines: list[str]) -> dict[str, Any]:
    ref = get_hardware(reference)
    if reference.endswith((".yaml", ".yml")) or os.sep in reference:
        path = Path(reference)
    else:
        path = next(p for d in hardware_dirs() if (p := d / f"{reference}.yaml").is_file())
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    data["name"] = name
    data["sources"] = [*data.get("sources", []), f"llmsim calibrate on {m.device_name}, "
                                                 f"{m.measured_at} (efficiency factors)"]
    gemm = m.gemm_flops_per_s["bf16"] / ref.peak_flops_bf16
    mem = m.memory_bw_bytes_per_s / ref.memory_bw_bytes_per_s
    for label, value in (("gemm", gemm), ("memory", mem)):
        if value > 1.0:
            lines.append(f"Measured {label} exceeds the {reference} peak ({value:.3f}); "
                         "capped at 1.0: check the reference name.")
        data["efficiency"][label] = _sig(min(value, 1.0))
    lines.append(f"Peaks, links and node layout from catalog entry {reference!r}; efficiency "
                 "gemm (bf16) and memory measured here, the rest kept from the entry.")
    return data


def _from_measurement(m: Measurement, name: str, measured: dict[str, float], is_cuda: bool,
                      lines: list[str]) -> dict[str, Any]:
    import torch  # noqa: PLC0415

    peaks = {"fp32": measured["fp32"], "tf32": measured.get("tf32", measured["fp32"]),
             "bf16": measured["bf16"], "fp16": measured.get("fp16", measured["bf16"])}
    if "fp8" in measured:
        peaks["fp8"] = measured["fp8"]
    mem_gb_s = _sig(m.memory_bw_bytes_per_s / GB)
    link_gb_s = _sig(m.host_link_bw_bytes_per_s / GB)
    if is_cuda:
        props = torch.cuda.get_device_properties(m.device)
        vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
        capacity_gib, units = props.total_memory / GIB, props.multi_processor_count
        l2_mb = getattr(props, "L2_cache_size", 0) / MB
        intra = {"name": "unmeasured (pinned host-to-device copy rate as a lower bound)",
                 "bandwidth_gb_per_s": link_gb_s, "latency_us": 5.0}
        pcie = {"name": "host link (pinned host-to-device copy, measured)",
                "bandwidth_gb_per_s": link_gb_s, "latency_us": 5.0}
        mem_type = "device memory (type not detected)"
    else:
        vendor = m.device_name.split()[0].lower().strip("()r") or "cpu"
        capacity_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
        units, l2_mb = os.cpu_count() or 1, _cpu_l2_bytes() / MB
        intra = {"name": "TCP loopback (gloo between local ranks, measured)",
                 "bandwidth_gb_per_s": link_gb_s,
                 "latency_us": _sig(max(m.host_link_latency_s / 1e-6, 0.1))}
        pcie = {"name": "host memory (no device link; memory copy rate)",
                "bandwidth_gb_per_s": mem_gb_s, "latency_us": 1.0}
        mem_type = "DRAM (host)"
    if l2_mb <= 0:
        l2_mb = 1.0
        lines.append("L2 size not detected; set to 1 MB.")
    lines.append("No vendor peak known: peaks are the measured rates and every efficiency is "
                 "1.0. The inter-node link is an assumed 10 GbE, not measured.")
    return {
        "name": name, "vendor": vendor, "kind": "gpu" if is_cuda else "cpu",
        "sources": [f"llmsim calibrate on {m.device_name}, {m.measured_at}"],
        "peak_dense_tflops": peaks,
        "memory": {"capacity_gib": _sig(capacity_gib), "bandwidth_gb_per_s": mem_gb_s,
                   "type": mem_type},
        "compute_units": int(units), "l2_mb": _sig(l2_mb),
        "interconnect": {
            "intra_node": intra, "pcie": pcie,
            "inter_node": {"name": "Ethernet 10 Gb/s (assumed, not measured)",
                           "bandwidth_gb_per_s": 1.25, "latency_us": 50.0},
        },
        "node": {"gpus_per_node": 1, "network": "assumed 10 GbE"},
        "efficiency": {"gemm": 1.0, "attention": 1.0, "memory": 1.0, "intra_node": 1.0,
                       "inter_node": 1.0},
    }


def write_hardware_file(data: dict[str, Any], path: str | Path) -> Path:
    """Validate ``data`` against the catalog schema and write it as YAML; returns the path."""
    path = Path(path)
    hardware_from_dict(data, source=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    origin = (data.get("sources") or ["llmsim calibrate"])[-1]
    header = (f"# Written by `llmsim hardware calibrate` ({origin}).\n"
              "# Values were measured on that machine; see `notes` for what and how.\n")
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, width=100))
    return path
