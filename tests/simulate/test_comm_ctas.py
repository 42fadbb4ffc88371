# SPDX-License-Identifier: Apache-2.0
"""The CP communicator's NCCL CTA cap (`simulate.comm_ctas`): one channel per CTA, half an
NVLink per channel, on the ring's send/recv inside an NVLink domain."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.ops import CollectiveKind, CollectiveSpec
from simulate import api
from simulate.comm_ctas import cp_p2p_floor_s
from simulate.scenario import parse_training
from simulate.validate import published as pub


def _send(nodes: int) -> CollectiveSpec:
    return CollectiveSpec(kind=CollectiveKind.SEND_RECV, size_bytes=40_100_000, group_size=2,
                          ranks_per_node=2 // nodes)


def test_one_cta_moves_half_an_nvlink():
    """SM100's NCCL NVLink bandwidth is 40.1 GB/s; one p2p channel carries half of it."""
    gb200 = get_hardware("gb200")
    assert cp_p2p_floor_s(_send(1), gb200, 1) == pytest.approx(40.1e6 / 20.05e9)
    assert cp_p2p_floor_s(_send(1), gb200, 2) == pytest.approx(40.1e6 / 40.1e9)
    assert cp_p2p_floor_s(_send(1), gb200, 0) == 0.0  # no cap
    assert cp_p2p_floor_s(_send(2), gb200, 1) == 0.0  # across nodes: not capped here


def test_cp_max_ctas_is_an_overlap_field():
    block = {"parallel": {"dp": 8}, "global_batch": 8, "seq_len": 4096}
    assert parse_training(block).overlap.cp_max_ctas == 0
    assert parse_training({**block, "overlap": {"cp_max_ctas": 1}}).overlap.cp_max_ctas == 1
    with pytest.raises(SpecError, match="cp_max_ctas"):
        parse_training({**block, "overlap": {"cp_max_ctas": -1}})


def test_mlperf_8b_row_states_the_cap_and_its_ring_slows():
    """training_results_v5.1 llama31_8b: conf/nccl/custom_communicator_cta.yaml ``cp:
    max_ctas: 1``. The CP 2 ring of 4,096-token KV blocks no longer hides under attention."""
    row = next(r for r in pub.load_corpus() if r["source"] == "mlperf-training"
               and r["model"] == "llama-3.1-8b" and r["num_gpus"] == "72")
    scenario = pub.row_scenario(row, "mlperf-8b-72")
    assert scenario["training"]["overlap"]["cp_max_ctas"] == 1
    opts = {"use_store": False, "use_predictors": False}
    capped = api.run(scenario, **opts).training
    free = api.run(scenario, overrides=["training.overlap.cp_max_ctas=0"], **opts).training
    assert capped is not None and free is not None
    assert (capped.breakdown_s["exposed_communication"]
            > free.breakdown_s["exposed_communication"] + 0.02)
    assert capped.iteration_time_s > free.iteration_time_s


def test_search_evaluator_applies_the_cap_as_the_run_does(tmp_path, monkeypatch):
    """One code path: the layout search's evaluator times a capped CP ring as `run_training`."""
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    from analytical.model import load_model
    from simulate.engines import EngineChain
    from simulate.scenario import load_scenario
    from simulate.search.evaluator import LayoutEvaluator
    from simulate.training import run_training

    def scenario(ctas: int):
        return load_scenario({
            "name": "cp2", "model": "llama-3-8b", "hardware": {"gpu": "gb200", "num_gpus": 8},
            "training": {"parallel": {"dp": 4, "cp": 2, "zero": 1}, "global_batch": 4,
                         "micro_batch": 1, "seq_len": 8192, "framework": "megatron",
                         "overlap": {"cp_max_ctas": ctas}}})

    chain = EngineChain(get_hardware("gb200"), use_store=False, use_predictors=False)
    evaluator = LayoutEvaluator(load_model("llama-3-8b"), chain.hardware, chain, None)
    capped, free = scenario(1), scenario(0)
    run_capped = run_training(capped, chain=chain).iteration_time_s
    assert run_capped > run_training(free, chain=chain).iteration_time_s
    row = evaluator.evaluate(capped)
    assert row is not None and row["iteration_time_s"] == pytest.approx(run_capped, rel=1e-9)
