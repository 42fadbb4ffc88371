# SPDX-License-Identifier: Apache-2.0
"""Hardware specs: one YAML file per device in ``datasets/hardware/``, file stem = name.

Files use human units with the unit in the key (``bandwidth_gb_per_s``, ``capacity_gib``);
`HardwareSpec` holds SI floats (FLOP/s, bytes, bytes/s, seconds) and is what every formula takes.
Achievable-efficiency factors are data in the same file, each with a comment saying where it came
from; no formula in llmsim holds a device constant. Writing a file for an unknown device is the
job of `analytical.calibrate` (measured by `profiler.calibrate`). `hardware_file` finds an
entry's file and `hardware_to_dict` writes a spec back in the file schema: nothing else reads
these files.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytical.dtypes import DType, parse_dtype
from analytical.errors import SpecError, UnknownNameError
from analytical.hardware_clocks import CLOCK_KEYS, clock_fields, clocks_block
from analytical.hardware_kinds import Architecture as Architecture  # re-exported
from analytical.hardware_kinds import LinkFabric as LinkFabric  # re-exported
from analytical.hardware_topology import Topology, topology_from_dict, topology_to_dict
from analytical.inputs import check_path, load_yaml, show_path
from analytical.paths import DATASETS_DIR, user_hardware_dir

GB = 1e9
GIB = 2**30
MB = 1e6
US = 1e-6

HARDWARE_DIR = DATASETS_DIR / "hardware"


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """A point-to-point link as one GPU sees it."""

    name: str
    bandwidth_bytes_per_s: float  # per GPU, per direction
    latency_s: float  # one-hop start-up latency (alpha term)
    fabric: LinkFabric = LinkFabric.UNKNOWN


_LOW_GEMM = ("gemm_fp8", "gemm_fp4")  # optional efficiency keys
_SUSTAINED = ("sustained_gemm", "sustained_gemm_fp8")  # optional efficiency keys, 1 where not measured


@dataclass(frozen=True, slots=True, kw_only=True)
class Efficiency:
    """Achievable fraction of the vendor peak, per resource (0 < x <= 1)."""

    gemm: float  # dense matmul FLOP/s
    attention: float  # fused attention FLOP/s
    memory: float  # HBM streaming bandwidth
    intra_node: float  # NVLink / xGMI bus bandwidth
    inter_node: float  # network bus bandwidth
    # Fixed time of one compute kernel on top of its bandwidth/FLOP time (the alpha term of an
    # alpha-beta kernel model; file key ``kernel_latency_us``, 0 where not measured).
    kernel_latency_s: float = 0.0
    # Large-GEMM fraction of the fp8 / fp4 peak where measured (`profiler/efficiency_fit.py`);
    # 0 = as ``gemm`` (bf16's). fp8 reaches ~0.85 of bf16's fraction on the store's H100/B200.
    gemm_fp8: float = 0.0
    gemm_fp4: float = 0.0
    # Fraction of the bf16/fp16 dense peak that 16-bit GEMMs sustain when they run back to back
    # for seconds at the board power limit (the SM clock drops; a kernel timed alone after an
    # idle GPU runs faster): a ceiling on a training step's GEMM rate; 1 = not measured.
    sustained_gemm: float = 1.0
    # The same ceiling for fp8 GEMMs, as a fraction of the fp8 dense peak; 1 = not measured.
    sustained_gemm_fp8: float = 1.0

    def gemm_at(self, dtype: DType) -> float:
        """Large-GEMM fraction of ``dtype``'s peak: ``gemm_fp8``/``gemm_fp4`` where set."""
        low = {DType.FP8: self.gemm_fp8, DType.FP4: self.gemm_fp4}.get(dtype, 0.0)
        return low or self.gemm


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwareSpec:
    """One accelerator (or CPU socket) and the node it usually sits in."""

    name: str  # catalog key, e.g. "h100-sxm"
    vendor: str
    kind: str  # "gpu" or "cpu"
    architecture: Architecture = Architecture.UNKNOWN
    peak_flops_fp32: float  # FLOP/s, dense
    peak_flops_tf32: float
    peak_flops_bf16: float
    peak_flops_fp16: float
    peak_flops_fp8: float  # 0 where unsupported
    peak_flops_int8: float  # OP/s
    peak_flops_fp4: float  # 0 where unsupported
    memory_bytes: float  # HBM / DRAM capacity
    memory_bw_bytes_per_s: float
    compute_units: int  # SMs (NVIDIA), CUs (AMD), cores (CPU)
    l2_bytes: float
    # Measured L2 read bandwidth where a microbenchmark publishes one (file key
    # ``memory.l2_bandwidth_gb_per_s``); 0 = no source, callers fall back to DRAM bandwidth.
    l2_bw_bytes_per_s: float = 0.0
    intra_node: Link  # NVLink / xGMI per GPU
    pcie: Link
    inter_node: Link  # network per GPU (NIC share)
    # NVLink bridge between two PCIe cards (A40, A100 PCIe, H100 NVL): a 2-GPU group on it
    # does not go through PCIe; None where the part has none or the node does not fit them
    pair_bridge: Link | None = None
    topology: Topology | None = None  # NCCL's view of the node (`analytical.hardware_topology`)
    gpus_per_node: int
    efficiency: Efficiency
    sources: tuple[str, ...] = ()
    memory_type: str = ""  # e.g. "HBM3"; descriptive only
    network: str = ""  # the node's network, e.g. "8x ConnectX-7 400 Gb/s"; descriptive only
    # CPU time of one eager PyTorch op on the node's host CPU where measured (file key
    # ``node.host_op_us``; 0 = not measured): what a host-bound framework's kernel issue rate
    # scales with (`simulate.moe_host`).
    host_op_s: float = 0.0
    # SM clocks, board power limit (``clocks.{base_mhz,boost_mhz,power_limit_w}``; 0: not stated)
    boost_clock_hz: float = 0.0
    base_clock_hz: float = 0.0
    power_limit_w: float = 0.0
    notes: str = ""

    def peak_flops(self, dtype: DType) -> float:
        """Vendor dense peak for ``dtype`` in FLOP/s.

        int4 is weight-only (W4A16) in llmsim: kernels dequantise to bf16 and multiply at the
        bf16 rate, so int4 reports the bf16 peak.
        """
        peaks = {DType.FP32: self.peak_flops_fp32, DType.TF32: self.peak_flops_tf32,
                 DType.BF16: self.peak_flops_bf16, DType.FP16: self.peak_flops_fp16,
                 DType.FP8: self.peak_flops_fp8, DType.INT8: self.peak_flops_int8,
                 DType.INT4: self.peak_flops_bf16, DType.FP4: self.peak_flops_fp4}
        return peaks[dtype]

    def supports(self, dtype: DType) -> bool:
        return self.peak_flops(dtype) > 0


_TOP_KEYS = {"name", "vendor", "kind", "architecture", "sources", "peak_dense_tflops", "memory",
             "compute_units", "l2_mb", "interconnect", "node", "efficiency", "notes", "clocks"}


class _Reader:
    """Walks a parsed YAML mapping, naming file and dotted field in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def mapping(self, data: Any, field: str, allowed: set[str]) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise SpecError(field or "(top)", f"expected a mapping, got {type(data).__name__}",
                            source=self.source)
        unknown = sorted(set(map(str, data)) - allowed)
        if unknown:
            prefix = f"{field}." if field else ""
            raise SpecError(f"{prefix}{unknown[0]}",
                            f"unknown key; allowed: {', '.join(sorted(allowed))}",
                            source=self.source)
        return data

    def number(self, data: Mapping[str, Any], key: str, field: str, *, minimum: float = 0.0,
               default: float | None = None, positive: bool = True) -> float:
        path = f"{field}.{key}" if field else key
        if key not in data:
            if default is not None:
                return default
            raise SpecError(path, "missing", source=self.source)
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
                value):
            raise SpecError(path, f"expected a finite number, got {value!r}", source=self.source)
        if value < minimum or (positive and value <= 0):
            raise SpecError(path, f"must be {'>' if positive else '>='} {minimum}, got {value}",
                            source=self.source)
        return float(value)

    def text(self, data: Mapping[str, Any], key: str, field: str = "") -> str:
        path = f"{field}.{key}" if field else key
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise SpecError(path, f"expected a non-empty string, got {value!r}", source=self.source)
        return value


def _link(r: _Reader, data: Any, field: str) -> Link:
    m = r.mapping(data, field, {"name", "bandwidth_gb_per_s", "latency_us", "generation",
                                "fabric"})
    fabric = m.get("fabric", LinkFabric.UNKNOWN.value)
    if fabric not in {f.value for f in LinkFabric}:
        raise SpecError(f"{field}.fabric", f"{fabric!r}; allowed: "
                        f"{', '.join(f.value for f in LinkFabric)}", source=r.source)
    return Link(
        name=str(m.get("name", m.get("generation", field.rsplit(".", 1)[-1]))),
        bandwidth_bytes_per_s=r.number(m, "bandwidth_gb_per_s", field) * GB,
        latency_s=r.number(m, "latency_us", field, default=1.0) * US,
        fabric=LinkFabric(fabric),
    )


def _texts(values: dict[str, Any], source: str) -> dict[str, str]:
    """The descriptive fields (dotted name -> value), each checked to be a string."""
    for field, value in values.items():
        if not isinstance(value, str):
            raise SpecError(field, f"expected a string, got {value!r}", source=source)
    return values


def _architecture(value: Any, source: str) -> Architecture:
    try:
        return Architecture(value)
    except ValueError:
        raise SpecError("architecture", f"{value!r}; allowed: "
                        f"{', '.join(a.value for a in Architecture)}", source=source) from None


def _efficiency(r: _Reader, raw: Any, source: str) -> Efficiency:
    """The ``efficiency`` mapping: fractions of peak (each <= 1) and the kernel alpha term."""
    eff = r.mapping(raw, "efficiency", {"gemm", "attention", "memory", "intra_node",
                                        "inter_node", "kernel_latency_us", *_LOW_GEMM,
                                        *_SUSTAINED})
    values = {k: r.number(eff, k, "efficiency") for k in
              ("gemm", "attention", "memory", "intra_node", "inter_node")}
    values |= {k: r.number(eff, k, "efficiency") for k in (*_LOW_GEMM, *_SUSTAINED) if k in eff}
    for k, v in values.items():
        if v > 1.0:
            raise SpecError(f"efficiency.{k}", f"must be <= 1, got {v}", source=source)
    return Efficiency(**values, kernel_latency_s=r.number(
        eff, "kernel_latency_us", "efficiency", default=0.0, positive=False) * US)


def hardware_from_dict(data: Any, *, source: str = "<dict>") -> HardwareSpec:
    """Build a HardwareSpec from the YAML schema of ``datasets/hardware/*.yaml``."""
    r = _Reader(source)
    top = r.mapping(data, "", _TOP_KEYS)
    peaks_raw = r.mapping(top.get("peak_dense_tflops"), "peak_dense_tflops",
                          {d.value for d in DType} | {"bf16_fp16"})
    peaks: dict[DType, float] = {}
    for key in peaks_raw:
        dtype = parse_dtype(key, field=f"peak_dense_tflops.{key}", source=source)
        peaks[dtype] = r.number(peaks_raw, key, "peak_dense_tflops", positive=False) * 1e12
    for required in (DType.FP32, DType.BF16):
        if required not in peaks:
            raise SpecError(f"peak_dense_tflops.{required}", "missing", source=source)
    memory = r.mapping(top.get("memory"), "memory", {"capacity_gib", "bandwidth_gb_per_s", "l2_bandwidth_gb_per_s", "type"})
    inter = r.mapping(top.get("interconnect"), "interconnect",
                      {"intra_node", "pcie", "inter_node", "pair_bridge", "topology"})
    node = r.mapping(top.get("node", {}), "node", {"gpus_per_node", "network", "host_op_us"})
    kind = r.text(top, "kind")
    if kind not in ("gpu", "cpu"):
        raise SpecError("kind", f"must be 'gpu' or 'cpu', got {kind!r}", source=source)
    sources = top.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise SpecError("sources", "expected a list of strings", source=source)
    clocks = r.mapping(top.get("clocks", {}), "clocks", set(CLOCK_KEYS))
    texts = _texts({"memory.type": memory.get("type", ""), "node.network": node.get("network", ""),
                    "notes": top.get("notes", "")}, source)
    return HardwareSpec(
        name=r.text(top, "name"),
        vendor=r.text(top, "vendor"),
        kind=kind,
        architecture=_architecture(top.get("architecture", Architecture.UNKNOWN.value), source),
        peak_flops_fp32=peaks[DType.FP32],
        peak_flops_tf32=peaks.get(DType.TF32, peaks[DType.FP32]),
        peak_flops_bf16=peaks[DType.BF16],
        peak_flops_fp16=peaks.get(DType.FP16, peaks[DType.BF16]),
        peak_flops_fp8=peaks.get(DType.FP8, 0.0),
        peak_flops_int8=peaks.get(DType.INT8, 0.0),
        peak_flops_fp4=peaks.get(DType.FP4, 0.0),
        memory_bytes=r.number(memory, "capacity_gib", "memory") * GIB,
        memory_bw_bytes_per_s=r.number(memory, "bandwidth_gb_per_s", "memory") * GB,
        compute_units=int(r.number(top, "compute_units", "")),
        l2_bytes=r.number(top, "l2_mb", "") * MB,
        l2_bw_bytes_per_s=r.number(memory, "l2_bandwidth_gb_per_s", "memory", default=0.0) * GB,
        intra_node=_link(r, inter.get("intra_node"), "interconnect.intra_node"),
        pcie=_link(r, inter.get("pcie"), "interconnect.pcie"),
        inter_node=_link(r, inter.get("inter_node"), "interconnect.inter_node"),
        pair_bridge=(_link(r, inter["pair_bridge"], "interconnect.pair_bridge")
                     if "pair_bridge" in inter else None),
        topology=topology_from_dict(inter.get("topology"), source),
        gpus_per_node=int(r.number(node, "gpus_per_node", "node", default=1.0)),
        efficiency=_efficiency(r, top.get("efficiency"), source),
        sources=tuple(sources),
        memory_type=texts["memory.type"],
        network=texts["node.network"],
        host_op_s=r.number(node, "host_op_us", "node", default=0.0, positive=False) * US,
        **clock_fields(lambda key: r.number(clocks, key, "clocks", default=0.0)),
        notes=texts["notes"],
    )


def _human(value: float) -> float | int:
    """A file value from SI: 12 significant figures undo the unit conversion's float noise."""
    rounded = float(f"{value:.12g}")
    return int(rounded) if rounded.is_integer() else rounded


def hardware_to_dict(hw: HardwareSpec) -> dict[str, Any]:
    """``hw`` in the file schema of ``datasets/hardware/*.yaml`` (human units);
    `hardware_from_dict` of the result equals ``hw``."""
    peaks = {DType.FP32: hw.peak_flops_fp32, DType.TF32: hw.peak_flops_tf32,
             DType.BF16: hw.peak_flops_bf16, DType.FP16: hw.peak_flops_fp16,
             DType.FP8: hw.peak_flops_fp8, DType.INT8: hw.peak_flops_int8,
             DType.FP4: hw.peak_flops_fp4}

    def link(x: Link) -> dict[str, Any]:
        out = {"name": x.name, "bandwidth_gb_per_s": _human(x.bandwidth_bytes_per_s / GB),
               "latency_us": _human(x.latency_s / US)}
        return out if x.fabric == LinkFabric.UNKNOWN else {**out, "fabric": x.fabric.value}

    data: dict[str, Any] = {
        "name": hw.name, "vendor": hw.vendor, "kind": hw.kind,
        "architecture": hw.architecture.value, "sources": list(hw.sources),
        "peak_dense_tflops": {str(d): _human(v / 1e12) for d, v in peaks.items()
                              if v > 0 or d in (DType.FP32, DType.BF16)},
        "memory": {"capacity_gib": _human(hw.memory_bytes / GIB),
                   "bandwidth_gb_per_s": _human(hw.memory_bw_bytes_per_s / GB)},
        "compute_units": hw.compute_units, "l2_mb": _human(hw.l2_bytes / MB),
        "interconnect": {"intra_node": link(hw.intra_node), "pcie": link(hw.pcie),
                         "inter_node": link(hw.inter_node)},
        "node": {"gpus_per_node": hw.gpus_per_node},
        "efficiency": {f: getattr(hw.efficiency, f) for f in
                       ("gemm", "attention", "memory", "intra_node", "inter_node")},
    }
    if hw.architecture == Architecture.UNKNOWN:
        del data["architecture"]
    if hw.pair_bridge is not None:
        data["interconnect"]["pair_bridge"] = link(hw.pair_bridge)
    if hw.topology is not None:
        data["interconnect"]["topology"] = topology_to_dict(hw.topology)
    data["efficiency"] |= {k: getattr(hw.efficiency, k) for k in _LOW_GEMM
                           if getattr(hw.efficiency, k)}
    data["efficiency"] |= {k: getattr(hw.efficiency, k) for k in _SUSTAINED
                           if getattr(hw.efficiency, k) != 1.0}
    if hw.efficiency.kernel_latency_s:
        data["efficiency"]["kernel_latency_us"] = _human(hw.efficiency.kernel_latency_s / US)
    if hw.l2_bw_bytes_per_s:
        data["memory"]["l2_bandwidth_gb_per_s"] = _human(hw.l2_bw_bytes_per_s / GB)
    if hw.memory_type:
        data["memory"]["type"] = hw.memory_type
    if hw.network:
        data["node"]["network"] = hw.network
    if hw.host_op_s:
        data["node"]["host_op_us"] = _human(hw.host_op_s / US)
    if clocks := clocks_block(hw, _human):
        data["clocks"] = clocks
    if hw.notes:
        data["notes"] = hw.notes
    return data


def hardware_dirs() -> tuple[Path, ...]:
    """Catalog folders, first match wins: ``$LLMSIM_HARDWARE_PATH`` entries (os.pathsep-
    separated), then calibrated files in ``$LLMSIM_HOME/hardware``, then the shipped catalog."""
    extra = [Path(p) for p in os.environ.get("LLMSIM_HARDWARE_PATH", "").split(os.pathsep) if p]
    return (*extra, user_hardware_dir(), HARDWARE_DIR)


def hardware_names() -> list[str]:
    """All catalog names, sorted."""
    names = {p.stem for d in hardware_dirs() if d.is_dir() for p in d.glob("*.yaml")}
    return sorted(names)


def load_hardware_file(path: str | Path) -> HardwareSpec:
    """Load one hardware YAML; errors name the file and the field."""
    data = load_yaml(path, "hardware")
    return hardware_from_dict(data, source=show_path(path))


def hardware_file(name: str) -> Path | None:
    """The file a catalog name resolves to (first of `hardware_dirs`), or None."""
    return next((p for d in hardware_dirs() if (p := d / f"{name}.yaml").is_file()), None)


@functools.cache
def get_hardware(name: str) -> HardwareSpec:
    """Catalog lookup by exact name, or a path to a YAML file; raises UnknownNameError."""
    if not isinstance(name, str):
        raise SpecError("hardware.gpu", f"expected a name, got {name!r}")
    check_path(name, "hardware.gpu")
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        return load_hardware_file(name)
    path = hardware_file(name)
    if path is None:
        raise UnknownNameError("GPU", name, hardware_names())
    return load_hardware_file(path)
