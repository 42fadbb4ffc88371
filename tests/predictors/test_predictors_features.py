# SPDX-License-Identifier: Apache-2.0
"""Feature functions: schema agreement, closed forms for FLOPs and wave quantisation."""

from __future__ import annotations

import math

import pytest

from analytical.dtypes import DType
from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import get_hardware
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
    Phase,
)
from predictors.features import (
    FEATURE_SCHEMA,
    SCHEMA_VERSIONS,
    feature_matrix,
    feature_names,
    ideal_time_s,
    roofline_seconds,
)

HW = get_hardware("h100-sxm")
EXAMPLES = {
    "gemm": GemmSpec(m=4096, n=4096, k=4096),
    "attention": AttentionSpec(batch=2, q_len=1, kv_len=4096, heads=32, kv_heads=8,
                               head_dim=128, phase=Phase.DECODE),
    "collective": CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=2**24, group_size=8,
                                 ranks_per_node=8),
    "memory": MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=4096, cols=8192),
    "moe": MoESpec(kind=MoEOpKind.DISPATCH, tokens=4096, hidden=4096, experts=8, top_k=2),
}


def _row(op):
    return dict(zip(feature_names(op.family), feature_matrix(op.family, [op], HW)[0],
                    strict=True))


@pytest.mark.parametrize("family", sorted(FEATURE_SCHEMA))
def test_row_matches_schema(family):
    names = feature_names(family)
    assert len(names) == len(set(names))
    x = feature_matrix(family, [EXAMPLES[family]], HW)
    assert x.shape == (1, len(names))
    assert math.isfinite(float(x.sum()))
    assert roofline_seconds(family, x)[0] == pytest.approx(ideal_time_s(EXAMPLES[family], HW))


def test_schema_contract():
    # Changing a family's names means a new version for it (saved models would mis-read them).
    assert SCHEMA_VERSIONS == {"gemm": 2, "attention": 2, "collective": 4, "memory": 1, "moe": 1}
    assert feature_names("gemm")[:8] == ["m", "n", "k", "batch", "log2_m", "log2_n", "log2_k",
                                          "log2_batch"]
    assert len(feature_names("gemm")) == 34
    assert len(feature_names("attention")) == 51
    assert len(feature_names("collective")) == 24


def test_attention_work_item_counts():
    # decode, batch 2, 32 heads over 8 KV heads, 4096 cached tokens
    row = _row(EXAMPLES["attention"])
    assert row["log2_batch_heads"] == 6.0 and row["log2_batch_kv_heads"] == 4.0
    assert row["kv64_tiles"] == 64 and row["kv128_tiles"] == 32
    assert row["kv64_log2_kv_head_ctas"] == math.log2(2 * 8 * 64)
    assert row["kv128_log2_head_ctas"] == math.log2(2 * 32 * 32)
    assert row["log2_query_rows"] == math.log2(2 * 32 * 1)
    assert row["log2_q_width"] == math.log2(32 * 128)
    assert row["log2_kv_width"] == math.log2(8 * 128)
    # a partial tile counts whole: 65 tokens need two 64-token tiles
    op = AttentionSpec(batch=1, q_len=1, kv_len=65, heads=8, kv_heads=8, head_dim=64,
                       phase=Phase.DECODE)
    assert _row(op)["kv64_tiles"] == 2 and _row(op)["kv128_tiles"] == 1


def test_gemm_closed_forms():
    row = _row(GemmSpec(m=4096, n=4096, k=4096))
    assert row["log2_flops"] == pytest.approx(math.log2(2 * 4096**3))
    # bf16: A and B read, C written, 2 bytes each
    assert row["log2_bytes"] == pytest.approx(math.log2(3 * 4096 * 4096 * 2))
    tiles = 32 * 32  # 128x128 tiles of a 4096x4096 output
    assert row["tile128x128_log2_tiles"] == pytest.approx(math.log2(tiles))
    assert row["tile128x128_waves"] == pytest.approx(tiles / HW.compute_units)
    assert row["tile128x128_wave_tail"] == pytest.approx(tiles / 132 - 7)  # 1024/132 = 7.76
    assert row["tile128x256_log2_tiles"] == pytest.approx(math.log2(32 * 16))
    assert row["tile128x128_padding_eff"] == 1.0
    assert row["dtype_bf16"] == 1.0 and row["dtype_fp8"] == 0.0


def test_wave_quantisation_exact_fit_and_padding():
    # m = 128 * 132 rows -> exactly one full wave of 128x128 tiles when n = 128
    row = _row(GemmSpec(m=128 * 132, n=128, k=64, dtype=DType.FP8))
    assert row["tile128x128_waves"] == 1.0
    assert row["tile128x128_wave_tail"] == 0.0
    assert row["tile128x128_wave_utilisation"] == 1.0
    # n = 100 fills 100/128 of a 128-wide tile; with a 256-wide tile only 100/256
    row = _row(GemmSpec(m=128, n=100, k=64))
    assert row["tile128x128_padding_eff"] == pytest.approx(100 / 128)
    assert row["tile128x256_padding_eff"] == pytest.approx(100 / 256)
    assert row["tile128x128_wave_utilisation"] == pytest.approx(1 / 132)


def test_gemm_row_alignment_in_bytes():
    # bf16: k = 4096 rows are 8 KiB (capped at 128 B = 2**7); k = 7125 (odd) is 2-byte aligned
    row = _row(GemmSpec(m=64, n=4104, k=7125))
    assert row["k_row_align_log2_bytes"] == 1.0
    assert row["n_row_align_log2_bytes"] == 4.0  # 4104 * 2 = 8208 = 16 * 513: 16-byte rows
    assert _row(GemmSpec(m=64, n=4096, k=4096))["k_row_align_log2_bytes"] == 7.0
    # fp8: one byte an element, so n = 24 rows are 8-byte aligned, not 16 (TMA needs 16)
    assert _row(GemmSpec(m=64, n=24, k=48, dtype=DType.FP8))["n_row_align_log2_bytes"] == 3.0


def test_ideal_time_closed_forms():
    big = GemmSpec(m=8192, n=8192, k=8192)  # compute-bound
    assert ideal_time_s(big, HW) == pytest.approx(big.flops / HW.peak_flops(DType.BF16))
    thin = GemmSpec(m=1, n=8192, k=8192)  # memory-bound: the weight read dominates
    assert ideal_time_s(thin, HW) == pytest.approx(thin.bytes / HW.memory_bw_bytes_per_s)
    ar = EXAMPLES["collective"]
    assert ideal_time_s(ar, HW) == pytest.approx(nccl_time(ar, HW))  # no efficiency factor


def test_attention_and_collective_fields():
    row = _row(EXAMPLES["attention"])
    assert row["gqa_ratio"] == 4.0
    assert row["decode"] == 1.0 and row["causal"] == 1.0
    assert row["log2_kv_tokens"] == pytest.approx(math.log2(2 * 4096))
    row = _row(EXAMPLES["collective"])
    assert row["bus_factor"] == pytest.approx(2 * 7 / 8)  # ring all-reduce, nccl-tests
    assert row["nodes"] == 1.0 and row["kind_all_reduce"] == 1.0
    assert row["log2_chunk_bytes"] == pytest.approx(24 - 3)


def test_wrong_family_and_unknown_family():
    with pytest.raises(SpecError, match=r"ops\[0\]"):
        feature_matrix("attention", [EXAMPLES["gemm"]], HW)
    with pytest.raises(UnknownNameError, match="operator family"):
        feature_names("conv")
