# SPDX-License-Identifier: Apache-2.0
"""Acceptance: Llama-3-8B's real config traced forward + backward without weights.

Expected values are closed forms from the architecture (Llama 3 paper, Table 3: hidden 4096,
32 layers, 32 query / 8 KV heads, FFN 14336, vocab 128256):

- GEMM FLOPs forward = 2 * tokens * (parameters used in matmuls: per layer q, k, v, o, gate,
  up, down, plus the LM head); backward = 2x forward (dX and dW).
- Attention FLOPs forward = 4 * L * H * D * pairs with causal pairs S(S+1)/2 per sequence;
  backward = 2.5x forward (our AttentionSpec, FlashAttention-2 accounting).

"Operator count" here means the number of recorded aten calls mapped to a category in one
phase: 7 GEMMs per layer forward (q, k, v, o, gate, up, down) + 1 LM head; 14 per layer in
backward (dX and dW of each) + 2 for the LM head; 1 attention call per layer and phase.
"""

from __future__ import annotations

import pytest
import torch

from simulate.frontend.aten_map import Category
from simulate.frontend.graph import TracePhase, graph_ops, unknown_ops_report
from simulate.frontend.hf import trace_hf

transformers = pytest.importorskip("transformers")

H, L, V, FFN, HEADS, KV_HEADS, D = 4096, 32, 128256, 14336, 32, 8, 128
BATCH, SEQ = 1, 512
LLAMA3_8B = {
    "model_type": "llama", "hidden_size": H, "num_hidden_layers": L, "vocab_size": V,
    "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "intermediate_size": FFN,
    "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


@pytest.fixture(scope="module")
def graph():
    return trace_hf(LLAMA3_8B, mode="train_step", batch=BATCH, seq_len=SEQ, dtype="bf16")


def test_no_weights_allocated_and_all_params_seen(graph) -> None:
    # 8.03 B parameters (Llama 3 8B), bf16, recorded from fake tensors.
    assert sum(p.numel for p in graph.params) == 8_030_261_248
    assert graph.param_bytes == 2 * 8_030_261_248
    assert not unknown_ops_report(graph)


def test_operator_counts_match_the_layer_pattern(graph) -> None:
    assert graph.count(Category.GEMM, TracePhase.FORWARD) == 7 * L + 1
    assert graph.count(Category.GEMM, TracePhase.BACKWARD) == 14 * L + 2
    assert graph.count(Category.ATTENTION, TracePhase.FORWARD) == L
    assert graph.count(Category.ATTENTION, TracePhase.BACKWARD) == L
    attn = [op.spec for op in graph.select(Category.ATTENTION)]
    assert {(a.heads, a.kv_heads, a.head_dim, a.q_len, a.causal) for a in attn} == {
        (HEADS, KV_HEADS, D, SEQ, True)}
    assert sum(a.backward for a in attn) == L


def test_flops_match_the_analytical_model(graph) -> None:
    tokens = BATCH * SEQ
    matmul_params = L * (2 * H * H + 2 * H * KV_HEADS * D + 3 * H * FFN) + H * V
    gemm_fwd = 2.0 * matmul_params * tokens
    attn_fwd = 4.0 * L * HEADS * D * BATCH * SEQ * (SEQ + 1) / 2
    assert graph.flops(Category.GEMM, TracePhase.FORWARD) == pytest.approx(gemm_fwd, rel=0.01)
    assert graph.flops(Category.GEMM, TracePhase.BACKWARD) == pytest.approx(2 * gemm_fwd,
                                                                             rel=0.01)
    assert graph.flops(Category.ATTENTION) == pytest.approx(3.5 * attn_fwd, rel=0.01)
    total = graph.flops(Category.GEMM) + graph.flops(Category.ATTENTION)
    assert total == pytest.approx(3 * gemm_fwd + 3.5 * attn_fwd, rel=0.01)
    # Every costed call is handed on, in order.
    assert len(graph_ops(graph)) == sum(op.spec is not None for op in graph.ops)
    assert all(op.dtype in ("bfloat16", "float32", "int64") for op in graph.ops)


def test_trace_leaves_default_dtype_alone() -> None:
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.slow
def test_llama3_70b_train_step_traces_without_weights() -> None:
    """Llama 3 70B (hidden 8192, 80 layers, 64/8 heads, FFN 28672): 70.55 B parameters, 141 GB
    of bf16 weights that are never allocated; ~5 s here."""
    h, layers, ffn, heads, kv, d, seq = 8192, 80, 28672, 64, 8, 128, 4096
    config = {**LLAMA3_8B, "hidden_size": h, "num_hidden_layers": layers,
              "num_attention_heads": heads, "intermediate_size": ffn}
    graph = trace_hf(config, mode="train_step", batch=1, seq_len=seq, dtype="bf16")
    assert sum(p.numel for p in graph.params) == 70_553_706_496
    matmul_params = layers * (2 * h * h + 2 * h * kv * d + 3 * h * ffn) + h * V
    expected = 3 * 2.0 * matmul_params * seq + 3.5 * 4.0 * layers * heads * d * seq * (seq + 1) / 2
    total = graph.flops(Category.GEMM) + graph.flops(Category.ATTENTION)
    assert total == pytest.approx(expected, rel=0.01)
    assert graph.count(Category.GEMM) == 21 * layers + 3
