# SPDX-License-Identifier: Apache-2.0
"""The GEMM rate a training step sustains under the board power limit: a ceiling on the times
the store and the learned engines give, which were timed one kernel at a time after idle."""

from __future__ import annotations

from dataclasses import replace

from analytical.dtypes import DType
from analytical.hardware import HardwareSpec
from analytical.ops import GemmSpec, OpSpec
from simulate.engines import Estimate

__all__ = ["sustained", "sustained_floor_s"]


def sustained(op: OpSpec, e: Estimate, hw: HardwareSpec) -> Estimate:
    """A 16-bit GEMM no faster than the rate GEMMs sustain back to back under the board power
    limit (`analytical.hardware.Efficiency.sustained_gemm`). The store's kernels, and the
    engines learned from them, were timed one at a time on a GPU that had idled (L2 flushed, a
    spin before each repetition): a short kernel runs at the boost clock, a long one partly
    power-capped already. A training step runs its GEMMs back to back for seconds, the power cap
    holds the SM clock lower, and throughput settles at a ceiling (measured on an H200, 700 W:
    Llama-3 8B/70B/405B layer GEMMs back to back for 22 s settle at 666-674 TFLOP/s with the
    clock at 1,440-1,455 MHz under the software power cap, against 700-730 isolated;
    datasets/measurements/llmsim/h200/sustained/). Why values matter: Horace He, "Strangely,
    Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data!" (2024),
    https://www.thonking.ai/p/strangely-matrix-multiplications. fp8 GEMMs settle likewise
    (`efficiency.sustained_gemm_fp8`; H100 SXM, 700 W: Qwen3-8B/14B/32B prefill GEMMs, cuBLASLt
    tensorwise `torch._scaled_mm`, 1,389-1,410 -> 1,196-1,218 TFLOP/s after 10 s back to back,
    `scripts/gpu_sustained_fp8.py`, datasets/measurements/llmsim/h100-sxm/sustained-fp8/).
    Other dtypes are not measured."""
    if e.latency_s >= (floor := sustained_floor_s(op, hw)):
        return e
    rate = _sustained_rate(op, hw)
    return replace(e, latency_s=floor, detail=f"{e.detail}; sustained {rate:g} of peak")


def _sustained_rate(op: OpSpec, hw: HardwareSpec) -> float:
    """The sustained fraction of ``op``'s dtype peak: 16-bit GEMMs ``sustained_gemm``, fp8
    ones ``sustained_gemm_fp8`` (measured apart: the fp8 kernels draw their own power); 1
    for other ops or where not measured."""
    if not isinstance(op, GemmSpec):
        return 1.0
    if op.dtype in _SIXTEEN_BIT:
        return hw.efficiency.sustained_gemm
    return hw.efficiency.sustained_gemm_fp8 if op.dtype == DType.FP8 else 1.0


def sustained_floor_s(op: OpSpec, hw: HardwareSpec) -> float:
    """A 16-bit or fp8 GEMM's least time at its sustained rate (`sustained`); 0 for other ops
    or where the rate is not measured."""
    if (rate := _sustained_rate(op, hw)) == 1.0:
        return 0.0
    return op.flops / (hw.peak_flops(op.dtype) * rate)


_SIXTEEN_BIT = frozenset({DType.BF16, DType.FP16})
