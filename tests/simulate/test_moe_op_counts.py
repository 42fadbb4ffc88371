# SPDX-License-Identifier: Apache-2.0
"""The routing kernel counts the MoE host floor prices (`simulate.moe_graphs.ROUTING_PARTS`,
`UNFUSED_ROUTER`) are the ones measured from Megatron-Core's own MoE layer
(scripts/count_moe_ops.py, datasets/measurements/llmsim/cpu/moe-op-counts/)."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest

from simulate.moe_graphs import GRAPH_NODES, MEASURED_COUNTS, ROUTING_PARTS, UNFUSED_ROUTER

FUSED = MEASURED_COUNTS / "qwen3-moe-alltoall-permute-fusion.csv"
UNFUSED = MEASURED_COUNTS / "qwen3-moe-alltoall.csv"
COUNTED = {"kernel", "collective", "d2h_copy"}  # views, host-side ops and waits launch nothing


def _parts(path: Path, router_fusion: bool) -> dict[tuple[int, int], dict[str, tuple[int, int]]]:
    """Per (EP, tokens): the model's parts (forward, backward) from the measured rows, less
    the graph's own nodes (`GRAPH_NODES`); the experts are priced from the graph."""
    acc: dict[tuple[int, int], dict[str, list[int]]] = defaultdict(
        lambda: {p: [0, 0] for p in GRAPH_NODES})
    for r in csv.DictReader(path.open()):
        if r["router_fusion"] != str(router_fusion) or r["op_class"] not in COUNTED \
                or r["part"] == "experts":
            continue
        part = "preprocess" if r["op_class"] == "d2h_copy" else r["part"]
        part = part if part in GRAPH_NODES else "permute"
        acc[(int(r["ep"]), int(r["tokens"]))][part][r["pass_"] == "bwd"] += int(r["count"])
    return {k: {p: (f - GRAPH_NODES[p][0], b - GRAPH_NODES[p][1]) for p, (f, b) in v.items()}
            for k, v in acc.items()}


@pytest.mark.parametrize("path", [FUSED, UNFUSED])
def test_the_counts_file_names_its_versions_and_command(path):
    rows = list(csv.DictReader(path.open()))
    assert rows and {r["megatron_core"] for r in rows} == {"0.15.0"}
    assert all(r["torch"].startswith("2.13.0") and "count_moe_ops.py" in r["command"]
               for r in rows)
    assert {int(r["ep"]) for r in rows} == {2, 4, 8}
    assert {int(r["tokens"]) for r in rows} == {4096, 16384}


def test_megatron_core_0_16_issues_the_same_routing_kernels_as_0_15():
    newer = MEASURED_COUNTS / "qwen3-moe-alltoall-permute-fusion-mcore0.16.0-ep2.csv"
    assert {r["megatron_core"] for r in csv.DictReader(newer.open())} == {"0.16.0"}
    for fusion in (True, False):
        assert _parts(newer, fusion)[(2, 4096)] == _parts(FUSED, fusion)[(2, 4096)]


def test_routing_parts_are_the_measured_counts_at_every_ep_and_micro_batch():
    measured = _parts(FUSED, router_fusion=True)
    assert len(measured) == 6
    assert all(m == ROUTING_PARTS for m in measured.values())


def test_the_unfused_router_is_the_measured_one_and_costs_more():
    for path in (FUSED, UNFUSED):
        assert {m["router"] for m in _parts(path, router_fusion=False).values()} == \
            {UNFUSED_ROUTER}
    assert all(u > f for u, f in zip(UNFUSED_ROUTER, ROUTING_PARTS["router"], strict=True))


def test_unfused_permutation_issues_more_kernels_than_te_fusion():
    # permute fusion off (Megatron-Core's default): masked_select / index_select / cat / scatter
    unfused = _parts(UNFUSED, router_fusion=True)
    assert all(m["permute"][0] > ROUTING_PARTS["permute"][0] for m in unfused.values())
