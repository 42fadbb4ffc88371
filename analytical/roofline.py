# SPDX-License-Identifier: Apache-2.0
"""Roofline time of one operator on one device: the analytical engine of last resort.

``latency = max(compute_s, memory_s) + kernel_latency`` where compute_s = FLOPs / (peak(dtype) *
efficiency) and memory_s = bytes / (HBM bandwidth * memory efficiency) (Williams, Waterman &
Patterson, "Roofline", CACM 2009), and kernel_latency is the hardware file's fixed time of one
kernel (``efficiency.kernel_latency_us``: launch, ramp-up and tail that no bandwidth hides; what
dominates a decode step's many small kernels). The efficiency factors are data from the hardware
file; GEMMs are further derated for tile and wave quantisation, attention for its shape (head
dim, K/V tiles per query tile: `analytical.attention_tiles`). Collectives are not memory-bound
kernels: their time comes from `analytical.comm`. Learned and measured engines live in
predictors/ and profiler/.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from analytical.attention_tiles import shape_rate
from analytical.comm import collective_time
from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.hardware import HardwareSpec
from analytical.ops import (
    AttentionSpec,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MoESpec,
    OpSpec,
)

# Output tiles (rows x cols of C) a CUTLASS/cuBLAS-style GEMM may pick; each thread block computes
# one tile on one SM. The heuristic takes the candidate that wastes least work to tile and wave
# quantisation (NVIDIA "Matrix Multiplication Background User's Guide", sections "Tile
# Quantization" and "Wave Quantization"; 128x128 and 128x256 are the common Hopper/Ampere tiles).
GEMM_TILES: dict[str, tuple[int, int, float]] = {
    # name: (tile rows, tile cols, throughput of this tile shape relative to the largest).
    "128x256": (128, 256, 1.0),
    "256x128": (256, 128, 1.0),
    "128x128": (128, 128, 0.95),
    # Small-M tiles that cuBLAS/CUTLASS pick for skinny (decode-like) GEMMs. They reuse each
    # loaded operand less, so they run below the large tiles' rate. NOTE: the relative rates
    # are assumptions, not measurements: measured GEMMs (the store, the XGBoost engine) take
    # precedence over this roofline wherever they exist.
    "64x128": (64, 128, 0.85),
    "64x64": (64, 64, 0.7),
    "16x128": (16, 128, 0.5),
}

# Split-K: when the output has fewer tiles than SMs, libraries split the K loop over several
# thread blocks and reduce (CUTLASS "split-K"); each split keeps at least MIN_K_PER_SPLIT of K.
SPLIT_K_FACTORS: tuple[int, ...] = (1, 2, 4, 8, 16)
MIN_K_PER_SPLIT = 256

# Low-precision storage types whose GEMMs compute in the activation type: weight-only int4
# kernels (AWQ/GPTQ/Marlin) dequantise int4 weights to bf16 and run bf16 tensor-core math.
WEIGHT_ONLY_COMPUTE_DTYPE: dict[DType, DType] = {DType.INT4: DType.BF16}


class Bound(StrEnum):
    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineEstimate:
    """Roofline terms of one operator, seconds; ``latency_s`` is what the simulator uses."""

    compute_s: float  # FLOPs at the derated tensor/vector peak
    memory_s: float  # compulsory HBM traffic at the derated bandwidth (collectives: wire time)
    latency_s: float  # max(compute_s, memory_s)
    bound: Bound


def ridge_point(hw: HardwareSpec, dtype: DType) -> float:
    """Arithmetic intensity (FLOP/byte) where compute and memory time are equal: peak / BW."""
    compute_dtype = WEIGHT_ONLY_COMPUTE_DTYPE.get(dtype, dtype)
    return _peak_flops(hw, compute_dtype, field="dtype") / hw.memory_bw_bytes_per_s


def gemm_tile_efficiency(spec: GemmSpec, hw: HardwareSpec) -> float:
    """Achieved fraction of the tensor-core rate for the best tile and split-K choice.

    useful = m*n*k*batch; issued = (tiles * splits) blocks rounded up to whole waves of
    ``compute_units``, each doing tile area * k / splits; times the tile's relative rate.
    Returns a value in (0, 1]; 1 for large, tile-aligned shapes.
    """
    best = 0.0
    useful = spec.m * spec.n * spec.k * spec.batch
    for tile_m, tile_n, rate in GEMM_TILES.values():
        tiles = math.ceil(spec.m / tile_m) * math.ceil(spec.n / tile_n) * spec.batch
        for splits in SPLIT_K_FACTORS:
            if splits > 1 and (tiles >= hw.compute_units or spec.k / splits < MIN_K_PER_SPLIT):
                break
            waves = math.ceil(tiles * splits / hw.compute_units)
            issued = waves * hw.compute_units * tile_m * tile_n * math.ceil(spec.k / splits)
            best = max(best, rate * useful / issued)
    return best


def roofline_estimate(op: OpSpec, hw: HardwareSpec) -> RooflineEstimate:
    """Roofline terms of ``op`` on ``hw``; raises SpecError for a dtype the device lacks."""
    if isinstance(op, CollectiveSpec):
        wire_s = collective_time(op, hw)
        return RooflineEstimate(compute_s=0.0, memory_s=wire_s, latency_s=wire_s,
                                bound=Bound.COMMUNICATION)
    if isinstance(op, GemmSpec):
        compute_dtype = WEIGHT_ONLY_COMPUTE_DTYPE.get(op.dtype, op.dtype)
        flops_per_s = (_peak_flops(hw, compute_dtype, field=f"{op.family}.dtype")
                       * hw.efficiency.gemm_at(compute_dtype) * gemm_tile_efficiency(op, hw))
        bytes_moved = _gemm_bytes(op)
    elif isinstance(op, AttentionSpec):
        compute_dtype = WEIGHT_ONLY_COMPUTE_DTYPE.get(op.dtype, op.dtype)
        flops_per_s = (_peak_flops(hw, compute_dtype, field=f"{op.family}.dtype")
                       * hw.efficiency.attention * shape_rate(op))
        bytes_moved = op.bytes
    elif isinstance(op, (MemoryBoundSpec, MoESpec)):
        # Elementwise math runs on the vector (non-tensor-core) units in fp32 whatever the
        # storage type, so fp8/int4 storage is legal on any device.
        flops_per_s = hw.peak_flops_fp32 * hw.efficiency.memory
        bytes_moved = op.bytes
    else:
        raise SpecError("op", f"no roofline for {type(op).__name__}")
    compute_s = op.flops / flops_per_s
    memory_s = bytes_moved / (hw.memory_bw_bytes_per_s * hw.efficiency.memory)
    bound = Bound.COMPUTE if compute_s >= memory_s else Bound.MEMORY
    return RooflineEstimate(compute_s=compute_s, memory_s=memory_s,
                            latency_s=max(compute_s, memory_s) + hw.efficiency.kernel_latency_s,
                            bound=bound)


def roofline_time(op: OpSpec, hw: HardwareSpec) -> float:
    """Roofline latency of ``op`` on ``hw`` in seconds."""
    return roofline_estimate(op, hw).latency_s


def _gemm_bytes(op: GemmSpec) -> float:
    """Compulsory traffic; weight-only int4 keeps the activations [m, k] and C in bf16 and only
    the weight [k, n] packed (``GemmSpec.bytes`` counts every operand at the storage type)."""
    compute_dtype = WEIGHT_ONLY_COMPUTE_DTYPE.get(op.dtype)
    if compute_dtype is None:
        return op.bytes
    activations = op.batch * (op.m * op.k + op.m * op.n) * compute_dtype.bytes
    return activations + op.batch * op.k * op.n * op.dtype.bytes


def _peak_flops(hw: HardwareSpec, dtype: DType, *, field: str) -> float:
    peak = hw.peak_flops(dtype)
    if peak <= 0:
        supported = ", ".join(d.value for d in DType if hw.peak_flops(d) > 0)
        raise SpecError(field, f"{dtype} is not supported on {hw.name} (supported: {supported})")
    return peak
