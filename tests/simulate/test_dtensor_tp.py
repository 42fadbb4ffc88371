# SPDX-License-Identifier: Apache-2.0
"""torchtitan's tensor parallelism as DTensor and Inductor's micro-pipeline TP run it: no
Megatron re-gather in backward, a re-concatenation copy per sequence-parallel collective on
dim 1, and async TP's backward reduce-scatters left unfused (exposed)."""

from __future__ import annotations

import pytest

from analytical.hardware import get_hardware
from analytical.layer_spec import Sharding, Stream
from analytical.model import load_model
from analytical.ops import CollectiveKind
from analytical.parallel import Recompute
from simulate.costs import block_cost
from simulate.dtensor_tp import sp_layout_copies
from simulate.efficiency import tp_overlap_exposes_bwd_rs
from simulate.engines import EngineChain
from simulate.graph import TrainStep, head_block, layer_block


def _step(framework: str, tp_overlap: bool = False, recompute=Recompute.SELECTIVE) -> TrainStep:
    return TrainStep(sharding=Sharding(tp=8, sp=True, tp_rpn=8), micro_batch=2, seq_len=4096,
                     framework=framework, tp_overlap=tp_overlap, recompute=recompute)


def _layer(framework: str, tp_overlap: bool = False, recompute=Recompute.SELECTIVE):
    return layer_block(load_model("llama-3-8b"), _step(framework, tp_overlap, recompute),
                       moe=False)


def _tp(nodes, kind=None):
    return [n for n in nodes if n.stream == Stream.TP and (kind is None or n.op.kind == kind)]


def test_dtensor_backward_has_no_megatron_regather():
    for recompute in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL):
        titan, megatron = _layer("torchtitan", recompute=recompute), _layer("megatron",
                                                                            recompute=recompute)
        assert not any(n.name.endswith(".regather") for n in titan.bwd)
        assert sum(n.name.endswith(".regather") for n in megatron.bwd) == 2
        # the backward's own all-gathers (the reduce-scatters' adjoints) are the same
        def own(b):
            return [n.name for n in _tp(b.bwd, CollectiveKind.ALL_GATHER)
                    if not n.name.startswith("recompute.")]
        assert len(own(megatron)) - len(own(titan)) == 2


def test_each_dim1_sp_collective_copies_its_whole_tensor_once():
    block = _layer("torchtitan")
    cats = [n for n in (*block.fwd, *block.bwd) if n.name.endswith(".sp_cat")]
    tp_nodes = _tp(block.fwd) + _tp(block.bwd)
    assert len(cats) == len(tp_nodes) == 10  # 2 AG + 2 RS forward, 2 recomputed AG, 4 backward
    tokens, hidden = 2 * 4096, 4096
    assert {(n.op.rows, n.op.cols) for n in cats} == {(tokens, hidden)}  # the gathered tensor
    assert not any(n.name.endswith(".sp_cat") for n in (*_layer("megatron").fwd,
                                                        *_layer("megatron").bwd))
    # async TP's fused kernels read the shards in place; its backward reduce-scatters are not
    # fused and keep the copy (a recomputed forward's are fused)
    fused = _layer("torchtitan", tp_overlap=True, recompute=Recompute.FULL)
    left = [n.name for n in (*fused.fwd, *fused.bwd) if n.name.endswith(".sp_cat")]
    assert left == ["mlp.sp_all_gather.bwd.sp_cat", "attn.sp_all_gather.bwd.sp_cat"]
    head = head_block(load_model("llama-3-8b"), _step("torchtitan"))
    assert len([n for n in (*head.fwd, *head.bwd) if n.name.endswith(".sp_cat")]) == 2
    assert sp_layout_copies("nemo", block.fwd, tokens, tp_overlap=False, backward=False) == []


def test_async_tp_backward_reduce_scatters_stay_exposed():
    assert tp_overlap_exposes_bwd_rs("torchtitan")
    assert not tp_overlap_exposes_bwd_rs("megatron")
    chain = EngineChain(get_hardware("h100-sxm"), use_store=False, use_predictors=False)
    block = _layer("torchtitan", tp_overlap=True, recompute=Recompute.FULL)
    ops = [n.op for n in (*block.fwd, *block.bwd)]
    est = dict(zip((o.key for o in ops), chain.estimate_many(ops), strict=True))
    hidden = block_cost(block, est, tp_overlap=True, slowdown=1.0)
    exposed = block_cost(block, est, tp_overlap=True, slowdown=1.0, bwd_rs_exposed=True)
    own_rs = [n for n in _tp(block.bwd, CollectiveKind.REDUCE_SCATTER)
              if not n.name.startswith("recompute.")]
    assert len(own_rs) == 2
    rs_s = sum(est[n.op.key].latency_s * n.count for n in own_rs)
    assert exposed.fwd == hidden.fwd
    assert exposed.bwd.elapsed_s > hidden.bwd.elapsed_s
    # each exposed one adds at most its whole time (it also frees the GEMM it hid behind)
    assert exposed.bwd.elapsed_s - hidden.bwd.elapsed_s <= rs_s * (1 + 1e-9)
    off = block_cost(block, est, tp_overlap=False, slowdown=1.0)
    assert exposed.bwd.elapsed_s < off.bwd.elapsed_s


@pytest.mark.parametrize("tp_comm", [False, True])
def test_search_prices_torchtitan_tp_as_simulate_does(tp_comm, tmp_path, monkeypatch):
    """The search's evaluator prices the same blocks with the same overlap switches (the
    reduce-scatter chunks and the exposed backward reduce-scatters)."""
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    from simulate.engines import EngineOptions
    from simulate.scenario import load_scenario
    from simulate.search.training_search import search_training
    from simulate.training import run_training

    doc = {"name": "x", "model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"parallel": {"tp": 8, "sp": True}, "global_batch": 8, "micro_batch": 1,
                        "seq_len": 4096, "recompute": "selective", "framework": "torchtitan",
                        "overlap": {"tp_comm": tp_comm}}}
    want = run_training(load_scenario(doc), use_store=False, use_predictors=False).tokens_per_s
    doc["training"]["parallel"] = {"tp": [8], "sp": True}
    res = search_training(doc, executor="serial",
                          engines=EngineOptions(use_store=False, use_predictors=False))
    got = {r["layout"]["micro_batch"]: r["tokens_per_s"] for r in res.rows}
    assert got[1] == pytest.approx(want, rel=1e-9)


def test_per_op_sac_recomputes_wk_wo_and_w3_as_torchtitan_issues_them():
    """torchtitan's seven matmuls per block (wq wk wv wo w1 w3 w2): every second one, wk, wo
    and w3, is recomputed, at its own width; full recompute re-runs all seven."""
    from analytical.layer_spec import Sharding as Sh
    from simulate.dtensor_tp import separate_projections

    def recomputed(framework, recompute, tp=1):
        step = TrainStep(sharding=Sh(tp=tp, sp=tp > 1), micro_batch=1, seq_len=4096,
                         framework=framework, recompute=recompute)
        block = layer_block(load_model("llama-3-8b"), step, moe=False)
        return [(n.name, n.op.n) for n in block.bwd
                if n.name.startswith("recompute.") and type(n.op).__name__ == "GemmSpec"]

    assert recomputed("torchtitan", Recompute.SELECTIVE) == [
        ("recompute.qkv_proj.wk", 8 * 128), ("recompute.out_proj", 4096),
        ("recompute.mlp.up_gate.w3", 14336)]
    assert recomputed("torchtitan", Recompute.SELECTIVE, tp=8)[0] == ("recompute.qkv_proj.wk", 128)
    assert [n for n, _ in recomputed("torchtitan", Recompute.FULL)] == [
        "recompute.qkv_proj.wq", "recompute.qkv_proj.wk", "recompute.qkv_proj.wv",
        "recompute.out_proj", "recompute.mlp.up_gate.w1", "recompute.mlp.up_gate.w3",
        "recompute.mlp.down"]
    assert recomputed("megatron", Recompute.SELECTIVE) == []  # Megatron's core-attention policy
    fwd = _layer("megatron").fwd
    assert separate_projections("megatron", fwd, 512, 128) == list(fwd)


def test_float8_tensorwise_tp_gathers_in_fp8_and_casts_the_shard():
    """torchtitan's float8 TP (tensorwise): every TP all-gather carries 1 byte per element and
    the column-parallel inputs are cast on the sequence shard before it; rowwise gathers bf16."""
    from analytical.dtypes import DType
    from analytical.layer_spec import Precision

    def layer(recipe: str):
        step = TrainStep(sharding=Sharding(tp=8, sp=True, tp_rpn=8), micro_batch=2,
                         seq_len=4096, framework="torchtitan", recompute=Recompute.FULL,
                         precision=Precision(gemm=DType.FP8, act=DType.BF16), fp8_recipe=recipe)
        return layer_block(load_model("llama-3-8b"), step, moe=False)

    tensorwise, rowwise = layer("tensorwise"), layer("rowwise")
    for b, dtype in ((tensorwise, DType.FP8), (rowwise, DType.BF16)):
        gathers = _tp((*b.fwd, *b.bwd), CollectiveKind.ALL_GATHER)
        assert gathers and all(n.op.dtype == dtype for n in gathers)
        assert all(n.op.dtype == DType.BF16
                   for n in _tp((*b.fwd, *b.bwd), CollectiveKind.REDUCE_SCATTER))
    tokens = 2 * 4096
    gather = {n.name: n.op.size_bytes for n in _tp(tensorwise.fwd)}["attn.sp_all_gather"]
    assert gather == tokens * 4096  # [tokens, hidden] in fp8
    def casts(b):  # one input cast for wq, wk and wv (the siblings share it)
        return [n.op.rows for n in b.fwd if n.name.startswith("qkv_proj.")
                and n.name.endswith(".fp8_cast_input")]

    assert (casts(tensorwise), casts(rowwise)) == ([tokens // 8], [tokens])


def test_torchtitan_prices_its_separate_projections():
    """torchtitan issues wq, wk, wv and w1, w3 as separate GEMMs (each reading the input), sums
    their input gradients, and casts the shared input to fp8 once; Megatron keeps them fused."""
    def gemms(framework: str):
        b = _layer(framework, recompute=Recompute.NONE)
        return {n.name: n for n in (*b.fwd, *b.bwd)}

    titan, megatron = gemms("torchtitan"), gemms("megatron")
    assert [titan[f"qkv_proj.{w}"].op.n for w in ("wq", "wk", "wv")] == [512, 128, 128]
    assert titan["qkv_proj.wk.dgrad"].op.k == 128 and "qkv_proj" not in titan
    assert {"qkv_proj.wk.dx_sum", "qkv_proj.wv.dx_sum", "mlp.up_gate.w3.dx_sum"} <= set(titan)
    assert "qkv_proj" in megatron and not any(k.endswith(".dx_sum") for k in megatron)
