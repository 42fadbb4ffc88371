# SPDX-License-Identifier: Apache-2.0
"""How a stack's benchmark harness repeats a GEMM, and so which share of its operands the L2
still holds when the next repetition reads them (the GEMM target's warm-L2 denominator,
`predictors.transfer_features.warm_roofline_s`).

- aiconfigurator's TensorRT-LLM collector (``trtllm``) times ``Linear.forward`` on several
  copies of the weight in turn: up to TensorRT-LLM 1.0 always 5 (ai-dynamo/aiconfigurator
  e46d9089f, 2025-10-13, ``collector/trtllm/collect_gemm.py``: ``repeat_n = 5  # to reduce
  impact of L2 cache hit``; the store's A100 ``trtllm-1.0.0`` rows), and since its adaptive
  rule (2dfdd3cad, 2026-03-17; the store's B200, H100 and L40S ``trtllm-1.3.0rc20`` rows are
  dec5f4cd2's, 2026-08-03) ``max(1, min(5, ceil(L2 / weight bytes)))``: 5 copies that fit
  the L2 for a weight under a fifth of it, just enough copies to overflow it for a weight
  between a fifth of the L2 and the L2, one copy above (the collector reads the L2 size from
  the CUDA runtime; here the YAML's ``l2_mb``, the same figure within 5%: 96 MiB against 96 MB);
- our own ``profiled`` rows flush the L2 before every repetition (`profiler.timers`: a 256 MB
  buffer zeroed first), so nothing is resident;
- Vidur's profiler (microsoft/vidur ``vidur/profiling/mlp``: ``--profile_method`` defaults to
  ``record_function``, for which ``MlpWrapper`` builds a model of ``ACTIVE_STEPS = 20``
  blocks and times one forward after an untimed one) reaches a block's weight again only
  after the 19 other blocks' weights: nothing of it is resident either;
- any other stack repeats one weight: one copy.

The share of a repeated sweep that the L2 keeps falls from all of it to none a little past
the L2's size, not as L2 / footprint: RRZE-HPC gpu-l2-cache (the source of the YAMLs'
``l2_bandwidth_gb_per_s``) reads L2 speed up to about the L2's size and DRAM speed from 110 MB
on the L40's 96 MB and from 70 MB on the H200's 50 MB, i.e. by 1.15-1.4x the L2. The share is
taken as falling linearly from 1 at the L2's size to 0 at `RAMP_END` times it. The store's
TensorRT-LLM bf16 GEMMs with m <= 16 on L40S show the same: 0.9-1.7x its GDDR6 bandwidth while
the harness's copies fit the L2, 0.80-0.84x once they exceed it by 1.4x or more, flat from there
(docs/validation/transfer-effects.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from analytical.hardware import HardwareSpec
from analytical.ops import GemmSpec, OpSpec

COPYING_STACK = "trtllm"  # `predictors.transfer_data.stack_of` of aiconfigurator's rows
ADAPTIVE_RELEASE = 1.03  # `version_of` of TensorRT-LLM 1.3, collected with the adaptive rule
MAX_COPIES = 5
FLUSHING_STACKS = ("profiled", "vidur")
FLUSHED = 0  # copies of a harness whose weight is out of the L2 when a repetition starts
RAMP_END = 1.4  # footprint / L2 from which nothing is resident (H200: DRAM speed from 70 MB)


def weight_bytes(op: GemmSpec) -> float:
    """The B operand (the Linear's weight) over the batch."""
    return float(op.batch * op.k * op.n * op.dtype.bytes)


def gemm_copies(op: GemmSpec, hw: HardwareSpec, stack: str, release: float) -> int:
    """Weight copies the harness of ``stack`` at ``release`` cycles through (module doc);
    `FLUSHED` for one that empties the L2 first."""
    if stack in FLUSHING_STACKS:
        return FLUSHED
    if stack != COPYING_STACK:
        return 1
    if release < ADAPTIVE_RELEASE:
        return MAX_COPIES
    return max(1, min(MAX_COPIES, math.ceil(hw.l2_bytes / weight_bytes(op))))


def harness_copies(family: str, ops: Sequence[OpSpec], hw: HardwareSpec,
                   stacks: Sequence[str], releases: Sequence[float]) -> list[int]:
    """`gemm_copies` per op (1 outside GEMM)."""
    return [gemm_copies(op, hw, s, r) if family == "gemm" and isinstance(op, GemmSpec) else 1
            for op, s, r in zip(ops, stacks, releases, strict=True)]


def footprint(op: OpSpec, copies: int) -> float:
    """Bytes one round of the harness touches: the op's operands with ``copies`` weights."""
    extra = (copies - 1) * weight_bytes(op) if isinstance(op, GemmSpec) and copies > 1 else 0.0
    return op.bytes + extra


def resident_share(op: OpSpec, hw: HardwareSpec, copies: int) -> float | None:
    """Share of a GEMM's bytes the L2 holds when its harness runs it again (module doc);
    None for other families (`warm_memory_s`'s own share of what fits)."""
    if not isinstance(op, GemmSpec):
        return None
    if copies == FLUSHED or hw.l2_bytes <= 0:
        return 0.0
    fill = footprint(op, copies) / hw.l2_bytes
    return min(1.0, max(0.0, (RAMP_END - fill) / (RAMP_END - 1.0)))
