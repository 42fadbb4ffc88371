# SPDX-License-Identifier: Apache-2.0
"""Training, inference and the profiler's model sweeps ask the same layer (issue 20).

* A training forward and an inference prefill of the same tokens are the same operators, per
  model family (dense MHA, GQA, MLA, MoE).
* Every compute operator a model sweep emits is asked by `simulate` for that model, and every
  one `simulate` asks is emitted by the sweep (collectives and the optimizer step excluded: their
  sweeps are not per model).
"""

from __future__ import annotations

from collections import Counter

import pytest

from analytical.attention_span import AttentionKind
from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.layer_spec import LayerPhase, Sharding, TokenBatch
from analytical.model import load_model
from analytical.ops import op_to_dict
from profiler.sweep_model import model_ops
from simulate.engines import EngineChain, Estimate
from simulate.graph import TrainStep, embedding_block, head_block, layer_block
from simulate.inference.layer_ops import attention_specs, inference_sharding, step_ops
from simulate.inference.step_cost import (
    _DECODE_BATCHES,
    _DECODE_CONTEXTS,
    build_tables,
    token_grid,
)
from simulate.scenario import load_scenario
from simulate.training import run_training

SWEEP_FAMILIES = ("gemm", "attention", "memory", "moe")


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "none.duckdb"))


# (model, tp): tp > 1 for the dense ones (all-reduce after attention and MLP in both); MoE at
# tp=1, where Megatron-Core (tokens split) and vLLM (tokens replicated) lay experts out alike.
FAMILIES = [("llama-2-7b", 2), ("llama-3-8b", 4), ("deepseek-v2-lite", 1), ("mixtral-8x7b", 1)]


@pytest.mark.parametrize(("name", "tp"), FAMILIES)
def test_training_forward_equals_inference_prefill(name, tp):
    model = load_model(name)
    tokens = 1024
    step = TrainStep(sharding=Sharding(tp=tp, tp_rpn=tp), micro_batch=1, seq_len=tokens)
    train: Counter[str] = Counter()
    for moe, layers in ((False, model.dense_layers), (True, model.moe_layers)):
        if layers:
            for n in layer_block(model, step, moe=moe).fwd:
                train[n.op.key] += layers * n.count
    for n in (*embedding_block(model, step).fwd, head_block(model, step).fwd[0]):  # final norm
        train[n.op.key] += n.count
    shard = inference_sharding(tp=tp, gpus_per_node=8)
    infer: Counter[str] = Counter()
    for op, count in step_ops(model, tokens=tokens, shard=shard, weight_dtype=step.precision.gemm):
        infer[op.key] += count
    ((core, _),) = attention_specs(model, shard, TokenBatch(seqs=1, q_len=tokens),
                                   LayerPhase.PREFILL, step.precision.attn)
    infer[core.key] += model.layers
    assert train == infer


@pytest.mark.parametrize("name", ["gemma-2-9b", "mistral-7b"])
def test_windowed_training_forward_cores_equal_inference_prefill_cores(name):
    # a prompt longer than the window: every sliding layer prices only its window's pairs
    model = load_model(name)
    tokens = 2 * model.sliding_window
    step = TrainStep(sharding=Sharding(tp=1), micro_batch=1, seq_len=tokens)
    shard = inference_sharding(tp=1, gpus_per_node=8)
    train: Counter[str] = Counter()
    infer: Counter[str] = Counter()
    for kind in model.layer_kinds:
        for n in layer_block(model, step, moe=False, attention=kind).fwd:
            if n.core:
                train[n.op.key] += n.count
        for op, count in attention_specs(model, shard, TokenBatch(seqs=1, q_len=tokens),
                                         LayerPhase.PREFILL, step.precision.attn, kind):
            infer[op.key] += count
    assert train == infer
    assert AttentionKind.SLIDING in model.layer_kinds and len(infer) > 1


def _shape(op) -> tuple[str, tuple]:
    values = op_to_dict(op)
    values.pop("dtype")
    return op.family, tuple(sorted(values.items()))


def _compute_shapes(ops) -> set[tuple[str, tuple]]:
    return {_shape(op) for op in ops if op.family in SWEEP_FAMILIES
            and getattr(op, "kind", None) != "optimizer"}


class RecordingChain(EngineChain):
    """Roofline chain that remembers every operator it was asked."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list = []

    def estimate_many(self, ops):
        self.asked.extend(ops)
        return super().estimate_many(ops)


TRAINING = [
    ("llama-3-8b", {"tp": 2, "dp": 2, "cp": 2, "sp": True, "zero": 1}, "selective"),
    ("deepseek-v2-lite", {"tp": 2, "dp": 4, "ep": 4, "sp": True, "zero": 1}, "none"),
    ("gpt2", {"tp": 1, "dp": 2}, "full"),
]


@pytest.mark.parametrize(("name", "parallel", "recompute"), TRAINING)
def test_training_asks_exactly_the_model_sweep(name, parallel, recompute):
    gpus = parallel["tp"] * parallel["dp"] * parallel.get("cp", 1)
    doc = {"name": "t", "model": name, "hardware": {"gpu": "h100-sxm", "num_gpus": gpus},
           "training": {"parallel": parallel, "global_batch": 8 * parallel["dp"],
                        "micro_batch": 1, "seq_len": 1024, "recompute": recompute}}
    chain = RecordingChain(get_hardware("h100-sxm"), use_store=False, use_predictors=False)
    result = run_training(load_scenario(doc), chain=chain)
    assert result.fits
    sweep = model_ops(load_model(name), tp=parallel["tp"], seq_len=1024, micro_batch=1,
                      phase=LayerPhase.TRAIN, sp=parallel.get("sp", False),
                      cp=parallel.get("cp", 1), ep=parallel.get("ep", 1))
    assert _compute_shapes(chain.asked) == _compute_shapes(sweep)


@pytest.mark.parametrize(("name", "tp", "ep"), [("llama-3-8b", 2, 1), ("mixtral-8x7b", 4, 4),
                                                ("deepseek-v2-lite", 2, 1)])
def test_inference_asks_exactly_the_model_sweep(name, tp, ep):
    """The step-cost tables ask dense parts on a token grid, prefill attention per chunk length
    and decode attention on a (batch, context) grid: the union of the sweep's prefill and decode
    layouts over those points, no more and no less."""
    model = load_model(name)
    shard = inference_sharding(tp=tp, ep=ep, gpus_per_node=8)
    asked: list = []

    class Recorder:
        def estimate_many(self, ops):
            asked.extend(ops)
            return [Estimate(latency_s=1e-6, engine="roofline") for _ in ops]

    build_tables(model, get_hardware("h100-sxm"), shard, weight_dtype=DType.BF16,
                 kv_dtype=DType.BF16, estimator=Recorder(), max_tokens=512)
    grid = token_grid(512)
    sweep = []
    for t in grid:
        sweep += model_ops(model, tp=tp, seq_len=t, micro_batch=1, phase=LayerPhase.PREFILL,
                           ep=ep)
    for b in sorted(set(grid) | set(_DECODE_BATCHES)):
        for ctx in _DECODE_CONTEXTS:
            sweep += model_ops(model, tp=tp, seq_len=ctx + 1, micro_batch=b,
                               phase=LayerPhase.DECODE, ep=ep)
    asked_shapes, sweep_shapes = _compute_shapes(asked), _compute_shapes(sweep)
    assert asked_shapes <= sweep_shapes
    # and the sweep at the largest prefill and one decode point is all asked
    assert _compute_shapes(model_ops(model, tp=tp, seq_len=512, micro_batch=1,
                                     phase=LayerPhase.PREFILL, ep=ep)) <= asked_shapes
    assert _compute_shapes(model_ops(model, tp=tp, seq_len=129, micro_batch=1,
                                     phase=LayerPhase.DECODE, ep=ep)) <= asked_shapes
