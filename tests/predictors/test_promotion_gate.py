# SPDX-License-Identifier: Apache-2.0
"""Champions earn promotion: a model that does not beat the baselines on its held-out split is
not promoted, not even when there is no champion yet; ``--force`` overrides; the report says
why a family has no champion."""

from __future__ import annotations

import math

import pytest

from analytical.errors import LlmsimError
from predictors.loader import clear_cache, load_champion
from predictors.pipeline import train_frame
from predictors.promote import beats_baselines, promote
from predictors.train import TrainConfig
from simulate.cli.main import main

# Three boosting rounds: far from the law, worse than a random forest or an interpolation.
WEAK = TrainConfig(seed=1, n_configs=1, max_rounds=3, early_stopping_rounds=2, rf_trees=5,
                   search_valid_rows=0)


def test_beats_baselines_compares_with_the_best_finite_baseline():
    split = "heldout_shape"
    metrics = {f"{split}.xgb.mape": 4.0, f"{split}.xgb.n": 50.0, f"{split}.interp.mape": 9.0,
               f"{split}.rf.mape": 5.0, f"{split}.table.mape": math.nan}
    ok, why = beats_baselines(metrics)
    assert ok and "XGBoost 4.00% vs best baseline rf 5.00%" in why and "50 rows" in why
    ok, why = beats_baselines({**metrics, f"{split}.rf.mape": 3.5})
    assert not ok and "does not beat the baselines" in why and "rf 3.50%" in why
    ok, why = beats_baselines({**metrics, f"{split}.rf.mape": 4.0})  # a tie is not a win
    assert not ok
    ok, why = beats_baselines({f"{split}.xgb.mape": 1.0})
    assert not ok and "no baseline was scored" in why
    ok, why = beats_baselines({})
    assert not ok and "logged no heldout_shape score" in why


def _gap(split, baseline, gap, low, high, shapes):
    return {f"{split}.xgb_vs_{baseline}.{k}": float(v)
            for k, v in (("gap", gap), ("low", low), ("high", high), ("clusters", shapes))}


def test_a_tie_within_the_noise_passes_only_with_a_win_beyond_the_measured_sizes():
    split = "heldout_shape"
    metrics = {f"{split}.xgb.mape": 4.23, f"{split}.xgb.n": 1295.0, f"{split}.interp.mape": 17.6,
               f"{split}.rf.mape": 3.99, **_gap(split, "interp", -13.4, -17.6, -8.5, 4),
               **_gap(split, "rf", 0.24, -0.32, 0.69, 4),
               **_gap("heldout_large", "rf", -39.2, -45.3, -30.3, 14)}
    ok, why = beats_baselines(metrics)
    assert ok and why.startswith("beats or ties every baseline")
    assert "ties rf on heldout_shape (+0.24 points [-0.32, +0.69], 4 shapes)" in why
    assert "beats it on heldout_large (-39.20" in why
    # significantly worse on the held-out shapes: the interval lies above 0
    assert not beats_baselines({**metrics, **_gap(split, "rf", 0.6, 0.05, 1.14, 4)})[0]
    # too few held-out shapes for an interval to say anything
    assert not beats_baselines({**metrics, **_gap(split, "rf", 0.24, -0.32, 0.69, 3)})[0]
    # no better than the baseline where the baseline has no data either
    assert not beats_baselines({**metrics, **_gap("heldout_large", "rf", -1.0, -2.0, 0.5, 14)})[0]
    # no interval logged (a run before the gaps existed): strict comparison
    assert not beats_baselines({k: v for k, v in metrics.items() if "xgb_vs" not in k})[0]
    # every baseline it does not beat must be tied: a second one lost is a fail
    worse = {**metrics, f"{split}.interp.mape": 4.0, **_gap(split, "interp", 0.23, 0.1, 0.4, 4)}
    assert not beats_baselines(worse)[0]


def test_a_model_worse_than_the_baselines_is_not_the_first_champion(
        llmsim_home, gemm_frame, capsys):
    clear_cache()
    first = train_frame(gemm_frame, hardware="h100-sxm", family="gemm", config=WEAK)
    split = first.result.splits["heldout_shape"].metrics
    assert split["xgb"].mape > min(split["rf"].mape, split["interp"].mape)
    assert not first.promotion.promoted and first.promotion.champion_version is None
    assert first.promotion.reason.startswith("v1 does not beat the baselines")
    with pytest.raises(LlmsimError, match="no champion"):
        load_champion("h100-sxm", "gemm")
    assert main(["train", "report"]) == 0
    out = capsys.readouterr().out
    assert "no champions yet" in out
    assert ("llmsim-h100-sxm-gemm: no champion (newest v1: not promoted: v1 does not beat the "
            "baselines") in out
    assert main(["train", "promote", "--hardware", "h100-sxm", "--op", "gemm", "--json"]) == 0
    assert '"promoted": false' in capsys.readouterr().out
    assert main(["train", "promote", "--hardware", "h100-sxm", "--op", "gemm", "--force"]) == 0
    assert "v1 promoted: forced (--force)" in capsys.readouterr().out
    clear_cache()
    assert load_champion("h100-sxm", "gemm").info.version == "1"
    clear_cache()


def test_a_run_without_baselines_cannot_show_it_is_useful(llmsim_home, gemm_frame):
    clear_cache()
    config = TrainConfig(seed=0, n_configs=1, max_rounds=20, early_stopping_rounds=5,
                         search_valid_rows=0, baselines=False)
    outcome = train_frame(gemm_frame, hardware="h100-sxm", family="gemm", config=config)
    assert not outcome.promotion.promoted
    assert "no baseline was scored on heldout_shape" in outcome.promotion.reason
    forced = promote("h100-sxm", "gemm", version=outcome.logged.version, force=True)
    assert forced.promoted and "no baseline was scored" in forced.reason
    clear_cache()
