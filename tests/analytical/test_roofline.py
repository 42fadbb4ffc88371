# SPDX-License-Identifier: Apache-2.0
"""Roofline: closed forms (ridge point, compute/memory time), wave quantisation, dtype errors."""

from __future__ import annotations

import math

import pytest

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.hardware import HardwareSpec, hardware_from_dict, hardware_to_dict
from analytical.ops import (
    AttentionSpec,
    CollectiveKind,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MemoryOpKind,
    MoEOpKind,
    MoESpec,
    Phase,
)
from analytical.roofline import (
    Bound,
    gemm_tile_efficiency,
    ridge_point,
    roofline_estimate,
    roofline_time,
)


def _hw(name: str, *, bf16: float, fp8: float, bw: float, sms: int, eff: float = 1.0,
        mem_eff: float = 1.0) -> HardwareSpec:
    """A device from datasheet numbers (TFLOP/s dense, GB/s) with chosen efficiencies."""
    peaks = {"fp32": bf16 / 15, "tf32": bf16 / 2, "bf16": bf16, "fp16": bf16, "fp8": fp8,
             "int8": fp8 or 2 * bf16}
    return hardware_from_dict({
        "name": name, "vendor": "nvidia", "kind": "gpu",
        "peak_dense_tflops": peaks,
        "memory": {"capacity_gib": 80, "bandwidth_gb_per_s": bw},
        "compute_units": sms, "l2_mb": 50,
        "interconnect": {
            "intra_node": {"bandwidth_gb_per_s": 450, "latency_us": 3},
            "pcie": {"bandwidth_gb_per_s": 64, "latency_us": 5},
            "inter_node": {"bandwidth_gb_per_s": 50, "latency_us": 10},
        },
        "node": {"gpus_per_node": 8},
        "efficiency": {"gemm": eff, "attention": eff, "memory": mem_eff, "intra_node": 1.0,
                       "inter_node": 1.0},
    })


# H100 SXM datasheet: 989 TFLOP/s dense bf16, 1979 fp8, 3.35 TB/s HBM3, 132 SMs.
H100 = _hw("h100-test", bf16=989, fp8=1979, bw=3350, sms=132)
# A100 SXM: 312 TFLOP/s bf16, no fp8, 2.039 TB/s, 108 SMs.
A100 = _hw("a100-test", bf16=312, fp8=0, bw=2039, sms=108)


def test_ridge_point_h100_bf16() -> None:
    assert ridge_point(H100, DType.BF16) == pytest.approx(989e12 / 3.35e12, rel=1e-12)
    assert ridge_point(H100, DType.BF16) == pytest.approx(295.2, abs=0.1)


def test_large_gemm_is_compute_bound_at_peak() -> None:
    # 8448 = 66*128 and 8192 = 64*128: 66*64 = 4224 tiles of 128x128 = 32 full waves on 132 SMs.
    op = GemmSpec(m=8448, n=8192, k=8192, dtype=DType.BF16)
    est = roofline_estimate(op, H100)
    assert gemm_tile_efficiency(op, H100) == 1.0
    assert est.bound == Bound.COMPUTE
    assert est.compute_s == pytest.approx(2 * 8448 * 8192 * 8192 / 989e12, rel=1e-12)
    assert est.latency_s == est.compute_s
    assert roofline_time(op, H100) == est.latency_s


def test_efficiency_factors_scale_both_terms() -> None:
    derated = _hw("h100-derated", bf16=989, fp8=1979, bw=3350, sms=132, eff=0.5, mem_eff=0.8)
    op = GemmSpec(m=8448, n=8192, k=8192, dtype=DType.BF16)
    base, slow = roofline_estimate(op, H100), roofline_estimate(op, derated)
    assert slow.compute_s == pytest.approx(base.compute_s / 0.5)
    assert slow.memory_s == pytest.approx(base.memory_s / 0.8)


def test_decode_gemm_is_memory_bound() -> None:
    op = GemmSpec(m=1, n=8192, k=8192, dtype=DType.BF16)
    est = roofline_estimate(op, H100)
    assert est.bound == Bound.MEMORY
    expected_bytes = (8192 + 8192 * 8192 + 8192) * 2
    assert est.memory_s == pytest.approx(expected_bytes / 3.35e12, rel=1e-12)


def test_wave_quantisation_one_tile_past_a_full_wave() -> None:
    # m = 133*128, n = 128 on 132 SMs. 128x128: 133 tiles = 2 waves -> 133/264 * 0.95 = 0.479
    # (no split-K: already a full wave). 256x128: 67 tiles, below a wave, so split-K applies;
    # 16 splits of k=256 make 1072 blocks = 9 waves of 132, each 256x128x256; useful work is
    # m*n*k: 17024*128*4096 / (1188*256*128*256) = 0.896, the best.
    op = GemmSpec(m=133 * 128, n=128, k=4096)
    assert gemm_tile_efficiency(op, H100) == pytest.approx(
        17024 * 128 * 4096 / (1188 * 256 * 128 * 256), rel=1e-12)
    # Skinny GEMM m=16: 16x128 tiles give 64 blocks; split-K 2 makes 128 of 132 SMs busy:
    # 128/132 of a wave at the small tile's 0.5 relative rate.
    skinny = GemmSpec(m=16, n=8192, k=8192)
    assert gemm_tile_efficiency(skinny, H100) == pytest.approx(0.5 * 128 / 132, rel=1e-12)
    assert roofline_estimate(skinny, H100).compute_s > 2 * 16 * 8192 * 8192 / 989e12 * 2


def test_fp8_doubles_rate_on_h100_and_is_rejected_on_a100() -> None:
    op8 = GemmSpec(m=8448, n=8192, k=8192, dtype=DType.FP8)
    op16 = GemmSpec(m=8448, n=8192, k=8192, dtype=DType.BF16)
    assert roofline_estimate(op8, H100).compute_s == pytest.approx(
        roofline_estimate(op16, H100).compute_s * 989 / 1979)
    with pytest.raises(SpecError) as err:
        roofline_time(op8, A100)
    assert err.value.field == "gemm.dtype"
    assert "fp8" in str(err.value) and "a100-test" in str(err.value)
    with pytest.raises(SpecError, match="a100-test"):
        ridge_point(A100, DType.FP8)


def test_int4_weight_only_computes_at_bf16_and_reads_packed_weights() -> None:
    op = GemmSpec(m=1, n=8192, k=8192, dtype=DType.INT4)
    est = roofline_estimate(op, H100)
    tile = gemm_tile_efficiency(op, H100)
    assert est.compute_s == pytest.approx(2 * 8192 * 8192 / (989e12 * tile))
    weights = 8192 * 8192 * 0.5
    activations = (8192 + 8192) * 2
    assert est.memory_s == pytest.approx((weights + activations) / 3.35e12)
    # Four times fewer weight bytes than bf16: memory time drops ~4x.
    bf16 = roofline_estimate(GemmSpec(m=1, n=8192, k=8192), H100)
    assert bf16.memory_s / est.memory_s == pytest.approx(4.0, rel=1e-3)


def test_attention_prefill_compute_bound_decode_memory_bound() -> None:
    prefill = AttentionSpec(batch=1, q_len=8192, kv_len=8192, heads=64, kv_heads=8,
                            head_dim=128, causal=True)
    est = roofline_estimate(prefill, H100)
    assert est.bound == Bound.COMPUTE
    assert est.compute_s == pytest.approx(prefill.flops / 989e12)
    decode = AttentionSpec(batch=8, q_len=1, kv_len=4096, heads=64, kv_heads=8, head_dim=128,
                           phase=Phase.DECODE)
    est = roofline_estimate(decode, H100)
    assert est.bound == Bound.MEMORY
    assert est.memory_s == pytest.approx(decode.bytes / 3.35e12)


def test_memory_bound_ops_and_fp8_storage_on_a100() -> None:
    op = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=8192, cols=8192, dtype=DType.BF16)
    est = roofline_estimate(op, A100)
    assert est.bound == Bound.MEMORY
    assert est.latency_s == pytest.approx(2 * 8192 * 8192 * 2 / 2.039e12)
    # fp8 storage of an elementwise op is legal anywhere: the math is fp32 on vector units.
    op8 = MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=1024, cols=1024, dtype=DType.FP8)
    assert math.isfinite(roofline_time(op8, A100))
    moe = MoESpec(kind=MoEOpKind.DISPATCH, tokens=4096, hidden=4096, experts=8, top_k=2)
    assert roofline_time(moe, H100) == pytest.approx(3 * 4096 * 4096 * 2 / 3.35e12)


def test_collective_delegates_to_comm() -> None:
    op = CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=2**30, group_size=8,
                        ranks_per_node=8)
    est = roofline_estimate(op, H100)
    assert est.bound == Bound.COMMUNICATION
    assert est.compute_s == 0.0
    # The roofline does not price collectives itself: it asks analytical.comm (NCCL's model).
    from analytical.comm import collective_time

    assert est.latency_s == pytest.approx(collective_time(op, H100))
    assert est.latency_s > 1.75 * 2**30 / 450e9  # no faster than a ring at the NVLink datasheet


def test_catalog_devices() -> None:
    """The shipped catalog: H100 SXM ridge ~ 989e12 / 3.35e12; A100 has no fp8."""
    from analytical.errors import UnknownNameError
    from analytical.hardware import get_hardware

    try:
        h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-sxm-80gb")
    except UnknownNameError:
        pytest.skip("hardware catalog not present")
    assert ridge_point(h100, DType.BF16) == pytest.approx(989e12 / 3.35e12, rel=0.01)
    with pytest.raises(SpecError, match="a100"):
        roofline_time(GemmSpec(m=4096, n=4096, k=4096, dtype=DType.FP8), a100)


def test_kernel_latency_is_added_to_every_compute_kernel_but_not_to_collectives() -> None:
    """``efficiency.kernel_latency_us``: a fixed time per kernel on top of max(compute, memory)
    (the store's small-M GEMMs fit t = 3.7 us + roofline on H100 and B200); collectives keep
    their link model."""
    base = _hw("h100-test", bf16=989, fp8=1979, bw=3350, sms=132)
    doc = {**hardware_to_dict(base)}
    doc["efficiency"] = {**doc["efficiency"], "kernel_latency_us": 3.7}
    slow = hardware_from_dict(doc)
    gemv = GemmSpec(m=1, n=4096, k=4096, dtype=DType.BF16)
    norm = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=1, cols=4096, dtype=DType.BF16)
    for op in (gemv, norm):
        assert roofline_time(op, slow) == pytest.approx(roofline_time(op, base) + 3.7e-6)
    # a 4096-wide bf16 GEMV reads 32 MiB: ~10 us at 3.35 TB/s, so the alpha term is a third
    assert roofline_time(gemv, slow) / roofline_time(gemv, base) > 1.3
    ar = CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=8192, group_size=8,
                        ranks_per_node=8, dtype=DType.BF16)
    assert roofline_time(ar, slow) == roofline_time(ar, base)
    assert hardware_from_dict(hardware_to_dict(slow)) == slow
