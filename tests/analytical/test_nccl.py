# SPDX-License-Identifier: Apache-2.0
"""`analytical.nccl` against NCCL's own numbers (NVIDIA/nccl src/graph/tuning.cc, topo.h at
5067397) and against nccl-tests bus bandwidths of the catalog's GPUs."""

from __future__ import annotations

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.nccl import (
    NcclAlgorithm,
    NcclProtocol,
    NcclTransport,
    graph_bandwidth,
    intra_transport,
    nccl_candidates,
    nccl_choice,
    ring_channels,
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


@pytest.mark.parametrize(("gpu", "channels", "gbps"), [
    ("a100-sxm-80gb", 12, 20.0), ("h100-sxm", 12, 30.0), ("b200", 16, 45.0),
    ("l40s", 2, 12.0), ("h100-nvl", 2, 24.0)])
def test_ring_graph_is_nccls_search(gpu: str, channels: int, gbps: float) -> None:
    """search.cc: the fastest speed whose channels fill the link (topo.h SM80/SM90/SM100_NVLINK_BW
    x 12/18/18 NVLinks: 240, 370.8, 721.8 GB/s; PCIe Gen4/Gen5 x16: 24, 48), channels doubled
    at half the speed above 25 GB/s: H100 6 x 60 -> 12 x 30 = 360 GB/s, not all of 370.8."""
    spec = _spec(CK.ALL_REDUCE, 1 << 30, 4)
    graph = ring_channels(spec, get_hardware(gpu))
    assert graph is not None
    assert (graph.n_channels, graph.bw_intra) == (channels, pytest.approx(gbps))
    assert graph_bandwidth(spec, get_hardware(gpu)) == pytest.approx(channels * gbps * 1e9)


def test_nvls_where_the_switches_reduce_the_type() -> None:
    """H100 SXM, 8 GPUs: NVLS (8 x 40 GB/s, bwInter 60; 2.29's 40 x 0.85 x 7/8 x 2 = 59.5 per
    channel) beats the ring's 360 GB/s for fp16 (the store's aiconfigurator tables: 405 GB/s
    bus bandwidth for fp16, 326 for int8), not for int8, which the switches cannot reduce; on 4
    GPUs its 4 x 60 GB/s loses to the ring (measured fp16 327, int8 321)."""
    hw = get_hardware("h100-sxm")
    big = 1 << 29
    fp16 = nccl_choice(CollectiveSpec(kind=CK.ALL_REDUCE, size_bytes=big, group_size=8,
                                      ranks_per_node=8, dtype=DType.FP16), hw)
    assert fp16.algorithm == NcclAlgorithm.NVLS
    assert fp16.bus_bw_bytes_per_s == pytest.approx(8 * 59.5e9)
    int8 = nccl_choice(CollectiveSpec(kind=CK.ALL_REDUCE, size_bytes=big, group_size=8,
                                      ranks_per_node=8, dtype=DType.INT8), hw)
    assert int8.algorithm == NcclAlgorithm.RING
    four = nccl_choice(CollectiveSpec(kind=CK.ALL_REDUCE, size_bytes=big, group_size=4,
                                      ranks_per_node=4, dtype=DType.FP16), hw)
    assert four.algorithm == NcclAlgorithm.RING
    assert NcclAlgorithm.NVLS not in {c.algorithm for c in nccl_candidates(
        _spec(CK.ALL_REDUCE, big, 8), get_hardware("a100-sxm-80gb"))}


def test_ll128_capped_per_channel_on_blackwell() -> None:
    """perChMaxRingLL128Bws Blackwell one node 34.5 GB/s x 16 channels = 552 < 0.92 x 720."""
    ll128 = next(c for c in nccl_candidates(_spec(CK.ALL_GATHER, 1 << 20, 8), get_hardware("b200"))
                 if c.protocol == NcclProtocol.LL128 and c.algorithm == NcclAlgorithm.RING)
    assert ll128.bus_bw_bytes_per_s == pytest.approx(16 * 34.5e9)


def test_ll128_only_over_nvlink_and_tree_only_for_all_reduce() -> None:
    pcie = {c.protocol for c in nccl_candidates(_spec(CK.ALL_REDUCE, 1 << 20, 8),
                                                get_hardware("l40s"))}
    assert NcclProtocol.LL128 not in pcie
    algos = {c.algorithm for c in nccl_candidates(_spec(CK.ALL_GATHER, 1 << 20, 8),
                                                  get_hardware("h100-sxm"))}
    assert NcclAlgorithm.TREE not in algos


def test_ll_bandwidth_capped_by_ll_max_bw() -> None:
    """llMaxBws: Hopper one node 141 GB/s (LL halves 360 GB/s to 180, then the cap)."""
    ll = next(c for c in nccl_candidates(_spec(CK.ALL_GATHER, 1 << 20, 8),
                                         get_hardware("h100-sxm"))
              if c.protocol == NcclProtocol.LL)
    assert ll.bus_bw_bytes_per_s == pytest.approx(141e9)


@pytest.mark.parametrize(("gpu", "measured_gbps"), [("a100-sxm-80gb", 200.9),
                                                    ("h100-sxm", 326.1), ("b200", 590.7)])
def test_large_all_reduce_within_20_percent_of_nccl_tests(gpu: str, measured_gbps: float) -> None:
    """8-GPU all_reduce bus bandwidth, messages >= 32 MiB: median of aiconfigurator 0.12.0's
    nccl-tests tables (NCCL 2.27.3; H100's int8 rows, which NVLS cannot reduce)."""
    spec = CollectiveSpec(kind=CK.ALL_REDUCE, size_bytes=1 << 28, group_size=8,
                          ranks_per_node=8, dtype=DType.INT8)
    best = nccl_choice(spec, get_hardware(gpu))
    assert spec.bytes / best.seconds / 1e9 == pytest.approx(measured_gbps, rel=0.2)


def test_ring_plateau_and_network_latency_across_nodes() -> None:
    hw = get_hardware("h100-sxm")
    spec = _spec(CK.ALL_REDUCE, 1 << 30, 16, 8)
    ring = nccl_choice(spec, hw, NcclAlgorithm.RING)
    assert ring.protocol == NcclProtocol.SIMPLE
    # 2 inter steps x NET 14 us + 28 x max(NVLINK 3.4, 3 x net overhead 1.0), x 1.4 plateau
    assert ring.latency_s == pytest.approx((8.4 + 28 * 3.4 + 2 * 14.0) * 1.4e-6)
    # NCCL's channels over the node's 8 NICs of 50 GB/s, capped by NVLink's 12 x 30 GB/s graph
    assert graph_bandwidth(spec, hw) == pytest.approx(360e9)
    assert graph_bandwidth(_spec(CK.ALL_REDUCE, 1 << 26, 8, 2), hw) == pytest.approx(100e9)


def test_bridged_pair_runs_on_its_bridge_and_pcie_has_no_ll128() -> None:
    """A 2-GPU group of H100 NVL runs on its NVLink bridge (12 x 20.6 GB/s, searched as 8
    channels x 30), four GPUs on PCIe Gen5 (NCCL's 48 GB/s for x16 Gen5, 2 x 24)."""
    nvl = get_hardware("h100-nvl")
    pair = _spec(CK.ALL_REDUCE, 1 << 30, 2)
    assert graph_bandwidth(pair, nvl) == pytest.approx(240e9)
    four = _spec(CK.ALL_REDUCE, 1 << 30, 4)
    assert graph_bandwidth(four, nvl) == pytest.approx(48e9)
    tiny = _spec(CK.ALL_REDUCE, 8, 8)
    # PCIe: LL 6.6 us + 14 x hwLatencies[PCI][Ring][LL] 1.0 us
    assert nccl_choice(tiny, get_hardware("l40s")).latency_s == pytest.approx(20.6e-6)


@pytest.mark.parametrize(("gpu", "n", "transport"), [
    ("h100-sxm", 8, NcclTransport.NVLINK), ("a100-pcie-80gb", 2, NcclTransport.NVLINK),
    ("a100-pcie-80gb", 4, NcclTransport.PCIE_P2P), ("l40s", 4, NcclTransport.SHM),
    ("a40", 4, NcclTransport.SHM), ("a10", 4, NcclTransport.PCIE_P2P)])
def test_intra_transport_follows_the_topologys_p2p(gpu: str, n: int,
                                                    transport: NcclTransport) -> None:
    """NVLink where the group's path is NVLink (a bridged pair too), SHM where the topology
    says the GPUs reach each other only through the CPU (``pcie_p2p: false``), PCIe P2P
    otherwise (a10: `pcie_p2p: true`, NCCL's default, as before it had a topology)."""
    assert intra_transport(_spec(CK.ALL_REDUCE, 1 << 20, n), get_hardware(gpu)) == transport
    assert intra_transport(_spec(CK.SEND_RECV, 1 << 20, 2, 1), get_hardware(gpu)) is None
