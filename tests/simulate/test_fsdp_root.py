# SPDX-License-Identifier: Apache-2.0
"""ZeRO-3/FSDP root unit (`simulate.graph.fsdp_root_block`): the embedding / head parameters'
all-gather and reduce-scatter, exposed once per micro-batch on the stages that hold them."""

from __future__ import annotations

import pytest

from analytical.model import load_model
from analytical.ops import CollectiveKind
from simulate.scenario import load_scenario
from simulate.training import _blocks, _chunk_blocks, _train_step, run_training


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def _scenario(pp: int = 1, zero: int = 3):
    return load_scenario({
        "name": "x", "model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
        "training": {"parallel": {"dp": 16 // pp, "pp": pp, "zero": zero, "fsdp": zero == 3},
                     "global_batch": 32, "micro_batch": 1, "seq_len": 4096,
                     "recompute": "full", "framework": "torchtitan"}})


def _root_blocks(sc):
    t = sc.training
    model = load_model(sc.model)
    blocks = _blocks(model, t.parallel, _train_step(t, 8))
    return model, {k: b for k, b in blocks.items() if str(k).startswith("fsdp_root")}


def test_root_unit_gathers_embedding_and_untied_head_in_bf16_and_reduces_in_fp32():
    model, roots = _root_blocks(_scenario())
    (ag,), (rs,) = roots["fsdp_root.first"].fwd, roots["fsdp_root.first"].bwd
    params = 2 * model.vocab * model.hidden + model.final_norm_params
    assert ag.op.kind == CollectiveKind.ALL_GATHER and ag.op.size_bytes == 2 * params
    assert rs.op.kind == CollectiveKind.REDUCE_SCATTER and rs.op.size_bytes == 4 * params


def test_root_unit_splits_over_the_first_and_last_stage_and_needs_zero3():
    sc = _scenario(pp=2)
    model, roots = _root_blocks(sc)
    table = model.vocab * model.hidden
    assert roots["fsdp_root.first"].fwd[0].op.size_bytes == 2 * table
    assert roots["fsdp_root.last"].fwd[0].op.size_bytes == 2 * (table + model.final_norm_params)
    chunks = _chunk_blocks(model, sc.training.parallel)
    assert chunks[0][0] == "fsdp_root.first" and chunks[-1][0] == "fsdp_root.last"
    assert _root_blocks(_scenario(zero=1))[1] == {}


def test_root_unit_is_exposed_once_per_micro_batch():
    sc = _scenario()
    res = run_training(sc, use_store=False, use_predictors=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("simulate.training.fsdp_root_blocks", lambda model, step, pp: {})
        mp.setattr("simulate.training.with_root_keys", lambda chunks, par: chunks)
        base = run_training(sc, use_store=False, use_predictors=False)
    assert res.breakdown_s and base.breakdown_s
    added = res.breakdown_s["exposed_communication"] - base.breakdown_s["exposed_communication"]
    assert res.breakdown_s["compute"] == pytest.approx(base.breakdown_s["compute"])
    assert added > 0.0
    assert res.iteration_time_s == pytest.approx(base.iteration_time_s + added, rel=1e-6)
