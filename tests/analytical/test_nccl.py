# SPDX-License-Identifier: Apache-2.0
"""`analytical.nccl` against NCCL's own numbers (NVIDIA/nccl src/graph/tuning.cc, topo.h at
5067397) and against nccl-tests bus bandwidths of the catalog's GPUs."""

from __future__ import annotations

import pytest

from analytical.hardware import get_hardware
from analytical.nccl import (
    NcclAlgorithm,
    NcclProtocol,
    graph_bandwidth,
    nccl_candidates,
    nccl_choice,
)
from analytical.ops import CollectiveKind, CollectiveSpec

CK = CollectiveKind


def _spec(kind: CK, size: int, n: int, local: int | None = None) -> CollectiveSpec:
    return CollectiveSpec(kind=kind, size_bytes=size, group_size=n,
                          ranks_per_node=n if local is None else local)


def test_small_ring_latency_is_base_plus_hops() -> None:
    # 8-GPU NVLink all_reduce, 8 B: baseLatencies[Ring][LL] 6.6 + 14 x hwLatencies[NVLINK] 0.6
    best = nccl_choice(_spec(CK.ALL_REDUCE, 8, 8), get_hardware("h100-sxm"))
    assert (best.algorithm, best.protocol) == (NcclAlgorithm.RING, NcclProtocol.LL)
    assert best.latency_s == pytest.approx(15.0e-6)


@pytest.mark.parametrize(("gpu", "gbps"), [("a100-sxm-80gb", 12 * 20.0),
                                           ("h100-sxm", 18 * 20.6), ("b200", 18 * 40.1)])
def test_nvlink_bus_bandwidth_is_nccls_per_link_figure(gpu: str, gbps: float) -> None:
    """topo.h SM80/SM90/SM100_NVLINK_BW x the NVLink count (12, 18, 18)."""
    bw = graph_bandwidth(_spec(CK.ALL_REDUCE, 1 << 30, 8), get_hardware(gpu))
    assert bw == pytest.approx(gbps * 1e9, rel=1e-3)


def test_ll128_only_over_nvlink_and_tree_only_for_all_reduce() -> None:
    pcie = {c.protocol for c in nccl_candidates(_spec(CK.ALL_REDUCE, 1 << 20, 8),
                                                get_hardware("l40s"))}
    assert NcclProtocol.LL128 not in pcie
    algos = {c.algorithm for c in nccl_candidates(_spec(CK.ALL_GATHER, 1 << 20, 8),
                                                  get_hardware("h100-sxm"))}
    assert algos == {NcclAlgorithm.RING}


def test_ll_bandwidth_capped_by_ll_max_bw() -> None:
    """llMaxBws: Hopper one node 141 GB/s (LL halves 370.8 GB/s to 185.4, then the cap)."""
    ll = next(c for c in nccl_candidates(_spec(CK.ALL_GATHER, 1 << 20, 8),
                                         get_hardware("h100-sxm"))
              if c.protocol == NcclProtocol.LL)
    assert ll.bus_bw_bytes_per_s == pytest.approx(141e9)


@pytest.mark.parametrize(("gpu", "measured_gbps"), [("a100-sxm-80gb", 200.9),
                                                    ("h100-sxm", 326.1), ("b200", 590.7)])
def test_large_all_reduce_within_20_percent_of_nccl_tests(gpu: str, measured_gbps: float) -> None:
    """8-GPU all_reduce bus bandwidth, messages >= 32 MiB: median of aiconfigurator 0.12.0's
    nccl-tests tables (NCCL 2.27.3; H100's int8 rows, which NVLS cannot reduce)."""
    spec = _spec(CK.ALL_REDUCE, 1 << 28, 8)
    best = nccl_choice(spec, get_hardware(gpu))
    assert spec.bytes / best.seconds / 1e9 == pytest.approx(measured_gbps, rel=0.2)


def test_ring_plateau_and_network_latency_across_nodes() -> None:
    hw = get_hardware("h100-sxm")
    spec = _spec(CK.ALL_REDUCE, 1 << 30, 16, 8)
    ring = nccl_choice(spec, hw, NcclAlgorithm.RING)
    assert ring.protocol == NcclProtocol.SIMPLE
    # 2 inter steps x NET 14 us + 28 x max(NVLINK 3.4, 3 x net overhead 1.0), x 1.4 plateau
    assert ring.latency_s == pytest.approx((8.4 + 28 * 3.4 + 2 * 14.0) * 1.4e-6)
    # NCCL's channels over the node's 8 NICs of 50 GB/s, capped by NVLink's 370.8 GB/s
    assert graph_bandwidth(spec, hw) == pytest.approx(18 * 20.6e9)
    assert graph_bandwidth(_spec(CK.ALL_REDUCE, 1 << 26, 8, 2), hw) == pytest.approx(100e9)


def test_bridged_pair_runs_on_its_bridge_and_pcie_has_no_ll128() -> None:
    """A 2-GPU group of H100 NVL runs on its NVLink bridge (300 GB/s per direction x Hopper's
    credit), four GPUs on PCIe Gen5 (64 GB/s x 0.75, NCCL's 48 GB/s for x16 Gen5)."""
    nvl = get_hardware("h100-nvl")
    pair = _spec(CK.ALL_REDUCE, 1 << 30, 2)
    assert graph_bandwidth(pair, nvl) == pytest.approx(300e9 * 20.6 / 25)
    four = _spec(CK.ALL_REDUCE, 1 << 30, 4)
    assert graph_bandwidth(four, nvl) == pytest.approx(48e9)
    tiny = _spec(CK.ALL_REDUCE, 8, 8)
    # PCIe: LL 6.6 us + 14 x hwLatencies[PCI][Ring][LL] 1.0 us
    assert nccl_choice(tiny, get_hardware("l40s")).latency_s == pytest.approx(20.6e-6)
