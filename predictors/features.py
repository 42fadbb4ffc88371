# SPDX-License-Identifier: Apache-2.0
"""Shape-aware features: one function per operator family, used by training AND inference.

A feature row is built from an operator spec and the hardware spec only, so the simulator can ask
for any shape. `FEATURE_SCHEMA` lists, per family, the ordered (name, dtype) pairs and
`SCHEMA_VERSIONS` holds one version per family, bumped whenever a name, its order or its meaning
changes in that family; both are saved beside every model (``schema.json``) and checked on load.
Per family, so a change to attention features does not invalidate saved GEMM models.

History: attention v2 adds the work-item counts of decode/prefill kernels (batch x heads,
batch x kv_heads, KV tiles of 64 and 128 tokens and the CTAs they make, query tokens x heads,
heads x head_dim): latency of a small-KV decode grows with batch x kv_heads, not with FLOPs, and
without these a tree cannot place an unseen head configuration. GEMM v2 adds the byte alignment
of the operands' rows (k and n elements): cuBLAS runs rows that are not 16-byte aligned on other,
slower kernels (no TMA or vector loads). On our H100 sweep such shapes took about 4x their aligned
neighbours, and a v1 model missed them by 38% MAPE against 5% on aligned ones. Every other
family is v1.

The roofline feature (and the normaliser of the ``log_roofline_ratio`` target) is the plain
vendor-peak roofline computed here, not `analytical.roofline.roofline_time`: that one carries
tunable efficiency factors, and a tweak to them must not silently change what a saved model
predicts. The formula below is fixed for a given schema version; only the hardware file's
peaks, bandwidths and SM count enter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from analytical.dtypes import DType
from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import HardwareSpec
from analytical.nccl import nccl_time
from analytical.ops import (
    AttentionSpec,
    CollectiveKind,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MemoryOpKind,
    MoEOpKind,
    MoESpec,
    OpSpec,
    Phase,
)

# collective 2: the roofline (and the ratio targets' normaliser) is NCCL's own model; 3: on the
# graphs NCCL's search finds, with NVLS (`analytical.nccl_graph`, hardware `topology`); 4: a
# send_recv over NVLink inside a node at its path's own bandwidth (`analytical.nccl._p2p_bandwidth`)
SCHEMA_VERSIONS: dict[str, int] = {"gemm": 2, "attention": 2, "collective": 4, "memory": 1,
                                   "moe": 1}

# GEMM kernels on NVIDIA GPUs tile the output in CTA tiles; the two most common are listed
# (CUTLASS default 128x128 and the wide 128x256 Hopper tile). One tile runs on one SM, so
# tiles / SMs is the number of waves and its fractional part the idle tail (wave quantisation).
_GEMM_TILES: tuple[tuple[int, int], ...] = ((128, 128), (128, 256))
# FlashAttention-2 forward assigns one (batch, head, 128-query block) to a thread block.
_ATTN_Q_BLOCK = 128
# Split-KV decode kernels (FlashDecoding) cut the KV sequence into blocks of this size.
_ATTN_KV_BLOCK = 256
# Paged/XQA decode kernels walk the KV cache in tiles of 64 or 128 tokens (the page sizes of
# TensorRT-LLM and vLLM): latency steps where the tile count changes.
_ATTN_SMALL_KV_BLOCKS = (64, 128)

_DTYPES = tuple(DType)
# Row alignment is capped here: 128 bytes is a whole cache line, beyond which no kernel cares.
_ALIGN_CAP_BYTES = 128


@dataclass(frozen=True, slots=True, kw_only=True)
class Feature:
    name: str
    dtype: str  # "float" (continuous), "int" (count), "bool" (0/1 flag)


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else -60.0  # 2**-60 s: far below any measurable time


def _dtype_onehot(dtype: DType) -> list[float]:
    return [1.0 if dtype == d else 0.0 for d in _DTYPES]


def _peak_flops(op: OpSpec, hw: HardwareSpec) -> float:
    """Tensor-core peak for GEMM/attention (bf16 where the dtype has none on this device);
    fp32 vector peak for elementwise families."""
    if op.family in ("memory", "moe"):
        return hw.peak_flops_fp32
    return hw.peak_flops(op.dtype) or hw.peak_flops_bf16


def ideal_time_s(op: OpSpec, hw: HardwareSpec) -> float:
    """Vendor-peak roofline, seconds: max(FLOPs / peak, bytes / HBM bandwidth) (Williams,
    Waterman, Patterson 2009); collectives: NCCL's own cost model on the YAML's links
    (`analytical.nccl.nccl_time`: fixed constants from NCCL's source, no efficiency factor),
    so the ratio targets learn NCCL's residual. With bus bytes / link bandwidth + the YAML's
    link latency instead, h100-nvl, h100-sxm and l40s got no champion (predictors/README.md)."""
    if isinstance(op, CollectiveSpec):  # the one spec of family "collective"
        return nccl_time(op, hw)
    return max(op.flops / _peak_flops(op, hw), op.bytes / hw.memory_bw_bytes_per_s)


def _common(op: OpSpec, hw: HardwareSpec) -> list[float]:
    """FLOPs, bytes, intensity and the three time bounds, all in log2 (seconds, FLOPs, bytes)."""
    compute_s = op.flops / _peak_flops(op, hw)
    memory_s = op.bytes / hw.memory_bw_bytes_per_s
    intensity = op.flops / op.bytes if op.bytes else 0.0
    return [_log2(op.flops), _log2(op.bytes), _log2(intensity), _log2(compute_s),
            _log2(memory_s), _log2(ideal_time_s(op, hw))]


_COMMON = [Feature(name=n, dtype="float") for n in
           ("log2_flops", "log2_bytes", "log2_intensity", "log2_compute_s", "log2_memory_s",
            "log2_roofline_s")]
ROOFLINE_FEATURE = "log2_roofline_s"


def _waves(tiles: float, hw: HardwareSpec) -> list[float]:
    """Waves of `tiles` over the SMs, the fractional tail, and the busy fraction of the last
    wave's SMs (1.0 = perfectly quantised)."""
    waves = tiles / hw.compute_units
    tail = waves - math.floor(waves)
    utilisation = waves / math.ceil(waves) if waves > 0 else 0.0
    return [_log2(tiles), waves, tail, utilisation]


def _wave_features(prefix: str) -> list[Feature]:
    return [Feature(name=f"{prefix}_log2_tiles", dtype="float"),
            Feature(name=f"{prefix}_waves", dtype="float"),
            Feature(name=f"{prefix}_wave_tail", dtype="float"),
            Feature(name=f"{prefix}_wave_utilisation", dtype="float")]


def _dims(names: Sequence[str]) -> list[Feature]:
    return ([Feature(name=n, dtype="int") for n in names]
            + [Feature(name=f"log2_{n}", dtype="float") for n in names])


def _onehot(prefix: str, values: Sequence[str]) -> list[Feature]:
    return [Feature(name=f"{prefix}_{v}", dtype="bool") for v in values]


def row_alignment_log2(elements: int, dtype: DType) -> float:
    """log2 of the largest power of two (bytes, capped at 128) dividing a row of ``elements``:
    4 for a 16-byte aligned bf16 row of 8 elements, 0 for an odd fp8 row."""
    nbits = round(elements * dtype.bytes * 8)  # bits: an fp4 row of odd length is half a byte
    return float(min((nbits & -nbits).bit_length() - 1 - 3, _ALIGN_CAP_BYTES.bit_length() - 1))


def gemm_features(op: GemmSpec, hw: HardwareSpec) -> list[float]:
    dims = [op.m, op.n, op.k, op.batch]
    row = [float(d) for d in dims] + [_log2(d) for d in dims] + _common(op, hw)
    for tile_m, tile_n in _GEMM_TILES:
        m_tiles, n_tiles = math.ceil(op.m / tile_m), math.ceil(op.n / tile_n)
        # padding efficiency: useful fraction of the tiled output (tile quantisation)
        padded = (op.m * op.n) / (m_tiles * tile_m * n_tiles * tile_n)
        row += _waves(op.batch * m_tiles * n_tiles, hw) + [padded]
    row += [row_alignment_log2(op.k, op.dtype), row_alignment_log2(op.n, op.dtype)]
    return row + _dtype_onehot(op.dtype)


def attention_features(op: AttentionSpec, hw: HardwareSpec) -> list[float]:
    dims = [op.batch, op.q_len, op.kv_len, op.heads, op.kv_heads, op.head_dim]
    row = [float(d) for d in dims] + [_log2(d) for d in dims]
    row += [op.heads / op.kv_heads, float(op.causal), float(op.phase == Phase.DECODE),
            float(op.backward), _log2(op.score_pairs), _log2(op.batch * op.kv_len)]
    row += _common(op, hw)
    row += _waves(op.batch * op.heads * math.ceil(op.q_len / _ATTN_Q_BLOCK), hw)
    row += _waves(op.batch * op.kv_heads * math.ceil(op.kv_len / _ATTN_KV_BLOCK), hw)
    row += [_log2(op.batch * op.heads), _log2(op.batch * op.kv_heads)]
    for block in _ATTN_SMALL_KV_BLOCKS:
        tiles = math.ceil(op.kv_len / block)
        row += [float(tiles), _log2(op.batch * op.kv_heads * tiles),
                _log2(op.batch * op.heads * tiles)]
    row += [_log2(op.batch * op.heads * op.q_len), _log2(op.heads * op.head_dim),
            _log2(op.kv_heads * op.head_dim)]
    return row + _dtype_onehot(op.dtype)


def collective_features(op: CollectiveSpec, hw: HardwareSpec) -> list[float]:
    link = hw.intra_node if op.nodes == 1 else hw.inter_node
    row = [float(op.size_bytes), _log2(op.size_bytes), _log2(op.size_bytes / op.group_size),
           float(op.group_size), float(op.ranks_per_node), float(op.nodes), op.bus_factor,
           _log2(op.bytes), _log2(op.bytes / link.bandwidth_bytes_per_s),
           _log2(ideal_time_s(op, hw))]
    row += [1.0 if op.kind == k else 0.0 for k in CollectiveKind]
    return row + _dtype_onehot(op.dtype)


def memory_features(op: MemoryBoundSpec, hw: HardwareSpec) -> list[float]:
    dims = [op.rows, op.cols]
    row = [float(d) for d in dims] + [_log2(d) for d in dims] + [float(op.backward)]
    row += _common(op, hw)
    row += [1.0 if op.kind == k else 0.0 for k in MemoryOpKind]
    return row + _dtype_onehot(op.dtype)


def moe_features(op: MoESpec, hw: HardwareSpec) -> list[float]:
    dims = [op.tokens, op.hidden, op.experts, op.top_k]
    row = [float(d) for d in dims] + [_log2(d) for d in dims] + _common(op, hw)
    row += [1.0 if op.kind == k else 0.0 for k in MoEOpKind]
    return row + _dtype_onehot(op.dtype)


_DTYPE_FEATURES = _onehot("dtype", [d.value for d in _DTYPES])

FEATURE_SCHEMA: dict[str, tuple[Feature, ...]] = {
    "gemm": tuple(
        _dims(["m", "n", "k", "batch"]) + _COMMON
        + [f for tm, tn in _GEMM_TILES for f in
           (*_wave_features(f"tile{tm}x{tn}"), Feature(name=f"tile{tm}x{tn}_padding_eff",
                                                       dtype="float"))]
        + [Feature(name="k_row_align_log2_bytes", dtype="float"),
           Feature(name="n_row_align_log2_bytes", dtype="float")]
        + _DTYPE_FEATURES),
    "attention": tuple(
        _dims(["batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim"])
        + [Feature(name="gqa_ratio", dtype="float"), Feature(name="causal", dtype="bool"),
           Feature(name="decode", dtype="bool"), Feature(name="backward", dtype="bool"),
           Feature(name="log2_score_pairs", dtype="float"),
           Feature(name="log2_kv_tokens", dtype="float")]
        + _COMMON + _wave_features("qblock") + _wave_features("kvblock")
        + [Feature(name="log2_batch_heads", dtype="float"),
           Feature(name="log2_batch_kv_heads", dtype="float")]
        + [Feature(name=f"kv{block}_{what}", dtype=kind) for block in _ATTN_SMALL_KV_BLOCKS
           for what, kind in (("tiles", "int"), ("log2_kv_head_ctas", "float"),
                              ("log2_head_ctas", "float"))]
        + [Feature(name="log2_query_rows", dtype="float"),
           Feature(name="log2_q_width", dtype="float"),
           Feature(name="log2_kv_width", dtype="float")]
        + _DTYPE_FEATURES),
    "collective": tuple(
        [Feature(name="size_bytes", dtype="int"), Feature(name="log2_size_bytes", dtype="float"),
         Feature(name="log2_chunk_bytes", dtype="float"), Feature(name="group_size", dtype="int"),
         Feature(name="ranks_per_node", dtype="int"), Feature(name="nodes", dtype="int"),
         Feature(name="bus_factor", dtype="float"), Feature(name="log2_bus_bytes", dtype="float"),
         Feature(name="log2_link_s", dtype="float"), Feature(name=ROOFLINE_FEATURE, dtype="float")]
        + _onehot("kind", [k.value for k in CollectiveKind]) + _DTYPE_FEATURES),
    "memory": tuple(
        _dims(["rows", "cols"]) + [Feature(name="backward", dtype="bool")] + _COMMON
        + _onehot("kind", [k.value for k in MemoryOpKind]) + _DTYPE_FEATURES),
    "moe": tuple(
        _dims(["tokens", "hidden", "experts", "top_k"]) + _COMMON
        + _onehot("kind", [k.value for k in MoEOpKind]) + _DTYPE_FEATURES),
}

# Per family, the features along which latency cannot fall while the others stay put: more
# rows, tokens, heads, FLOPs or bytes is more work. A log-latency booster may be constrained to
# be non-decreasing in them (`HyperParams.monotone`, a search choice): trees then cannot dip
# between two measured shapes, nor learn a drop from noise. Wave, tile, ratio and flag
# features stay free: wave quantisation and kernel selection do make latency fall at times.
_WORK = ("log2_flops", "log2_bytes", "log2_compute_s", "log2_memory_s", ROOFLINE_FEATURE)
MONOTONE_FEATURES: dict[str, frozenset[str]] = {
    "gemm": frozenset(("m", "n", "k", "batch", "log2_m", "log2_n", "log2_k", "log2_batch",
                       *_WORK)),
    "attention": frozenset(("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim",
                            "log2_batch", "log2_q_len", "log2_kv_len", "log2_heads",
                            "log2_kv_heads", "log2_head_dim", "log2_score_pairs",
                            "log2_kv_tokens", "log2_batch_heads", "log2_batch_kv_heads",
                            "log2_query_rows", *_WORK)),
    "collective": frozenset(("size_bytes", "log2_size_bytes", "log2_bus_bytes", "log2_link_s",
                             ROOFLINE_FEATURE)),
    "memory": frozenset(("rows", "cols", "log2_rows", "log2_cols", *_WORK)),
    "moe": frozenset(("tokens", "hidden", "experts", "top_k", "log2_tokens", "log2_hidden",
                      "log2_experts", "log2_top_k", *_WORK)),
}


def monotone_constraints(family: str) -> str:
    """XGBoost's ``monotone_constraints`` for a log-latency booster of ``family``: 1 for each
    feature of `MONOTONE_FEATURES`, 0 for the rest, in schema order."""
    names = feature_names(family)
    unknown = MONOTONE_FEATURES.get(family, frozenset()) - set(names)
    if unknown:
        raise SpecError(f"MONOTONE_FEATURES[{family!r}]", f"not in the schema: {sorted(unknown)}")
    return "(" + ",".join("1" if n in MONOTONE_FEATURES.get(family, ()) else "0"
                          for n in names) + ")"


_FEATURE_FUNCTIONS: dict[str, tuple[type, Callable[..., list[float]]]] = {
    "gemm": (GemmSpec, gemm_features),
    "attention": (AttentionSpec, attention_features),
    "collective": (CollectiveSpec, collective_features),
    "memory": (MemoryBoundSpec, memory_features),
    "moe": (MoESpec, moe_features),
}


def schema_version(family: str) -> int:
    """The feature schema version of one family (see the module doc's history)."""
    schema_for(family)  # unknown family: a clear error
    return SCHEMA_VERSIONS[family]


def feature_names(family: str) -> list[str]:
    return [f.name for f in schema_for(family)]


def schema_for(family: str) -> tuple[Feature, ...]:
    try:
        return FEATURE_SCHEMA[family]
    except KeyError:
        raise UnknownNameError("operator family", family, list(FEATURE_SCHEMA)) from None


def feature_matrix(family: str, ops: Sequence[OpSpec], hw: HardwareSpec) -> np.ndarray:
    """[len(ops), len(schema)] float64 matrix for one family; rejects ops of another family."""
    cls, fn = _FEATURE_FUNCTIONS[family]
    return fill_rows(family, cls, fn, ops, hw, len(schema_for(family)))


def fill_rows(family: str, cls: type, fn: Callable[..., list[float]], ops: Sequence[OpSpec],
              hw: HardwareSpec, width: int) -> np.ndarray:
    """[len(ops), width] float64 matrix of ``fn(op, hw)`` rows; an op of another family than
    ``cls`` is a named error (used by the per-GPU and the transfer feature matrices)."""
    out = np.empty((len(ops), width), dtype=np.float64)
    for i, op in enumerate(ops):
        if not isinstance(op, cls):
            raise SpecError(f"ops[{i}]", f"expected a {family} spec, got {type(op).__name__}")
        out[i] = fn(op, hw)
    return out


def roofline_seconds(family: str, features: np.ndarray) -> np.ndarray:
    """The `ideal_time_s` column of a feature matrix, in seconds."""
    index = feature_names(family).index(ROOFLINE_FEATURE)
    seconds: np.ndarray = np.exp2(features[:, index])
    return seconds


def schema_document(family: str) -> dict[str, object]:
    """What ``schema.json`` holds: version, family and the ordered (name, dtype) list."""
    return {"schema_version": schema_version(family), "family": family,
            "features": [{"name": f.name, "dtype": f.dtype} for f in schema_for(family)]}
