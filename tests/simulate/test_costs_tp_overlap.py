# SPDX-License-Identifier: Apache-2.0
"""TP communication overlap (``overlap.tp_comm``): each collective hides only behind the GEMM
it feeds or drains, so a layer whose collectives outweigh their GEMMs keeps some exposed."""

from __future__ import annotations

import pytest

from analytical.hardware import get_hardware
from analytical.layer_spec import Sharding
from analytical.model import load_model
from simulate.costs import block_cost
from simulate.engines import EngineChain
from simulate.graph import TrainStep, layer_block


def test_paired_overlap_sits_between_none_and_full():
    chain = EngineChain(get_hardware("h100-sxm"), use_store=False, use_predictors=False)
    step = TrainStep(sharding=Sharding(tp=8, sp=True, tp_rpn=8), micro_batch=4, seq_len=8192)
    block = layer_block(load_model("llama-3-8b"), step, moe=False)
    ops = [n.op for n in (*block.fwd, *block.bwd)]
    est = dict(zip((o.key for o in ops), chain.estimate_many(ops), strict=True))
    for slowdown in (1.0, 1.14):
        off = block_cost(block, est, tp_overlap=False, slowdown=slowdown)
        on = block_cost(block, est, tp_overlap=True, slowdown=slowdown)
        for a, b in ((off.fwd, on.fwd), (off.bwd, on.bwd)):
            assert a.compute_s == b.compute_s
            assert b.compute_s < b.elapsed_s < a.elapsed_s


def test_te_pipelined_reduce_scatter_exposes_its_last_chunk():
    """Megatron/NeMo (TE userbuffers) pipeline each forward reduce-scatter in 4 chunks: where
    the paired GEMM outlasts the collective, exactly a quarter of each RS is added to the
    forward, nothing to the backward; torchtitan keeps the paired model."""
    from analytical.layer_spec import Stream
    from simulate.efficiency import tp_overlap_rs_splits

    assert tp_overlap_rs_splits("megatron") == tp_overlap_rs_splits("nemo") == 4
    assert tp_overlap_rs_splits("torchtitan") == 0
    chain = EngineChain(get_hardware("h100-sxm"), use_store=False, use_predictors=False)
    step = TrainStep(sharding=Sharding(tp=2, sp=True, tp_rpn=2), micro_batch=4, seq_len=8192)
    block = layer_block(load_model("llama-3-70b"), step, moe=False)
    ops = [n.op for n in (*block.fwd, *block.bwd)]
    est = dict(zip((o.key for o in ops), chain.estimate_many(ops), strict=True))
    whole = block_cost(block, est, tp_overlap=True, slowdown=1.0)
    split = block_cost(block, est, tp_overlap=True, slowdown=1.0, rs_splits=4)
    rs = sum(est[n.op.key].latency_s * n.count for n in block.fwd
             if n.stream == Stream.TP and n.op.kind == "reduce_scatter")
    assert rs > 0
    assert whole.fwd.elapsed_s == pytest.approx(whole.fwd.compute_s, rel=1e-12)  # all hidden
    assert split.fwd.elapsed_s - whole.fwd.elapsed_s == pytest.approx(rs / 4, rel=1e-6)
    assert split.bwd.elapsed_s == whole.bwd.elapsed_s



def _te_block(tp: int = 4):
    chain = EngineChain(get_hardware("h100-sxm"), use_store=False, use_predictors=False)
    step = TrainStep(sharding=Sharding(tp=tp, sp=True, tp_rpn=tp), micro_batch=1, seq_len=4096)
    block = layer_block(load_model("llama-3-70b"), step, moe=False)
    ops = [n.op for n in (*block.fwd, *block.bwd)]
    est = dict(zip((o.key for o in ops), chain.estimate_many(ops), strict=True))
    return chain, block, est


def test_te_pipelined_gemm_runs_on_the_sms_the_reduce_scatter_leaves():
    """TE's pipeline method with set_sm_margin (initialize_ub defaults: num_sm 16) launches
    every chunk of the forward reduce-scatter's GEMM on units - 16 SMs: on an H100 (132 SMs)
    a GEMM that outlasts its RS takes 132/116 of its time plus the last chunk's RS; frameworks
    without userbuffers get no margin."""
    from simulate.tp_overlap import pipelined_rs_extra_s, rs_gemm_margin

    h100 = get_hardware("h100-sxm")
    margin = rs_gemm_margin("megatron", h100, "2")
    assert margin == pytest.approx(132 / 116)
    assert rs_gemm_margin("nemo", h100, "2") == margin
    assert rs_gemm_margin("torchtitan", h100, "2") == 0.0
    # GEMM-bound: the whole GEMM slowed, plus one chunk of the RS.
    assert pipelined_rs_extra_s(4.0, 4.0, 2.0, 4, margin) == pytest.approx(4.0 * (margin - 1) + 0.5)
    # comm-bound: first GEMM chunk, then every chunk's RS back to back.
    assert pipelined_rs_extra_s(1.0, 1.0, 8.0, 4, margin) == pytest.approx(margin / 4 + 7.0)
    _, block, est = _te_block()
    generic = block_cost(block, est, tp_overlap=True, slowdown=1.14, rs_splits=4)
    te = block_cost(block, est, tp_overlap=True, slowdown=1.14, rs_splits=4, rs_margin=margin)
    assert te.fwd.elapsed_s > generic.fwd.elapsed_s
    assert te.fwd.compute_s == generic.fwd.compute_s
    assert te.bwd.elapsed_s == generic.bwd.elapsed_s


def test_te_split_gemms_are_priced_as_their_chunks():
    """Ring exchange runs the GEMM an all-gather feeds as tp GEMMs of m / tp rows, the pipeline
    the GEMM a forward reduce-scatter drains as 4 of m / 4; the wgrad re-gather (bulk) splits
    nothing. Only TE userbuffers runs with tp_comm get the chunks."""
    from analytical.layer_backward import REGATHER
    from simulate.tp_overlap import chunked_gemms, tp_overlap_args

    chain, block, est = _te_block(tp=8)
    seen: list[int] = []

    def estimate(ops):
        seen.extend(o.m for o in ops)
        return chain.estimate_many(ops)

    chunked = chunked_gemms({"l": block}, 8, 4, estimate)
    fwd_gemms = [n for n in block.fwd if n.op.family == "gemm"]
    tokens = fwd_gemms[0].op.m
    assert set(seen) == {tokens // 8, tokens // 4}
    assert fwd_gemms[0].op.key in chunked  # qkv, fed by the all-gather: 8 chunks
    assert all(chunked[k] > est[k].latency_s for k in chunked)  # smaller GEMMs, lower rate
    # the wgrad re-gather overlaps in bulk: the GEMM after it is not split on its account
    from simulate.tp_overlap import _split_gemms

    tail = [n for n in block.bwd if n.name != "attn.sp_reduce_scatter.bwd"]
    start = next(i for i, n in enumerate(tail) if n.name.endswith(REGATHER))
    assert any(n.op.family == "gemm" for n in tail[start:])
    assert _split_gemms(tail[start:], 8, 0) == {}
    h100 = get_hardware("h100-sxm")
    assert tp_overlap_args("torchtitan", 8, h100, {"l": block}, estimate, True, "2")["chunked"] == {}
    assert tp_overlap_args("megatron", 8, h100, {"l": block}, estimate, False, "2")["chunked"] == {}
    args = tp_overlap_args("megatron", 8, h100, {"l": block}, estimate, True, "2")
    assert args["chunked"] == pytest.approx(chunked)
    whole = block_cost(block, est, tp_overlap=True, slowdown=1.0)
    split = block_cost(block, est, tp_overlap=True, slowdown=1.0, chunked=chunked)
    assert split.fwd.elapsed_s > whole.fwd.elapsed_s
    assert split.bwd.elapsed_s > whole.bwd.elapsed_s


def test_te_1x_defaults_run_the_pipelined_gemm_without_a_margin():
    """TE 1.x's initialize_ub defaults set no SM margin for any method; TE 2.0 (544dd14b) sets
    it for the pipeline. NeMo's ub_cfg states it (1 for the pipelined GEMMs) whatever the TE,
    so only a Megatron run on TE 1.x loses it. The scenario field reaches the step time."""
    from simulate.api import run
    from simulate.tp_overlap import rs_gemm_margin

    h100 = get_hardware("h100-sxm")
    margin = rs_gemm_margin("megatron", h100, "2.9")
    assert margin > 1.0
    assert rs_gemm_margin("megatron", h100, "1.13") == 0.0
    assert rs_gemm_margin("megatron", h100, "1") == 0.0
    assert rs_gemm_margin("nemo", h100, "1.8") == margin

    def step_s(te: str) -> float:
        doc = {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
               "training": {"parallel": {"tp": 8, "pp": 1, "dp": 1, "sp": True},
                            "global_batch": 4, "micro_batch": 1, "seq_len": 4096,
                            "overlap": {"tp_comm": True}, "transformer_engine": te}}
        return run(doc, use_store=False, use_predictors=False).training.iteration_time_s

    assert step_s("1.8") < step_s("2")
