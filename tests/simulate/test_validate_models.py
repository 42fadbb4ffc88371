# SPDX-License-Identifier: Apache-2.0
"""The five small validation architectures trace fully and their GEMM FLOPs are closed forms."""

from __future__ import annotations

import pytest
import torch

from analytical.errors import UnknownNameError
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import TracePhase, unknown_ops_report
from simulate.frontend.hf import build_hf_model
from simulate.validate.models import (
    VALIDATION_MODELS,
    trace_validation_model,
    validation_inputs,
    validation_model,
)

pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def _matmul_params_per_token(spec) -> float:
    """Weights each token multiplies through: 2-D linear/Conv1D weights, plus for MoE the
    top_k experts' 3-D weights of the E stored (balanced routing)."""
    model = build_hf_model(spec.config, device="meta")
    total = 0.0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.nn.Parameter) and weight.dim() == 2 and not isinstance(
                module, torch.nn.Embedding):
            total += weight.numel()
        for param in module.parameters(recurse=False):
            if param.dim() == 3:  # stacked experts [E, out, in]
                top_k = spec.config["num_experts_per_tok"]
                total += param.numel() * top_k / param.shape[0]
    return total


def test_five_architectures_are_registered() -> None:
    types = {spec.config["model_type"] for spec in VALIDATION_MODELS.values()}
    assert {"gpt2", "llama", "qwen2", "mistral", "mixtral"} <= types
    with pytest.raises(UnknownNameError, match="validation model"):
        validation_model("gpt5")


@pytest.mark.parametrize("name", sorted(VALIDATION_MODELS))
def test_train_step_traces_fully_with_closed_form_gemm_flops(name: str) -> None:
    spec = validation_model(name)
    graph = trace_validation_model(spec, "train_step")
    assert not unknown_ops_report(graph), "every aten call of the model is mapped"
    layers = spec.config.get("num_hidden_layers", spec.config.get("n_layer"))
    assert graph.count(Category.ATTENTION, TracePhase.FORWARD) == layers
    assert graph.count(Category.ATTENTION, TracePhase.BACKWARD) == layers
    tokens = spec.batch * spec.seq_len
    forward = graph.flops(Category.GEMM, TracePhase.FORWARD)
    # 2 FLOPs per weight per token (attention score GEMMs live in the SDPA kernel)
    assert forward == pytest.approx(2.0 * tokens * _matmul_params_per_token(spec), rel=1e-9)
    assert graph.flops(Category.GEMM, TracePhase.BACKWARD) == pytest.approx(2 * forward,
                                                                            rel=0.01)


@pytest.mark.parametrize("mode", ["forward", "generate"])
def test_inference_modes_trace_without_unknowns(mode: str) -> None:
    spec = validation_model("llama-small-test")
    graph = trace_validation_model(spec, mode)
    assert not graph.backward and not unknown_ops_report(graph)
    inputs = validation_inputs(spec, mode)
    assert tuple(inputs["input_ids"].shape) == (spec.batch, spec.seq_len)
    assert "labels" not in inputs
    assert "labels" in validation_inputs(spec, "train_step")
