# SPDX-License-Identifier: Apache-2.0
"""The memory model's micro-batches in flight per stage agree with the schedule the timing
simulates (Megatron-Core's warm-up counts, `simulate.schedule.stage_order`)."""

from __future__ import annotations

import pytest

from analytical.memory import _inflight_factor
from analytical.parallel import ParallelConfig, Schedule
from simulate.schedule import FWD, stage_order


def _peak_chunks_in_flight(schedule: Schedule, stage: int, pp: int, vpp: int, m: int) -> int:
    held = peak = 0
    for direction, _mb, _chunk in stage_order(schedule, stage, pp, vpp, m):
        held += 1 if direction == FWD else -1
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize(("schedule", "pp", "vpp", "m"), [
    (Schedule.ONE_F_ONE_B, 4, 1, 8), (Schedule.ONE_F_ONE_B, 8, 1, 4),
    (Schedule.INTERLEAVED, 4, 2, 8), (Schedule.INTERLEAVED, 16, 8, 32),
    (Schedule.INTERLEAVED, 8, 4, 8)])
def test_inflight_factor_matches_the_simulated_order(schedule, pp, vpp, m):
    par = ParallelConfig(pp=pp, vpp=vpp)
    for stage in range(pp):
        chunks = _peak_chunks_in_flight(schedule, stage, pp, vpp, m)
        assert _inflight_factor(par, schedule, m, stage) * vpp == pytest.approx(chunks)


def test_scenario_pipeline_split_is_read_and_checked():
    from analytical.errors import SpecError
    from analytical.parallel import PipelineSplit
    from simulate.scenario import parse_parallel

    par, _ = parse_parallel({"pp": 4, "pipeline_split": "embedding-loss"}, None)
    assert par.pipeline_split == PipelineSplit.EMBEDDING_LOSS
    assert parse_parallel({"pp": 4}, None)[0].pipeline_split == PipelineSplit.EVEN
    with pytest.raises(SpecError, match="pipeline_split"):
        parse_parallel({"pp": 4, "pipeline_split": "uneven"}, None)


def test_layout_check_names_an_end_stage_left_without_layers():
    from analytical.errors import SpecError
    from simulate.api import run

    scenario = {"name": "x", "model": "llama-2-7b",
                "hardware": {"gpu": "h100-sxm", "num_gpus": 34, "gpus_per_node": 34},
                "training": {"parallel": {"pp": 34, "pipeline_split": "embedding-loss"},
                             "global_batch": 34, "micro_batch": 1, "seq_len": 4096}}
    with pytest.raises(SpecError, match="training.parallel.pp: pipeline stage 0 holds no layer"):
        run(scenario, use_store=False, use_predictors=False)


def _peak_chunks_merged(stage: int, pp: int, vpp: int, m: int) -> int:
    """`_peak_chunks_in_flight` of the combined 1F1B order, a merged (forward, backward) pass
    counted as one unit: its layers run forward and backward in pairs, so it holds no whole
    chunk more (`analytical.memory._stage_activations`)."""
    from simulate.schedule import _steady_forwards

    order = stage_order(Schedule.INTERLEAVED, stage, pp, vpp, m, combined=True)
    paired = _steady_forwards(order)
    held = peak = 0
    i = 0
    while i < len(order):
        if i in paired:
            i += 2
            continue
        held += 1 if order[i][0] == FWD else -1
        peak = max(peak, held)
        i += 1
    return peak


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 2, 8), (8, 3, 16), (2, 8, 64), (8, 4, 16)])
def test_combined_order_starts_its_steps_with_the_plain_peak(pp, vpp, m):
    """The extra warm-up forward of the combined order is the forward the plain order runs
    before its first backward: the chunks held are the same, only a merged pass adds."""
    par = ParallelConfig(pp=pp, vpp=vpp)
    for stage in range(pp):
        plain = _peak_chunks_in_flight(Schedule.INTERLEAVED, stage, pp, vpp, m)
        assert _peak_chunks_merged(stage, pp, vpp, m) == plain
        assert _inflight_factor(par, Schedule.INTERLEAVED, m, stage) * vpp == pytest.approx(plain)


@pytest.mark.parametrize(("pp", "vpp", "schedule", "m", "extra"), [
    (4, 2, Schedule.INTERLEAVED, 8, True),  # merged passes on every stage
    (4, 2, Schedule.INTERLEAVED, 4, False),  # stage 0: 6 + 4 + 1 = 11 >= 8 chunks, all warm-up
    (1, 1, Schedule.ONE_F_ONE_B, 4, True),  # no pipeline: first forward alone, then merged
    (1, 1, Schedule.ONE_F_ONE_B, 1, False),  # one micro-batch: nothing to merge
])
def test_combined_1f1b_holds_one_more_layer(pp, vpp, schedule, m, extra):
    from analytical.activations import activation_bytes_per_layer
    from analytical.memory import training_memory
    from analytical.model import load_model
    from analytical.parallel import Recompute

    model = load_model("mixtral-8x7b")
    par = ParallelConfig(tp=2, pp=pp, vpp=vpp, dp=8, ep=8, sp=True)
    kw = dict(micro_batch=1, seq_len=4096, recompute=Recompute.SELECTIVE, schedule=schedule,
              num_microbatches=m)
    plain = training_memory(model, par, **kw).activations_bytes
    combined = training_memory(model, par, combined_1f1b=True, **kw).activations_bytes
    layer = activation_bytes_per_layer(model, par, micro_batch=1, seq_len=4096,
                                       recompute=Recompute.SELECTIVE, moe_layer=True)
    assert combined - plain == pytest.approx(layer if extra else 0.0)


@pytest.mark.parametrize(("parallel", "schedule", "moe_a2a", "extra"), [
    ({"tp": 2, "pp": 4, "dp": 8, "vpp": 2, "ep": 8, "sp": True}, "interleaved", True, True),
    ({"tp": 2, "pp": 4, "dp": 8, "vpp": 2, "ep": 8, "sp": True}, "interleaved", False, False),
    ({"tp": 2, "pp": 4, "dp": 8, "ep": 8, "sp": True}, "1f1b", True, False),  # Megatron: no combined
])
def test_simulate_memory_follows_the_a2a_overlap(parallel, schedule, moe_a2a, extra):
    from simulate.api import run

    def memory(a2a: bool) -> float:
        scenario = {"name": "x", "model": "mixtral-8x7b",
                    "hardware": {"gpu": "h100-sxm", "num_gpus": 64, "gpus_per_node": 8},
                    "training": {"parallel": parallel, "global_batch": 64, "micro_batch": 1,
                                 "seq_len": 4096, "recompute": "selective", "schedule": schedule,
                                 "overlap": {"moe_a2a": a2a}}}
        return run(scenario, use_store=False, use_predictors=False).training.memory.total_bytes

    assert (memory(moe_a2a) > memory(False)) is extra
