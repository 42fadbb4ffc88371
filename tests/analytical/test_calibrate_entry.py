# SPDX-License-Identifier: Apache-2.0
"""`analytical.calibrate.hardware_entry`: a measurement (made up here; `profiler.calibrate`
measures real ones) becomes a loadable catalog entry, with or without a reference."""

from __future__ import annotations

import pytest

from analytical.calibrate import Measurement, hardware_entry
from analytical.hardware import GB, GIB, get_hardware, hardware_from_dict


def _cpu(**over: object) -> Measurement:
    fields: dict[str, object] = {
        "device": "cpu", "device_name": "Made-up CPU 9000", "vendor": "made-up",
        "gemm_flops_per_s": {"fp32": 2.0e11, "bf16": 1.0e11},
        "gemm_sizes": {"fp32": 1024, "bf16": 512},
        "memory_bw_bytes_per_s": 20 * GB, "memory_capacity_bytes": 16 * GIB,
        "compute_units": 8, "l2_bytes": 4e6,
        "memory_detail": {"copy": 18 * GB, "add": 20 * GB, "bytes": 64 * 2**20},
        "host_link_bw_bytes_per_s": 3 * GB, "host_link_latency_s": 12e-6,
        "skipped": {"fp16": "too slow"}, "measured_at": "2026-01-01T00:00:00Z",
        "software": "torch 0.0", "budget_s": 1.0}
    fields.update(over)
    return Measurement(**fields)  # type: ignore[arg-type]


def test_without_reference_the_peaks_are_the_measured_rates():
    data = hardware_entry(_cpu(), name="mine")
    hw = hardware_from_dict(data)
    assert hw.name == "mine" and hw.kind == "cpu" and hw.vendor == "made-up"
    assert hw.peak_flops_fp32 == pytest.approx(2.0e11) and hw.peak_flops_fp16 == hw.peak_flops_bf16
    assert hw.memory_bw_bytes_per_s == pytest.approx(20 * GB)
    assert hw.intra_node.bandwidth_bytes_per_s == pytest.approx(3 * GB)
    assert hw.intra_node.latency_s == pytest.approx(12e-6)
    assert hw.efficiency.gemm == 1.0 and hw.compute_units == 8
    assert "Skipped fp16: too slow." in data["notes"] and "torch 0.0" in data["notes"]


def test_undetected_l2_is_set_and_said():
    data = hardware_entry(_cpu(l2_bytes=0.0), name="mine")
    assert data["l2_mb"] == 1.0 and "L2 size not detected" in data["notes"]


def test_reference_keeps_its_peaks_and_caps_efficiency_at_one():
    ref = get_hardware("h100-sxm")
    half = _cpu(gemm_flops_per_s={"fp32": 1e12, "bf16": ref.peak_flops_bf16 / 2},
                memory_bw_bytes_per_s=ref.memory_bw_bytes_per_s * 2)
    data = hardware_entry(half, name="h100-here", reference="h100-sxm")
    hw = hardware_from_dict(data)
    assert hw.peak_flops_bf16 == ref.peak_flops_bf16 and hw.inter_node == ref.inter_node
    assert hw.efficiency.gemm == 0.5 and hw.efficiency.memory == 1.0
    assert hw.efficiency.attention == ref.efficiency.attention
    assert "capped at 1.0" in data["notes"] and data["sources"][:-1] == list(ref.sources)
