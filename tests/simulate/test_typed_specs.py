# SPDX-License-Identifier: Apache-2.0
"""Closed choices are StrEnums that agree with their registries and name the field on a miss."""

from __future__ import annotations

import json

import pytest

from analytical.errors import SpecError
from simulate.inference.spec import parse_serving
from simulate.serving.choices import Preemption, Scheduler, ServingEngine
from simulate.serving.engine_presets import ENGINES_DIR
from simulate.serving.schedulers import SCHEDULERS

ARRIVAL = {"process": "burst", "num_requests": 2}


def test_enums_match_their_registries() -> None:
    assert {s.value for s in Scheduler} == set(SCHEDULERS)
    assert {e.value for e in ServingEngine} == {p.stem for p in ENGINES_DIR.glob("*.yaml")}


@pytest.mark.parametrize(("key", "value", "known"), [
    ("scheduler", "fifo", Scheduler),
    ("preemption", "drop", Preemption),
    ("engine", "tgi", ServingEngine),
])
def test_unknown_choice_names_field_and_lists_known(key: str, value: str, known: type) -> None:
    with pytest.raises(SpecError) as err:
        parse_serving({"arrival": ARRIVAL, key: value})
    assert err.value.field == f"serving.{key}"
    assert all(m.value in err.value.reason for m in known)


def test_choices_parse_to_members_and_print_as_strings() -> None:
    spec = parse_serving({"arrival": ARRIVAL, "scheduler": "chunked_prefill",
                          "preemption": "swap", "engine": "sglang"})
    assert spec.scheduler is Scheduler.CHUNKED_PREFILL
    assert spec.preemption is Preemption.SWAP
    assert spec.engine is ServingEngine.SGLANG
    assert json.dumps([spec.scheduler, spec.engine]) == '["chunked_prefill", "sglang"]'
    assert parse_serving({"arrival": ARRIVAL}).engine is None
