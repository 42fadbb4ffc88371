# SPDX-License-Identifier: Apache-2.0
"""Closed choices of a hardware file: the chip generation and the physical kind of a link
(`analytical.hardware` reads them; re-exported there)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Architecture", "LinkFabric"]


class Architecture(StrEnum):
    """The chip generation, for effects a kernel library switches on by generation (e.g. the
    Hopper-only FlashAttention-3 / cuDNN numbers in `simulate.efficiency`), not by part name:
    NVIDIA's generations as on https://developer.nvidia.com/cuda-gpus (Ampere: compute
    capability 8.0/8.6, Ada Lovelace 8.9, Hopper 9.0, Blackwell 10.x/12.0), AMD's CDNA
    generations. ``unknown`` for a file that does not say (a calibrated device without a
    reference)."""

    AMPERE = "ampere"
    ADA_LOVELACE = "ada-lovelace"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"
    CDNA3 = "cdna3"
    CDNA4 = "cdna4"
    X86_64 = "x86-64"
    UNKNOWN = "unknown"


class LinkFabric(StrEnum):
    """What a link is physically, as NCCL's tuning model tells links apart (its NVLINK, PCI
    and NET latency classes, NVIDIA/nccl src/graph/tuning.cc ``hwLatencies``): ``nvlink``
    (NVLink, NVSwitch, an NVLink bridge; AMD's xGMI counts as ``xgmi``), ``pcie`` (GPU to
    GPU through PCIe switches or the host), ``network`` (NIC, TCP). ``unknown`` where a file
    does not say."""

    NVLINK = "nvlink"
    XGMI = "xgmi"
    PCIE = "pcie"
    NETWORK = "network"
    UNKNOWN = "unknown"
