# SPDX-License-Identifier: Apache-2.0
"""Hardware fingerprints: what a measurement was taken on, stamped on every stored row.

A `Fingerprint` names the catalog hardware (``datasets/hardware/<name>.yaml``), the device as
the driver reports it, and the software stack that ran the kernel (driver, CUDA, torch, NCCL,
Triton), clocks and host. Its `id` hashes every field, so two rows share a fingerprint only when
all of these agree. The timers that use it live in `profiler.timers`; the store in
`profiler.store`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, fields

from analytical.errors import SpecError


@dataclass(frozen=True, slots=True, kw_only=True)
class Fingerprint:
    """The device and software stack of one measurement."""

    hardware: str  # catalog name in datasets/hardware, e.g. "h100-sxm", "cpu"
    device_name: str  # as reported, e.g. "NVIDIA H100 80GB HBM3" or the CPU model name
    device_count: int  # devices taking part (GPUs in a collective; 1 for a kernel; CPU cores)
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    nccl: str = ""
    triton: str = ""
    clocks_mhz: str = ""  # e.g. "sm=1980,mem=2619"
    host: str = ""

    def __post_init__(self) -> None:
        if not self.hardware:
            raise SpecError("Fingerprint.hardware", "must be a non-empty catalog name")
        if isinstance(self.device_count, bool) or not isinstance(self.device_count, int) \
                or self.device_count <= 0:
            raise SpecError("Fingerprint.device_count",
                            f"must be a positive int, got {self.device_count!r}")

    @property
    def id(self) -> str:
        """16 hex digits of sha256 over every field (name=value, in declaration order)."""
        text = "\x1f".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, str | int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


FINGERPRINT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Fingerprint))

# Reported device name -> catalog name. Checked in order, all patterns must occur (case-
# insensitive); more specific entries first ("GH200" before "H200", "L40S" before "L40").
_DEVICE_PATTERNS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("GH200",), "gh200"),
    (("H200",), "h200"),
    (("H100", "PCIE"), "h100-pcie"),
    (("H100", "NVL"), "h100-nvl"),
    (("H100",), "h100-sxm"),  # "NVIDIA H100 80GB HBM3" is the SXM5 part
    (("H800",), "h800"),
    (("H20",), "h20"),
    (("GB200",), "gb200"),
    (("B200",), "b200"),
    (("B100",), "b100"),
    (("A100", "PCIE", "80GB"), "a100-pcie-80gb"),
    (("A100", "PCIE"), "a100-pcie-40gb"),
    (("A100", "40GB"), "a100-sxm-40gb"),
    (("A100",), "a100-sxm-80gb"),
    (("L40S",), "l40s"),
    (("L40",), "l40"),
    (("L4",), "l4"),
    (("A40",), "a40"),
    (("A10G",), "a10g"),
    (("MI300X",), "mi300x"),
    (("MI325X",), "mi325x"),
)


def hardware_name_for_device(device_name: str) -> str:
    """Map a reported device name to a catalog name.

    ``"NVIDIA H100 80GB HBM3"`` -> ``"h100-sxm"``; ``"cpu"`` or a CPU model name -> ``"cpu"``.
    An unknown GPU maps to a slug of its name (``"NVIDIA RTX 6000"`` -> ``"nvidia-rtx-6000"``),
    so its rows still group together until a catalog file of that name is written.
    """
    upper = device_name.upper()
    if not upper.strip() or upper.strip() == "CPU" or _looks_like_cpu(upper):
        return "cpu"
    for patterns, name in _DEVICE_PATTERNS:
        if all(p in upper for p in patterns):
            return name
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")


def _looks_like_cpu(upper: str) -> bool:
    return any(word in upper for word in ("XEON", "EPYC", "RYZEN", "CORE(TM)", "NEOVERSE",
                                          "PROCESSOR", "CPU @"))


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def cpu_model_name() -> str:
    """The CPU model as /proc/cpuinfo names it (else the platform's guess)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _nvidia_smi(query: str, index: int) -> str:
    """One field from nvidia-smi for device ``index``; "" when unavailable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ""
    try:
        out = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader,nounits",
                              f"--id={index}"], capture_output=True, text=True, timeout=20,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0].strip() if out.strip() else ""


def current_fingerprint(device: str = "cpu", *, hardware: str | None = None) -> Fingerprint:
    """Fingerprint of this machine for ``device`` ("cpu", "cuda" or "cuda:<index>").

    ``hardware`` overrides the catalog name derived from the device name (use it for a
    calibrated file with its own name). Imports torch only for CUDA devices.
    """
    host = socket.gethostname()
    if device == "cpu":
        name = cpu_model_name()
        return Fingerprint(hardware=hardware or "cpu", device_name=name,
                           device_count=os.cpu_count() or 1, torch=_package_version("torch"),
                           triton=_package_version("triton"), host=host)
    if not (device == "cuda" or device.startswith("cuda:")):
        raise SpecError("device", f"expected 'cpu', 'cuda' or 'cuda:<index>', got {device!r}")
    import torch  # noqa: PLC0415 - only CUDA fingerprints need torch

    if not torch.cuda.is_available():
        raise SpecError("device", f"{device!r} requested but no CUDA device is available")
    index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
    name = torch.cuda.get_device_name(index)
    nccl = ""
    try:
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except (AttributeError, RuntimeError):
        pass
    sm = _nvidia_smi("clocks.max.sm", index)
    mem = _nvidia_smi("clocks.max.mem", index)
    clocks = f"sm={sm},mem={mem}" if sm and mem else ""
    return Fingerprint(hardware=hardware or hardware_name_for_device(name), device_name=name,
                       device_count=torch.cuda.device_count(),
                       driver=_nvidia_smi("driver_version", index),
                       cuda=torch.version.cuda or torch.version.hip or "",
                       torch=torch.__version__, nccl=nccl, triton=_package_version("triton"),
                       clocks_mhz=clocks, host=host)
