# SPDX-License-Identifier: Apache-2.0
"""`analytical.hardware_topology`: the ``interconnect.topology`` block NCCL's model reads."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from analytical.hardware_topology import Topology, topology_from_dict, topology_to_dict


def test_round_trip_and_pcie_bandwidth() -> None:
    t = topology_from_dict({"compute_capability": 90, "nvlink_links": 18, "nvswitch": True,
                            "nvls": True, "pcie_gen": 5}, "x.yaml")
    assert t is not None
    assert topology_from_dict(topology_to_dict(t), "x.yaml") == t
    assert t.pcie_gb_per_s == pytest.approx(48.0)  # kvDictPciGen: 16 x 240 / 80
    assert Topology(compute_capability=89).pcie_gb_per_s == pytest.approx(24.0)
    assert topology_from_dict(None, "x.yaml") is None


@pytest.mark.parametrize(("data", "field"), [
    ({"nvlink_links": 4}, "compute_capability"),
    ({"compute_capability": 85}, "compute_capability"),
    ({"compute_capability": 90, "nvls": "yes"}, "nvls"),
    ({"compute_capability": 90, "pcie_gen": 7}, "pcie_gen"),
    ({"compute_capability": 90, "nvswitches": 4}, "nvswitches"),
])
def test_bad_fields_are_named(data: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        topology_from_dict(data, "x.yaml")
