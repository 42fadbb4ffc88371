# SPDX-License-Identifier: Apache-2.0
"""Operators larger than the sweeps measured, priced from measured sizes instead of from a
learned model's extrapolation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from analytical.ops import AttentionSpec, GemmSpec, OpSpec
from simulate.engines import EngineChain, Estimate

__all__ = ["ATTENTION_MAX_QUERIES", "GEMM_SLICE_ROWS", "sliced_estimates"]

# A GEMM is tiled along m and n and its tiles run independently, so once one slice of m fills
# every SM several times over, n such slices take n times as long (NVIDIA, "Matrix
# Multiplication Background User's Guide": tile and wave quantization,
# https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/).
# Training GEMMs carry micro-batch x sequence rows (16k-256k); the A100 bf16 sweep stops at
# m = 8,192, and the learned model's extrapolation beyond swung 0.54-0.96 of peak across
# neighbouring shapes. So a learned answer for a GEMM over this many rows becomes equal slices.
GEMM_SLICE_ROWS = 8192
_LEARNED = frozenset({"xgboost", "xgboost-transfer"})  # the store and roofline are exact in m


# Flash attention is a grid of query tiles, each streaming its keys at a rate that stops growing
# with length once the grid fills the GPU: FlashAttention-3 (arXiv 2407.08608, Figs. 5-6) shows
# every kernel's TFLOP/s flat from 4k to 16k. The attention sweeps (TensorRT-LLM's context
# FMHA as aiconfigurator imports it, our SDPA sweeps) stop at 16,384 queries; beyond, the learned
# model answered 1,792 TFLOP/s on an H100 (989 peak) and 2,834 on a B200 (2,250) at 65,536. So a
# learned answer over this many queries is the same op's rate at this many, times its FLOPs.
ATTENTION_MAX_QUERIES = 16384


def _at_measured_size(op: AttentionSpec) -> AttentionSpec:
    """``op`` at `ATTENTION_MAX_QUERIES` queries, the keys scaled alike (a prefix kept in ratio)."""
    kv = max(ATTENTION_MAX_QUERIES, op.kv_len * ATTENTION_MAX_QUERIES // op.q_len)
    return replace(op, q_len=ATTENTION_MAX_QUERIES, kv_len=kv)


def sliced_estimates(chain: EngineChain, ops: Sequence[OpSpec]) -> list[Estimate]:
    """``chain``'s estimates, a learned GEMM over `GEMM_SLICE_ROWS` rows as equal row slices
    and a learned attention over `ATTENTION_MAX_QUERIES` queries at that size's rate."""
    est = chain.estimate_many(ops)
    long = [i for i, op in enumerate(ops) if isinstance(op, AttentionSpec)
            and op.q_len > ATTENTION_MAX_QUERIES and est[i].engine in _LEARNED]
    refs = [_at_measured_size(ops[i]) for i in long]  # type: ignore[arg-type]
    for i, ref, e in zip(long, refs, chain.estimate_many(refs), strict=True):
        est[i] = replace(e, latency_s=e.latency_s * ops[i].flops / ref.flops,
                         detail=f"{e.detail}; rate at {ATTENTION_MAX_QUERIES} queries")
    big = {i: -(-op.m // GEMM_SLICE_ROWS) for i, op in enumerate(ops)
           if isinstance(op, GemmSpec) and op.m > GEMM_SLICE_ROWS and est[i].engine in _LEARNED}
    parts = chain.estimate_many([replace(ops[i], m=-(-ops[i].m // n))  # type: ignore[type-var]
                                 for i, n in big.items()])
    for (i, n), e in zip(big.items(), parts, strict=True):
        est[i] = replace(e, latency_s=e.latency_s * n, detail=f"{e.detail}; {n} row slices")
    return est
