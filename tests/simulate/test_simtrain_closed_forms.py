# SPDX-License-Identifier: Apache-2.0
"""Closed forms the training simulator must reproduce exactly (issue #5 acceptance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytical.hardware import get_hardware
from analytical.layer_spec import Sharding, Stream
from analytical.memory import Framework, training_memory
from analytical.model import load_model
from analytical.parallel import Schedule
from simulate.efficiency import framework_estimates
from simulate.engines import EngineChain, Estimate
from simulate.graph import TrainStep, embedding_block, head_block, layer_block
from simulate.overlap import overlap_window, share_link
from simulate.scenario import load_scenario
from simulate.schedule import simulate_pipeline
from simulate.training import run_training


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "none.duckdb"))


class FreeCommChain(EngineChain):
    """Roofline chain in which every collective costs nothing."""

    def estimate_many(self, ops):
        return [Estimate(latency_s=0.0, engine="roofline") if op.family == "collective" else e
                for op, e in zip(ops, super().estimate_many(ops), strict=True)]


def _doc(model="gpt2-xl", **training):
    base = {"parallel": {"tp": 1, "pp": 1, "dp": 1}, "global_batch": 8, "micro_batch": 1,
            "seq_len": 1024}
    base.update(training)
    gpus = 1
    for k in ("tp", "pp", "dp", "cp"):
        gpus *= base["parallel"].get(k, 1)
    return {"name": "t", "model": model,
            "hardware": {"gpu": "h100-sxm", "num_gpus": gpus}, "training": base}


def _chain(free: bool = False):
    cls = FreeCommChain if free else EngineChain
    return cls(get_hardware("h100-sxm"), use_store=False, use_predictors=False)


@pytest.mark.parametrize(("schedule", "vpp"), [(Schedule.ONE_F_ONE_B, 1), (Schedule.GPIPE, 1),
                                               (Schedule.INTERLEAVED, 2),
                                               (Schedule.INTERLEAVED, 4)])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (8, 16), (4, 4)])
def test_bubble_fraction_closed_form(schedule, vpp, p, m):
    """Zero communication: bubble = (p-1)/(m+p-1), and (p-1)/v / (m + (p-1)/v) interleaved
    (Narayanan et al. 2021, sec. 2.2.1 and 2.2.2)."""
    f, b = 1.0 / vpp, 2.0 / vpp
    r = simulate_pipeline(schedule=schedule, pp=p, vpp=vpp, num_microbatches=m,
                          fwd_s=[[f] * vpp] * p, bwd_s=[[b] * vpp] * p, p2p_s=0.0)
    ideal = (p - 1) / vpp
    assert r.bubble_fraction(0) == pytest.approx(ideal / (m + ideal), rel=1e-12)
    assert r.span_s == pytest.approx(3.0 * (m + ideal), rel=1e-12)


def test_single_gpu_time_is_sum_of_operator_times():
    sc = load_scenario(_doc())
    chain = _chain()
    r = run_training(sc, chain=chain)
    model, t = load_model("gpt2-xl"), sc.training
    sh = TrainStep(sharding=Sharding(), micro_batch=1, seq_len=1024, recompute=t.recompute)
    blocks = [(layer_block(model, sh, moe=False), model.layers), (embedding_block(model, sh), 1),
              (head_block(model, sh), 1)]
    def latency(op):  # the engine's estimate as the framework's kernels re-time it
        return framework_estimates([op], [chain.estimate(op)], chain.hardware,
                                   t.framework)[0].latency_s

    per_mb = sum(times * sum(latency(n.op) * n.count
                             for n in (*blk.fwd, *blk.bwd)) for blk, times in blocks)
    assert all(n.stream == Stream.COMPUTE for blk, _ in blocks for n in (*blk.fwd, *blk.bwd))
    optimizer = r.breakdown_s["optimizer"]
    assert r.iteration_time_s == pytest.approx(t.num_microbatches * per_mb + optimizer, rel=1e-12)
    assert r.breakdown_s["pipeline_bubble"] == 0.0
    assert r.breakdown_s["exposed_communication"] == pytest.approx(0.0, abs=1e-15)


def test_free_comm_doubling_dp_with_global_batch_keeps_step_time():
    one = run_training(load_scenario(_doc(parallel={"dp": 2}, global_batch=8)),
                       chain=_chain(free=True))
    two = run_training(load_scenario(_doc(parallel={"dp": 4}, global_batch=16)),
                       chain=_chain(free=True))
    assert two.iteration_time_s == pytest.approx(one.iteration_time_s, rel=1e-12)
    assert two.tokens_per_s == pytest.approx(2 * one.tokens_per_s, rel=1e-12)


def test_free_comm_doubling_dp_at_fixed_batch_halves_compute():
    one = run_training(load_scenario(_doc(parallel={"dp": 2}, global_batch=16)),
                       chain=_chain(free=True))
    two = run_training(load_scenario(_doc(parallel={"dp": 4}, global_batch=16)),
                       chain=_chain(free=True))
    assert two.breakdown_s["compute"] == pytest.approx(one.breakdown_s["compute"] / 2, rel=1e-12)


def test_memory_equals_analytical_formulas():
    doc = _doc("llama-3-8b", parallel={"tp": 2, "pp": 2, "dp": 2, "sp": True, "zero": 1},
               global_batch=16, recompute="selective")
    sc = load_scenario(doc)
    r = run_training(sc, chain=_chain())
    t = sc.training
    expected = training_memory(load_model("llama-3-8b"), t.parallel, micro_batch=1, seq_len=1024,
                               recompute=t.recompute, schedule=t.schedule,
                               num_microbatches=t.num_microbatches, dropout=False,
                               grad_dtype_bytes=4.0)  # Megatron (default): fp32 main grads
    assert t.framework == Framework.MEGATRON
    assert r.memory == expected


def test_engine_coverage_sums_to_one():
    r = run_training(load_scenario(_doc("llama-3-8b",
                                        parallel={"tp": 2, "pp": 2, "dp": 2, "sp": True,
                                                  "zero": 1}, global_batch=16)), chain=_chain())
    assert sum(r.engine_coverage.values()) == pytest.approx(1.0, abs=1e-12)
    assert r.engine_coverage["roofline"] == pytest.approx(1.0)


def test_breakdown_sums_to_iteration_time():
    r = run_training(load_scenario(_doc("llama-3-8b", parallel={"tp": 2, "pp": 4, "sp": True},
                                        global_batch=16)), chain=_chain())
    assert sum(r.breakdown_s.values()) == pytest.approx(r.iteration_time_s, rel=1e-12)


def test_overlap_window_closed_forms():
    # Collective shorter than the slowed compute: compute loses comm*(1 - 1/ratio).
    assert overlap_window(10.0, 4.0, 2.0) == pytest.approx((12.0, 0.0))
    # Longer: the collective is the critical path, exposed by comm - compute*ratio.
    assert overlap_window(1.0, 5.0, 2.0) == pytest.approx((5.0, 3.0))
    assert overlap_window(3.0, 0.0, 1.5) == (3.0, 0.0)


def test_share_link_splits_bandwidth():
    # Two equal transfers at once on one link each take twice as long.
    assert share_link([(0.0, 1.0, 0), (0.0, 1.0, 1)]) == pytest.approx([2.0, 2.0])
    # One queue runs its jobs back to back.
    assert share_link([(0.0, 1.0, 0), (0.0, 1.0, 0)]) == pytest.approx([1.0, 2.0])
    # A late second transfer shares only the overlap: 0.5 alone, then 2x0.5 shared.
    assert share_link([(0.0, 1.0, 0), (0.5, 1.0, 1)]) == pytest.approx([1.5, 2.0])


def test_gpt3_175b_megatron_mfu_in_published_range():
    """Korthikanti et al. 2022 / Megatron-LM README: GPT-3 175B, TP8 x PP8 on 64 A100, SP +
    selective recompute, batch 64 -> 51.4% MFU; Megatron reports 40-55% for its layouts."""
    from simulate import run

    path = Path(__file__).resolve().parents[2] / "datasets/scenarios/gpt3-175b-megatron-a100.yaml"
    data = run(path, use_store=False,
               use_predictors=False).data
    assert 0.40 <= data["mfu"] <= 0.55


def test_layout_with_an_empty_pipeline_stage_is_rejected() -> None:
    from analytical.errors import SpecError
    from simulate.api import run

    base = Path(__file__).resolve().parents[2] / "datasets" / "scenarios"
    scenario = base / "llama3-70b-tp8-pp4-selective-h100.yaml"
    # 80 layers over pp=32: chunks of 3 fill 27 stages, stages 27..31 would hold nothing
    with pytest.raises(SpecError, match="without layers") as err:
        run(scenario, use_store=False, use_predictors=False,
            overrides=["training.parallel.pp=32", "training.parallel.dp=4",
                       "hardware.num_gpus=1024"])
    assert err.value.field.endswith("parallel.pp")
