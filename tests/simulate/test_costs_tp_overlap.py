# SPDX-License-Identifier: Apache-2.0
"""TP communication overlap (``overlap.tp_comm``): each collective hides only behind the GEMM
it feeds or drains, so a layer whose collectives outweigh their GEMMs keeps some exposed."""

from __future__ import annotations

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
