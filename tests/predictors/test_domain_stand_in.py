# SPDX-License-Identifier: Apache-2.0
"""fp16 and bf16 stand in for each other on a GPU that runs both at one peak."""

from __future__ import annotations

from analytical.dtypes import DType
from analytical.ops import GemmSpec, MemoryBoundSpec, MemoryOpKind
from predictors.domain import outside_domain, stand_in

FP16_ONLY = {"dtype": ["fp16"], "backward": [False]}


def test_a_bf16_gemm_is_asked_as_fp16_of_a_gpu_model_trained_on_fp16_only():
    op = GemmSpec(m=32, n=4096, k=4096, dtype=DType.BF16)
    assert stand_in(FP16_ONLY, op, "a100-sxm-80gb").dtype is DType.FP16
    assert outside_domain(FP16_ONLY, op, "a100-sxm-80gb") is None
    norm = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=8, cols=4096, dtype=DType.BF16)
    assert outside_domain(FP16_ONLY, norm, "h100-sxm") is None


def test_no_half_float_stand_in_on_a_cpu_an_unknown_device_or_another_width():
    op = GemmSpec(m=32, n=4096, k=4096, dtype=DType.BF16)
    assert outside_domain(FP16_ONLY, op, "cpu") == "dtype=bf16"
    assert outside_domain(FP16_ONLY, op, "no-such-gpu") == "dtype=bf16"
    assert outside_domain(FP16_ONLY, op) == "dtype=bf16"
    fp8 = GemmSpec(m=32, n=4096, k=4096, dtype=DType.FP8)
    assert outside_domain(FP16_ONLY, fp8, "h100-sxm") == "dtype=fp8"

