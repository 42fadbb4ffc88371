# SPDX-License-Identifier: Apache-2.0
"""Operators larger than the sweeps measured, priced from measured sizes instead of from a
learned model's extrapolation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from analytical.ops import GemmSpec, OpSpec
from simulate.engines import EngineChain, Estimate

__all__ = ["GEMM_SLICE_ROWS", "sliced_estimates"]

# A GEMM is tiled along m and n and its tiles run independently, so once one slice of m fills
# every SM several times over, n such slices take n times as long (NVIDIA, "Matrix
# Multiplication Background User's Guide": tile and wave quantization,
# https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/).
# Training GEMMs carry micro-batch x sequence rows (16k-256k); the A100 bf16 sweep stops at
# m = 8,192, and the learned model's extrapolation beyond swung 0.54-0.96 of peak across
# neighbouring shapes. So a learned answer for a GEMM over this many rows becomes equal slices.
GEMM_SLICE_ROWS = 8192
_LEARNED = frozenset({"xgboost", "xgboost-transfer"})  # the store and roofline are exact in m


def sliced_estimates(chain: EngineChain, ops: Sequence[OpSpec]) -> list[Estimate]:
    """``chain``'s estimates, a learned GEMM over `GEMM_SLICE_ROWS` rows as equal row slices."""
    est = chain.estimate_many(ops)
    big = {i: -(-op.m // GEMM_SLICE_ROWS) for i, op in enumerate(ops)
           if isinstance(op, GemmSpec) and op.m > GEMM_SLICE_ROWS and est[i].engine in _LEARNED}
    parts = chain.estimate_many([replace(ops[i], m=-(-ops[i].m // n))  # type: ignore[type-var]
                                 for i, n in big.items()])
    for (i, n), e in zip(big.items(), parts, strict=True):
        est[i] = replace(e, latency_s=e.latency_s * n, detail=f"{e.detail}; {n} row slices")
    return est
