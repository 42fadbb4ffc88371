# SPDX-License-Identifier: Apache-2.0
"""Collective pricing in `analytical.comm`: NCCL's model (`analytical.nccl`) behind the
algorithm names, all_to_all across nodes, point-to-point messages."""

from __future__ import annotations

import pytest

from analytical.comm import (
    COLLECTIVE_ALGORITHMS,
    collective_estimate,
    collective_time,
    p2p_time,
)
from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import HardwareSpec, hardware_from_dict
from analytical.ops import CollectiveKind, CollectiveSpec

CK = CollectiveKind
GIB = 2**30
NVLINK = 450e9  # bytes/s per GPU per direction (H100 SXM NVLink4)
NIC = 50e9  # bytes/s per GPU (8 x 400 Gb/s per node)
HOPPER_CREDIT = 20.6 / 25.0  # NVIDIA/nccl src/graph/topo.h SM90_NVLINK_BW per 25 GB/s link


def _hw(*, intra_eff: float = 1.0) -> HardwareSpec:
    return hardware_from_dict({
        "name": "h100-comm-test", "vendor": "nvidia", "kind": "gpu", "architecture": "hopper",
        "peak_dense_tflops": {"fp32": 67, "bf16": 989},
        "memory": {"capacity_gib": 80, "bandwidth_gb_per_s": 3350},
        "compute_units": 132, "l2_mb": 50,
        "interconnect": {
            "intra_node": {"bandwidth_gb_per_s": NVLINK / 1e9, "latency_us": 3,
                           "fabric": "nvlink"},
            "pcie": {"bandwidth_gb_per_s": 64, "latency_us": 5},
            "inter_node": {"bandwidth_gb_per_s": NIC / 1e9, "latency_us": 10},
        },
        "node": {"gpus_per_node": 8},
        "efficiency": {"gemm": 1, "attention": 1, "memory": 1, "intra_node": intra_eff,
                       "inter_node": 1},
    })


HW = _hw()


def _spec(kind: CK, size: int, n: int, local: int) -> CollectiveSpec:
    return CollectiveSpec(kind=kind, size_bytes=size, group_size=n, ranks_per_node=local)


def test_large_all_reduce_in_node_is_the_simple_ring_at_nccls_link_credit() -> None:
    est = collective_estimate(_spec(CK.ALL_REDUCE, GIB, 8, 8), HW)
    assert est.algorithm == "ring/Simple"
    # tuning.cc: baseLatencies[Ring][Simple] 8.4 us + 14 steps x hwLatencies[NVLINK] 3.4 us
    expected = (8.4 + 14 * 3.4) * 1e-6 + 1.75 * GIB / (NVLINK * HOPPER_CREDIT)
    assert est.latency_s == pytest.approx(expected, rel=1e-9)


def test_efficiency_factors_do_not_move_a_collective() -> None:
    """NCCL's model prices the link as its topology credits it, not the YAML's guess."""
    spec = _spec(CK.ALL_GATHER, GIB, 8, 8)
    assert collective_time(spec, _hw(intra_eff=0.5)) == collective_time(spec, HW)


def test_small_all_reduce_across_many_nodes_picks_the_tree() -> None:
    spec = _spec(CK.ALL_REDUCE, 4096, 128, 8)
    est = collective_estimate(spec, HW)
    assert est.algorithm.startswith("tree/")
    assert collective_time(spec, HW, "tree") < collective_time(spec, HW, "ring")


def test_all_to_all_across_nodes_is_bounded_by_the_network_share() -> None:
    # 16 ranks on 2 nodes: 8/16 of the buffer crosses the NIC, 7/16 stays on NVLink.
    t = collective_time(_spec(CK.ALL_TO_ALL, GIB, 16, 8), HW)
    wire = 8 / 16 * GIB / NIC
    assert wire < t < wire * 1.01


def test_send_recv_and_p2p() -> None:
    same = collective_time(_spec(CK.SEND_RECV, GIB, 2, 2), HW)
    other = collective_time(_spec(CK.SEND_RECV, GIB, 2, 1), HW)
    # NVLink send/recv at the path's own bandwidth: NCCL gives a peer two channels per NVLink
    assert same == pytest.approx((8.4 + 3.4) * 1e-6 + GIB / NVLINK)
    assert other == pytest.approx((8.4 + 14.0) * 1e-6 + GIB / NIC)
    assert p2p_time(GIB, HW, same_node=True) == pytest.approx(3e-6 + GIB / NVLINK)


def test_single_rank_costs_nothing() -> None:
    for kind in (CK.ALL_REDUCE, CK.ALL_GATHER, CK.ALL_TO_ALL, CK.BROADCAST):
        assert collective_time(_spec(kind, GIB, 1, 1), HW) == 0.0


def test_every_kind_has_a_price() -> None:
    for kind in CK:
        n, local = (2, 2) if kind == CK.SEND_RECV else (16, 8)
        assert collective_time(_spec(kind, 1 << 20, n, local), HW) > 0
    assert set(COLLECTIVE_ALGORITHMS) == {"ring", "tree", "nvls"}


def test_bad_algorithm_names_the_problem() -> None:
    with pytest.raises(UnknownNameError, match="ring"):
        collective_time(_spec(CK.ALL_REDUCE, GIB, 8, 8), HW, "butterfly")
    with pytest.raises(SpecError) as err:
        collective_time(_spec(CK.ALL_GATHER, GIB, 8, 8), HW, "tree")
    assert err.value.field == "algorithm"
    with pytest.raises(SpecError, match="size_bytes"):
        p2p_time(-1, HW, same_node=True)
