# SPDX-License-Identifier: Apache-2.0
"""The node topology of a hardware file (``interconnect.topology``): what NCCL's topology
detection reads from a machine (NVIDIA/nccl src/graph/topo.cc, xml.cc) and what its cost model
(`analytical.nccl`) needs beyond the links' bandwidths: the compute capability NCCL keys its
per-link NVLink bandwidth and tuning tables on, the number of NVLinks per GPU, whether they go to
NVSwitches (a ring's channels share one GPU-to-switch link) and whether the switches do NVLink
SHARP multicast (NCCL's NVLS algorithm), the PCIe generation and width (NCCL's PCI link
bandwidth), and whether GPUs reach each other peer-to-peer over PCIe (through switches) or only
through the CPU root complex (P2P off: NCCL's SHM transport over host memory). Optional: a file
without it keeps the link-credit model `analytical.nccl` falls back to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analytical.errors import SpecError

_KEYS = {"compute_capability", "nvlink_links", "nvswitch", "nvls", "pcie_gen", "pcie_lanes",
         "pcie_p2p"}
_COMPUTE_CAPABILITIES = (60, 70, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121)


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """One GPU's place in its node, as NCCL's topology sees it."""

    compute_capability: int  # x10, e.g. 90 for Hopper (NCCL's ``cudaCompCap``)
    nvlink_links: int = 0  # NVLinks per GPU (to NVSwitches, or to its bridged peer)
    nvswitch: bool = False  # the NVLinks go to NVSwitches (all GPUs of the node reachable)
    nvls: bool = False  # NVLink SHARP multicast on the switches (NCCL's NVLS algorithm)
    pcie_gen: int = 4
    pcie_lanes: int = 16
    pcie_p2p: bool = True  # GPU-to-GPU over PCIe switches; False: only through the CPU

    @property
    def pcie_gb_per_s(self) -> float:
        """NCCL's PCI link bandwidth: lanes x rate / 80, the rate in 100 Mb/s per lane
        (``kvDictPciGen``: Gen3 60, Gen4 120, Gen5 240, Gen6 480; x16 Gen4 = 24 GB/s)."""
        rate = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}[self.pcie_gen]
        return self.pcie_lanes * rate / 80.0


def _int(m: Mapping[str, Any], key: str, source: str, allowed: tuple[int, ...]) -> int:
    value = m[key]
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise SpecError(f"interconnect.topology.{key}", f"{value!r}; allowed: "
                        f"{', '.join(map(str, allowed))}", source=source)
    return value


def _bool(m: Mapping[str, Any], key: str, source: str, default: bool) -> bool:
    value = m.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"interconnect.topology.{key}", f"expected true or false, got {value!r}",
                        source=source)
    return value


def topology_from_dict(data: Any, source: str) -> Topology | None:
    """``interconnect.topology`` of a hardware file, None where absent."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise SpecError("interconnect.topology", "expected a mapping", source=source)
    unknown = sorted(set(map(str, data)) - _KEYS)
    if unknown:
        raise SpecError(f"interconnect.topology.{unknown[0]}",
                        f"unknown key; allowed: {', '.join(sorted(_KEYS))}", source=source)
    if "compute_capability" not in data:
        raise SpecError("interconnect.topology.compute_capability", "missing", source=source)
    m = {**data, "nvlink_links": data.get("nvlink_links", 0), "pcie_gen": data.get("pcie_gen", 4),
         "pcie_lanes": data.get("pcie_lanes", 16)}
    return Topology(
        compute_capability=_int(m, "compute_capability", source, _COMPUTE_CAPABILITIES),
        nvlink_links=_int(m, "nvlink_links", source, tuple(range(0, 37))),
        nvswitch=_bool(m, "nvswitch", source, False), nvls=_bool(m, "nvls", source, False),
        pcie_gen=_int(m, "pcie_gen", source, (1, 2, 3, 4, 5, 6)),
        pcie_lanes=_int(m, "pcie_lanes", source, (1, 2, 4, 8, 16)),
        pcie_p2p=_bool(m, "pcie_p2p", source, True))


def topology_to_dict(t: Topology) -> dict[str, Any]:
    """``t`` in the file schema; `topology_from_dict` of the result equals ``t``."""
    return {"compute_capability": t.compute_capability, "nvlink_links": t.nvlink_links,
            "nvswitch": t.nvswitch, "nvls": t.nvls, "pcie_gen": t.pcie_gen,
            "pcie_lanes": t.pcie_lanes, "pcie_p2p": t.pcie_p2p}
