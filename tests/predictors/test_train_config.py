# SPDX-License-Identifier: Apache-2.0
"""`train_config`: the user's training options become a `TrainConfig` in the package."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from predictors.model import Target
from predictors.train_config import AUTO_TARGET, DEFAULTS, MAX_CONFIGS, target_choices, train_config


def test_defaults_are_the_config_defaults():
    assert train_config() == DEFAULTS


def test_search_rows_never_exceed_the_rows_a_fit_may_use():
    assert train_config(max_train_rows=500).search_rows == 500
    assert train_config(max_train_rows=10**6).search_rows == DEFAULTS.search_rows


@pytest.mark.parametrize("given", [None, AUTO_TARGET])
def test_auto_target_leaves_the_choice_to_the_search(given):
    assert train_config(target=given).target is None


def test_forced_target_and_every_choice_parses():
    assert train_config(target="gated").target == Target.GATED
    assert all(train_config(target=t).target in (None, *Target) for t in target_choices())


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"n_configs": 0}, "configs"), ({"n_configs": MAX_CONFIGS + 1}, "configs"),
    ({"max_train_rows": 0}, "max-train-rows"), ({"target": "best"}, "target"),
])
def test_bad_options_name_the_option(kwargs, field):
    with pytest.raises(SpecError) as info:
        train_config(**kwargs)
    assert info.value.field == field
