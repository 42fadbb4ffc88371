# SPDX-License-Identifier: Apache-2.0
"""Closed-form FLOPs, bytes and keys of the operator vocabulary."""

from __future__ import annotations

import pytest

from analytical.dtypes import DType, parse_dtype
from analytical.errors import SpecError, UnknownNameError
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
    arithmetic_intensity,
    op_from_dict,
    op_to_dict,
)


def test_gemm_flops_and_bytes_closed_form() -> None:
    g = GemmSpec(m=4096, n=8192, k=1024, dtype=DType.BF16, batch=3)
    assert g.flops == 2 * 3 * 4096 * 8192 * 1024
    assert g.bytes == 3 * (4096 * 1024 + 1024 * 8192 + 4096 * 8192) * 2
    assert g.key == "gemm/bf16/b3/4096x8192x1024"


def test_fp8_gemm_writes_bf16_and_int4_is_half_a_byte() -> None:
    g = GemmSpec(m=2, n=2, k=2, dtype=DType.FP8)
    assert g.bytes == (4 + 4) * 1 + 4 * 2
    assert DType.INT4.bytes == 0.5
    assert GemmSpec(m=1, n=4, k=4, dtype=DType.INT4).bytes == (4 + 16) * 0.5 + 4 * 2


def test_attention_causal_pairs_and_flops() -> None:
    full = AttentionSpec(batch=2, q_len=1024, kv_len=1024, heads=32, kv_heads=8, head_dim=128)
    assert full.score_pairs == 1024 * 1025 / 2
    assert full.flops == 4 * 2 * 32 * 128 * 1024 * 1025 / 2
    noncausal = AttentionSpec(batch=1, q_len=64, kv_len=256, heads=4, kv_heads=4, head_dim=64,
                              causal=False)
    assert noncausal.flops == 4 * 4 * 64 * 64 * 256
    decode = AttentionSpec(batch=8, q_len=1, kv_len=4096, heads=32, kv_heads=8, head_dim=128,
                           phase=Phase.DECODE)
    assert decode.score_pairs == 4096  # the one new query sees the whole cache
    # decode reads the whole KV cache: 2 * B * T * G * D * 2 bytes dominates
    assert decode.bytes == 8 * 32 * 128 * 2 + 2 * 8 * 4096 * 8 * 128 * 2 + 8 * 32 * 128 * 2
    bwd = AttentionSpec(batch=2, q_len=1024, kv_len=1024, heads=32, kv_heads=8, head_dim=128,
                        backward=True)
    assert bwd.flops == pytest.approx(2.5 * full.flops)


def test_attention_rejects_bad_gqa_and_decode_backward() -> None:
    with pytest.raises(SpecError, match="kv_heads"):
        AttentionSpec(batch=1, q_len=1, kv_len=1, heads=32, kv_heads=5, head_dim=64)
    with pytest.raises(SpecError, match="backward"):
        AttentionSpec(batch=1, q_len=1, kv_len=8, heads=4, kv_heads=4, head_dim=64,
                      phase=Phase.DECODE, backward=True)


@pytest.mark.parametrize(("kind", "n", "factor"), [
    (CollectiveKind.ALL_REDUCE, 2, 1.0),
    (CollectiveKind.ALL_REDUCE, 8, 2 * 7 / 8),
    (CollectiveKind.ALL_GATHER, 8, 7 / 8),
    (CollectiveKind.REDUCE_SCATTER, 4, 3 / 4),
    (CollectiveKind.ALL_TO_ALL, 8, 7 / 8),
    (CollectiveKind.BROADCAST, 8, 1.0),
])
def test_collective_bus_volume(kind: CollectiveKind, n: int, factor: float) -> None:
    spec = CollectiveSpec(kind=kind, size_bytes=1 << 30, group_size=n, ranks_per_node=n)
    assert spec.bytes == pytest.approx(factor * (1 << 30))


def test_collective_nodes_and_validation() -> None:
    spec = CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=1024, group_size=32,
                          ranks_per_node=8)
    assert spec.nodes == 4
    with pytest.raises(SpecError, match="send_recv"):
        CollectiveSpec(kind=CollectiveKind.SEND_RECV, size_bytes=8, group_size=4, ranks_per_node=4)
    with pytest.raises(SpecError, match="ranks_per_node"):
        CollectiveSpec(kind=CollectiveKind.ALL_GATHER, size_bytes=8, group_size=12,
                       ranks_per_node=8)


def test_memory_ops_bytes() -> None:
    norm = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=8192, cols=4096)
    assert norm.bytes == 2 * 8192 * 4096 * 2  # read x, write y
    add = MemoryBoundSpec(kind=MemoryOpKind.ADD, rows=10, cols=10, dtype=DType.FP32)
    assert add.bytes == 3 * 100 * 4
    swiglu_bwd = MemoryBoundSpec(kind=MemoryOpKind.SWIGLU, rows=2, cols=8, backward=True)
    assert swiglu_bwd.bytes == 5 * 16 * 2
    assert norm.key == "memory/rmsnorm/bf16/8192x4096/fwd"


def test_moe_dispatch_combine() -> None:
    d = MoESpec(kind=MoEOpKind.DISPATCH, tokens=4096, hidden=4096, experts=8, top_k=2)
    assert d.bytes == 3 * 4096 * 4096 * 2
    c = MoESpec(kind=MoEOpKind.COMBINE, tokens=4096, hidden=4096, experts=8, top_k=2)
    assert c.flops == 2 * 4096 * 2 * 4096
    with pytest.raises(SpecError, match="top_k"):
        MoESpec(kind=MoEOpKind.DISPATCH, tokens=1, hidden=1, experts=2, top_k=4)


def test_round_trip_and_named_errors() -> None:
    specs = [
        GemmSpec(m=3, n=5, k=7, dtype=DType.FP16, batch=2),
        AttentionSpec(batch=1, q_len=4, kv_len=16, heads=8, kv_heads=2, head_dim=64,
                      phase=Phase.DECODE),
        CollectiveSpec(kind=CollectiveKind.ALL_GATHER, size_bytes=4096, group_size=8,
                       ranks_per_node=8),
        MemoryBoundSpec(kind=MemoryOpKind.SOFTMAX, rows=4, cols=4, backward=True),
        MoESpec(kind=MoEOpKind.COMBINE, tokens=8, hidden=8, experts=4, top_k=2),
    ]
    for spec in specs:
        assert op_from_dict(spec.family, op_to_dict(spec)) == spec
    with pytest.raises(SpecError) as err:
        op_from_dict("gemm", {"m": 1, "n": 2, "k": 3, "dtype": "bf17"}, field="families[0]")
    assert err.value.field == "families[0].dtype"
    with pytest.raises(SpecError, match="unknown field"):
        op_from_dict("gemm", {"m": 1, "n": 2, "k": 3, "q": 1})
    with pytest.raises(SpecError, match=r"op\.k.*missing"):
        op_from_dict("gemm", {"m": 1, "n": 2})
    with pytest.raises(SpecError, match="positive"):
        op_from_dict("gemm", {"m": 0, "n": 2, "k": 2})
    with pytest.raises(UnknownNameError, match="operator family"):
        op_from_dict("conv", {})


def test_dtype_aliases_and_intensity() -> None:
    assert parse_dtype("torch.bfloat16") is DType.BF16
    assert parse_dtype("float8_e4m3fn") is DType.FP8
    g = GemmSpec(m=8192, n=8192, k=8192)
    assert arithmetic_intensity(g) == pytest.approx(2 * 8192**3 / (3 * 8192**2 * 2))
