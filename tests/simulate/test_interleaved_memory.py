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
