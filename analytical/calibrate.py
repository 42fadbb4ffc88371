# SPDX-License-Identifier: Apache-2.0
"""Turn a measurement of the machine at hand into a hardware catalog entry.

`profiler.calibrate` measures achievable dense-GEMM FLOP/s per dtype, streaming memory
bandwidth and the host link, and reads the device's size (memory, compute units, L2) into a
`Measurement`. `hardware_entry` turns one into a dict in the schema of
``datasets/hardware/*.yaml``: with a reference entry, its vendor peaks, links and node layout
are kept and the efficiency factors become achieved / peak; without one (a CPU, whose peak is
unknown) the peaks are the measured rates and every efficiency is 1.0. `write_hardware_file`
validates and saves it. Nothing here measures anything or imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from analytical.hardware import (
    GB,
    GIB,
    MB,
    get_hardware,
    hardware_from_dict,
    hardware_to_dict,
)

# The inter-node link of a calibrated entry without a reference: not measured on one machine.
ASSUMED_INTER_NODE = {"name": "Ethernet 10 Gb/s (assumed, not measured)",
                      "bandwidth_gb_per_s": 1.25, "latency_us": 50.0}


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """What `profiler.calibrate.measure` found; rates are the best median over the sizes tried."""

    device: str  # "cpu" or "cuda:N"
    device_name: str
    vendor: str  # "nvidia", "amd", or the CPU maker's first word
    gemm_flops_per_s: dict[str, float]  # dtype -> FLOP/s
    gemm_sizes: dict[str, int]  # dtype -> square size of the best rate
    memory_bw_bytes_per_s: float  # max of copy and add
    memory_capacity_bytes: float  # device memory (CPU: physical RAM)
    compute_units: int  # SMs / CUs (CPU: logical cores)
    l2_bytes: float = 0.0  # 0 when not detected
    memory_detail: dict[str, float] = field(default_factory=dict)  # copy/add bytes/s, bytes
    host_link_bw_bytes_per_s: float = 0.0  # CPU: TCP loopback; CUDA: pinned host->device
    host_link_latency_s: float = 0.0  # CPU only: half round-trip of a 1-byte message
    skipped: dict[str, str] = field(default_factory=dict)  # dtype -> why not measured
    measured_at: str = ""  # ISO 8601 UTC
    software: str = ""  # what measured it, e.g. "torch 2.5.1"
    budget_s: float = 0.0  # the wall-clock budget it was given

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")


def _sig(value: float, digits: int = 3) -> float:
    """Round to ``digits`` significant figures: measurements are not more precise than that."""
    return float(f"{value:.{digits}g}")


def hardware_entry(m: Measurement, *, name: str, reference: str | None = None) -> dict[str, Any]:
    """A hardware dict in the catalog YAML schema for ``m``, named ``name``.

    ``reference``: a catalog name (or file) whose vendor peaks, links and node layout to keep;
    the gemm and memory efficiencies then become achieved / peak. Without one the peaks are
    the measured rates and every efficiency is 1.0. The result is checked to load.
    """
    measured = {k: _sig(v / 1e12, 4) for k, v in m.gemm_flops_per_s.items()}
    lines = [f"Measured by llmsim calibrate on {m.device} ({m.device_name}) at {m.measured_at}, "
             f"{m.software}, budget {m.budget_s:g} s."]
    lines += [f"GEMM {k}: {v:g} TFLOP/s (best median, at {m.gemm_sizes[k]}^3)."
              for k, v in measured.items()]
    if m.memory_detail:
        lines.append("Memory: copy {:.3g} GB/s, add {:.3g} GB/s on {:g} MiB tensors (bytes = "
                     "reads + writes).".format(m.memory_detail["copy"] / GB,
                                               m.memory_detail["add"] / GB,
                                               m.memory_detail["bytes"] / 2**20))
    lines += [f"Skipped {k}: {why}." for k, why in m.skipped.items()]
    if reference is not None:
        data = _from_reference(reference, m, name, lines)
    else:
        data = _from_measurement(m, name, measured, lines)
    data["notes"] = " ".join(lines)
    hardware_from_dict(data, source=f"calibrate({name})")  # the result must load
    return data


def _from_reference(reference: str, m: Measurement, name: str,
                    lines: list[str]) -> dict[str, Any]:
    ref = get_hardware(reference)
    data = hardware_to_dict(ref)
    data["name"] = name
    data["sources"] = [*data["sources"], f"llmsim calibrate on {m.device_name}, "
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


def _links(m: Measurement) -> tuple[dict[str, Any], dict[str, Any]]:
    """(intra-node, pcie) links of an entry without a reference, from the host-link rate."""
    link_gb_s = _sig(m.host_link_bw_bytes_per_s / GB)
    if m.is_cuda:
        return ({"name": "unmeasured (pinned host-to-device copy rate as a lower bound)",
                 "bandwidth_gb_per_s": link_gb_s, "latency_us": 5.0},
                {"name": "host link (pinned host-to-device copy, measured)",
                 "bandwidth_gb_per_s": link_gb_s, "latency_us": 5.0})
    return ({"name": "TCP loopback (gloo between local ranks, measured)",
             "bandwidth_gb_per_s": link_gb_s,
             "latency_us": _sig(max(m.host_link_latency_s / 1e-6, 0.1))},
            {"name": "host memory (no device link; memory copy rate)",
             "bandwidth_gb_per_s": _sig(m.memory_bw_bytes_per_s / GB), "latency_us": 1.0})


def _from_measurement(m: Measurement, name: str, measured: dict[str, float],
                      lines: list[str]) -> dict[str, Any]:
    peaks = {"fp32": measured["fp32"], "tf32": measured.get("tf32", measured["fp32"]),
             "bf16": measured["bf16"], "fp16": measured.get("fp16", measured["bf16"])}
    if "fp8" in measured:
        peaks["fp8"] = measured["fp8"]
    intra, pcie = _links(m)
    l2_mb = m.l2_bytes / MB
    if l2_mb <= 0:
        l2_mb = 1.0
        lines.append("L2 size not detected; set to 1 MB.")
    lines.append("No vendor peak known: peaks are the measured rates and every efficiency is "
                 "1.0. The inter-node link is an assumed 10 GbE, not measured.")
    return {
        "name": name, "vendor": m.vendor, "kind": "gpu" if m.is_cuda else "cpu",
        "sources": [f"llmsim calibrate on {m.device_name}, {m.measured_at}"],
        "peak_dense_tflops": peaks,
        "memory": {"capacity_gib": _sig(m.memory_capacity_bytes / GIB),
                   "bandwidth_gb_per_s": _sig(m.memory_bw_bytes_per_s / GB),
                   "type": "device memory (type not detected)" if m.is_cuda else "DRAM (host)"},
        "compute_units": int(m.compute_units), "l2_mb": _sig(l2_mb),
        "interconnect": {"intra_node": intra, "pcie": pcie,
                         "inter_node": dict(ASSUMED_INTER_NODE)},
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
