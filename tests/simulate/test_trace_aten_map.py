# SPDX-License-Identifier: Apache-2.0
"""Tracing small modules: each aten call lands on the spec its shapes imply."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.ops import AttentionSpec, GemmSpec, MemoryBoundSpec, MemoryOpKind
from simulate.frontend.aten_map import ATEN_MAP, Category, register
from simulate.frontend.graph import TracePhase, graph_ops, unknown_ops_report
from simulate.frontend.trace import trace_module


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


class _Fn(torch.nn.Module):
    def __init__(self, fn, *shapes: tuple[int, ...]) -> None:
        super().__init__()
        self.fn = fn
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(s))
                                               for s in shapes])

    def forward(self, *xs):
        return self.fn(*xs, *self.weights)


def _trace(fn, inputs, *shapes, backward=False):
    return trace_module(lambda: _Fn(fn, *shapes), lambda: inputs, backward=backward)


def _costed(graph, category):
    return [op.spec for op in graph.select(category)]


def test_linear_is_one_gemm_forward_and_two_backward() -> None:
    x = torch.randn(4, 16, 64)
    g = _trace(lambda x, w: F.linear(x, w), (x,), (96, 64), backward=True)
    fwd = [op.spec for op in g.select(Category.GEMM, TracePhase.FORWARD)]
    bwd = [op.spec for op in g.select(Category.GEMM, TracePhase.BACKWARD)]
    assert fwd == [GemmSpec(m=64, n=96, k=64, dtype=DType.FP32)]
    # dW = dY^T [96, 64 tokens] @ X [64 tokens, 64]: 2*96*64*64 FLOPs; no dX (input needs none)
    assert [s.flops for s in bwd] == [2.0 * 96 * 64 * 64]
    # the forward mm reads the weight (through a transposed view): parameter 0
    assert g.select(Category.GEMM, TracePhase.FORWARD)[0].params == frozenset({0})


def test_bmm_keeps_the_batch_and_bf16() -> None:
    a = torch.randn(3, 8, 32, dtype=torch.bfloat16)
    b = torch.randn(3, 32, 16, dtype=torch.bfloat16)
    g = _trace(torch.bmm, (a, b))
    assert _costed(g, Category.GEMM) == [GemmSpec(m=8, n=16, k=32, batch=3, dtype=DType.BF16)]


def test_sdpa_gqa_causal_forward_and_backward() -> None:
    q = torch.randn(2, 8, 64, 32, requires_grad=True)
    kv = torch.randn(2, 2, 64, 32, requires_grad=True)
    g = _trace(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                              enable_gqa=True),
               (q, kv, kv), backward=True)
    specs = _costed(g, Category.ATTENTION)
    base = dict(batch=2, q_len=64, kv_len=64, heads=8, kv_heads=2, head_dim=32, causal=True,
                dtype=DType.FP32)
    assert specs == [AttentionSpec(**base), AttentionSpec(**base, backward=True)]
    # 4 * B * H * D * S(S+1)/2 forward
    assert specs[0].flops == 4.0 * 2 * 8 * 32 * 64 * 65 / 2


def test_explicit_mask_counts_every_pair() -> None:
    q = torch.randn(1, 4, 16, 8)
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    g = _trace(lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m), (q, mask))
    (spec,) = _costed(g, Category.ATTENTION)
    assert not spec.causal and spec.score_pairs == 16 * 16


def test_norms_elementwise_and_views() -> None:
    x = torch.randn(4, 10, 32)

    def fn(x, w, b):
        y = F.layer_norm(x, (32,), w, b)
        return (F.gelu(y) + y).transpose(0, 1).reshape(-1, 32)

    g = _trace(fn, (x,), (32,), (32,))
    memory = _costed(g, Category.MEMORY)
    assert MemoryBoundSpec(kind=MemoryOpKind.LAYERNORM, rows=40, cols=32,
                           dtype=DType.FP32) in memory
    assert MemoryBoundSpec(kind=MemoryOpKind.GELU, rows=40, cols=32, dtype=DType.FP32) in memory
    assert MemoryBoundSpec(kind=MemoryOpKind.ADD, rows=40, cols=32, dtype=DType.FP32) in memory
    views = g.select(Category.VIEW)
    assert views and all(op.spec is None for op in views)
    assert len(graph_ops(g)) == len(g.ops) - len(views) - sum(
        op.spec is None for op in g.ops if op.category != Category.VIEW)


def test_scalar_operand_reads_one_tensor() -> None:
    g = _trace(lambda x: x * 3.0, (torch.randn(8, 16),))
    (spec,) = _costed(g, Category.MEMORY)
    assert spec.kind == MemoryOpKind.COPY and spec.bytes == 2 * 8 * 16 * 4


def test_embedding_backward_is_sized_by_table_and_tokens() -> None:
    ids = torch.randint(0, 100, (2, 5))
    g = _trace(lambda i, w: F.embedding(i, w).sum(), (ids,), (100, 16), backward=True)
    fwd = [s for s in _costed(g, Category.MEMORY) if s.kind == MemoryOpKind.EMBEDDING]
    assert fwd[0] == MemoryBoundSpec(kind=MemoryOpKind.EMBEDDING, rows=10, cols=16,
                                     dtype=DType.FP32)
    # backward: zero the 100x16 table grad, read and scatter 10 rows: (1600 + 2*160) elements
    assert fwd[1].backward and fwd[1].bytes == (100 * 16 + 2 * 10 * 16) * 4


def test_unknown_ops_are_kept_listed_and_costed_by_bytes() -> None:
    x = torch.randn(32, 64)
    g = _trace(lambda x: torch.cumprod(x, dim=-1), (x,))
    (op,) = g.select(Category.UNKNOWN)
    assert op.aten == "aten.cumprod.default" and op.bytes == 2 * 32 * 64 * 4
    assert op.spec is not None and op.spec.bytes == pytest.approx(op.bytes, rel=0.01)
    (row,) = unknown_ops_report(g)
    assert row.aten == "aten.cumprod.default" and row.count == 1 and row.share == 1.0
    (timed,) = unknown_ops_report(g, latency_s=lambda spec: spec.bytes * 1e-9)
    assert timed.time_s == pytest.approx(op.spec.bytes * 1e-9) and timed.share == 1.0


def test_grouped_mm_fp32_is_traced_as_balanced_groups() -> None:
    x = torch.randn(64, 32)
    offs = torch.tensor([16, 32, 48, 64], dtype=torch.int32)
    g = _trace(lambda x, o, w: torch._grouped_mm(x, w, offs=o), (x, offs), (4, 32, 48))
    assert _costed(g, Category.GEMM) == [GemmSpec(m=16, n=48, k=32, batch=4,
                                                  dtype=DType.FP32)]


def test_registry_rejects_duplicates_and_bad_loss() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register("mm", ATEN_MAP["mm"])
    with pytest.raises(SpecError, match="loss"):
        trace_module(lambda: torch.nn.Identity(), lambda: ((torch.randn(2), "x"),),
                     backward=True)
