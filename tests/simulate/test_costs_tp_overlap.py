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
