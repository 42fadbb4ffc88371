# SPDX-License-Identifier: Apache-2.0
"""Collective alpha-beta model: ring volumes, algorithm choice, latency vs bandwidth regimes."""

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


def _hw(*, intra_us: float, inter_us: float, intra_eff: float = 1.0,
        inter_eff: float = 1.0) -> HardwareSpec:
    return hardware_from_dict({
        "name": "h100-comm-test", "vendor": "nvidia", "kind": "gpu",
        "peak_dense_tflops": {"fp32": 67, "bf16": 989},
        "memory": {"capacity_gib": 80, "bandwidth_gb_per_s": 3350},
        "compute_units": 132, "l2_mb": 50,
        "interconnect": {
            "intra_node": {"bandwidth_gb_per_s": NVLINK / 1e9, "latency_us": intra_us},
            "pcie": {"bandwidth_gb_per_s": 64, "latency_us": 5},
            "inter_node": {"bandwidth_gb_per_s": NIC / 1e9, "latency_us": inter_us},
        },
        "node": {"gpus_per_node": 8},
        "efficiency": {"gemm": 1, "attention": 1, "memory": 1, "intra_node": intra_eff,
                       "inter_node": inter_eff},
    })


# hardware_from_dict requires latency > 0, so "zero latency" is a femtosecond: 1e-9 us.
NO_LATENCY = _hw(intra_us=1e-9, inter_us=1e-9)
REAL = _hw(intra_us=3.0, inter_us=10.0)


def _spec(kind: CK, size: int, n: int, local: int) -> CollectiveSpec:
    return CollectiveSpec(kind=kind, size_bytes=size, group_size=n, ranks_per_node=local)


@pytest.mark.parametrize("n", [2, 8])
def test_ring_all_reduce_volume_in_node(n: int) -> None:
    size = GIB
    t = collective_time(_spec(CK.ALL_REDUCE, size, n, n), NO_LATENCY, "ring")
    volume = 2 * (n - 1) / n * size  # n=2: S; n=8: 1.75 S
    assert t == pytest.approx(volume / NVLINK, rel=1e-9)
    assert volume == {2: size, 8: 1.75 * size}[n]


def test_ring_all_reduce_alpha_term() -> None:
    t = collective_time(_spec(CK.ALL_REDUCE, GIB, 8, 8), REAL, "ring")
    assert t == pytest.approx(2 * 7 * 3e-6 + 1.75 * GIB / NVLINK, rel=1e-12)


def test_all_gather_and_reduce_scatter_n8() -> None:
    for kind in (CK.ALL_GATHER, CK.REDUCE_SCATTER):
        t = collective_time(_spec(kind, GIB, 8, 8), REAL, "ring")
        assert t == pytest.approx(7 * 3e-6 + 7 / 8 * GIB / NVLINK, rel=1e-12)


def test_efficiency_scales_bandwidth() -> None:
    derated = _hw(intra_us=1e-9, inter_us=1e-9, intra_eff=0.8)
    t = collective_time(_spec(CK.ALL_GATHER, GIB, 8, 8), derated, "ring")
    assert t == pytest.approx(7 / 8 * GIB / (0.8 * NVLINK), rel=1e-9)


def test_flat_ring_across_nodes_is_bounded_by_the_nic() -> None:
    t = collective_time(_spec(CK.ALL_REDUCE, GIB, 32, 8), NO_LATENCY, "ring")
    assert t == pytest.approx(2 * 31 / 32 * GIB / NIC, rel=1e-9)


def test_hierarchical_beats_flat_ring_across_4_nodes_of_8() -> None:
    spec = _spec(CK.ALL_REDUCE, GIB, 32, 8)
    flat = collective_time(spec, REAL, "ring")
    hier = collective_time(spec, REAL, "hierarchical")
    # Closed form: 2 x intra RS/AG (7 alpha_i + 7/8 S/NVLink) + inter ring over S/8 on 4 nodes.
    expected = 2 * (7 * 3e-6 + 7 / 8 * GIB / NVLINK) + (6 * 10e-6 + 1.5 * GIB / 8 / NIC)
    assert hier == pytest.approx(expected, rel=1e-12)
    assert hier < flat / 4
    est = collective_estimate(spec, REAL)
    assert est.algorithm == "hierarchical"
    assert {name for name, _ in est.candidates} == {"ring", "tree", "hierarchical"}


def test_latency_dominates_at_1kib_and_tree_wins_there() -> None:
    spec = _spec(CK.ALL_REDUCE, 1024, 32, 8)
    ring = collective_time(spec, REAL, "ring")
    latency_part = 2 * 31 * 10e-6
    assert latency_part / ring > 0.99
    tree = collective_time(spec, REAL, "tree")
    assert tree == pytest.approx(2 * 5 * 10e-6 + 2 * 1024 / NIC, rel=1e-12)
    assert collective_estimate(spec, REAL).algorithm == "tree"
    # Large messages: the ring's 2(n-1)/n beats the tree's 2 inside one node.
    big = _spec(CK.ALL_REDUCE, GIB, 8, 8)
    assert collective_estimate(big, REAL).algorithm == "ring"


def test_all_to_all_in_node_and_across_nodes() -> None:
    t = collective_time(_spec(CK.ALL_TO_ALL, GIB, 8, 8), REAL)
    assert t == pytest.approx(7 * 3e-6 + 7 / 8 * GIB / NVLINK, rel=1e-12)
    # 16 ranks on 2 nodes: 8/16 of the buffer crosses the NIC, 7/16 stays on NVLink.
    t = collective_time(_spec(CK.ALL_TO_ALL, GIB, 16, 8), NO_LATENCY)
    assert t == pytest.approx(8 / 16 * GIB / NIC, rel=1e-6)


def test_broadcast_send_recv_and_p2p() -> None:
    t = collective_time(_spec(CK.BROADCAST, GIB, 8, 8), REAL)
    assert t == pytest.approx(7 * 3e-6 + GIB / NVLINK, rel=1e-12)
    same = collective_time(_spec(CK.SEND_RECV, GIB, 2, 2), REAL)
    other = collective_time(_spec(CK.SEND_RECV, GIB, 2, 1), REAL)
    assert same == pytest.approx(p2p_time(GIB, REAL, same_node=True))
    assert same == pytest.approx(3e-6 + GIB / NVLINK)
    assert other == pytest.approx(10e-6 + GIB / NIC)


def test_single_rank_costs_nothing() -> None:
    for kind in (CK.ALL_REDUCE, CK.ALL_GATHER, CK.ALL_TO_ALL, CK.BROADCAST):
        assert collective_time(_spec(kind, GIB, 1, 1), REAL) == 0.0


def test_every_kind_has_an_algorithm() -> None:
    for kind in CK:
        n, local = (2, 2) if kind == CK.SEND_RECV else (16, 8)
        assert collective_time(_spec(kind, 1 << 20, n, local), REAL) > 0
    assert set(COLLECTIVE_ALGORITHMS) >= {"ring", "tree", "hierarchical"}


def test_bad_algorithm_names_the_problem() -> None:
    with pytest.raises(UnknownNameError, match="ring"):
        collective_time(_spec(CK.ALL_REDUCE, GIB, 8, 8), REAL, "butterfly")
    with pytest.raises(SpecError) as err:
        collective_time(_spec(CK.ALL_GATHER, GIB, 8, 8), REAL, "tree")
    assert err.value.field == "algorithm"
    with pytest.raises(SpecError, match="size_bytes"):
        p2p_time(-1, REAL, same_node=True)
