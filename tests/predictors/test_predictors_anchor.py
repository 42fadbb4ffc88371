# SPDX-License-Identifier: Apache-2.0
"""The anchored target: the measured curves (interpolation, leave-one-out, JSON round trip),
the table baseline, and an anchored model that corrects the table it starts from."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import xgboost as xgb

from analytical.errors import LlmsimError
from analytical.hardware import get_hardware
from analytical.ops import CollectiveKind, CollectiveSpec
from predictors.anchor import ANCHOR_FILE, AnchorTable
from predictors.baselines import TableBaseline
from predictors.dataset import training_data
from predictors.features import feature_matrix, roofline_seconds
from predictors.model import LatencyModel, Target
from predictors.train import train_predictor

HW = get_hardware("h100-sxm")


def _ops(sizes, ranks=4, kind=CollectiveKind.ALL_REDUCE):
    return [CollectiveSpec(kind=kind, size_bytes=s, group_size=ranks, ranks_per_node=ranks)
            for s in sizes]


def _table(sizes, latencies, **kw):
    ops = _ops(sizes, **kw)
    return AnchorTable.build("collective", feature_matrix("collective", ops, HW),
                             np.array(latencies, dtype=float))


def test_interpolates_log_latency_linearly_in_log2_size():
    table = _table([1024, 4096, 65536], [10e-6, 20e-6, 320e-6])
    x = feature_matrix("collective", _ops([2048, 4096, 16384, 512, 131072]), HW)
    got = np.exp(table.log_anchor(x))
    # 2048 is halfway (in log2) between 1024 and 4096: the geometric mean
    assert got[0] == pytest.approx(math.sqrt(10e-6 * 20e-6), rel=1e-12)
    assert got[1] == pytest.approx(20e-6, rel=1e-12)  # a measured point reads back
    # 16384 is halfway between 4096 and 65536 in log2: sqrt(20 * 320) us
    assert got[2] == pytest.approx(math.sqrt(20e-6 * 320e-6), rel=1e-12)
    assert np.isnan(got[3]) and np.isnan(got[4])  # outside the measured range: no anchor


def test_leave_one_out_and_unseen_configuration():
    table = _table([1024, 4096, 65536], [10e-6, 20e-6, 320e-6])
    x = feature_matrix("collective", _ops([1024, 4096, 65536]), HW)
    loo = np.exp(table.log_anchor(x, leave_one_out=True))
    assert np.isnan(loo[0]) and np.isnan(loo[2])  # end points have one neighbour only
    # 4096 from its neighbours 1024 and 65536: 1/3 of the way in log2
    assert loo[1] == pytest.approx(10e-6 * 32 ** (1 / 3), rel=1e-12)
    other = feature_matrix("collective", _ops([4096], ranks=8), HW)
    gather = feature_matrix("collective", _ops([4096], kind=CollectiveKind.ALL_GATHER), HW)
    assert np.isnan(table.log_anchor(other)[0]) and np.isnan(table.log_anchor(gather)[0])


def test_table_baseline_falls_back_where_there_is_no_curve():
    ops = _ops([1024, 4096])
    x = feature_matrix("collective", ops, HW)
    base = TableBaseline("collective").fit(x, np.array([10e-6, 40e-6]))
    test = feature_matrix("collective", _ops([2048, 8192]), HW)
    got = base.predict(test, fallback_s=np.array([1.0, 2.0]))
    assert got[0] == pytest.approx(20e-6) and got[1] == 2.0


def test_json_round_trip_is_exact_and_edits_are_refused(tmp_path):
    table = _table([1024, 3000, 65536], [1.1e-5, 2.3e-5, 3.37e-4])
    table.save(tmp_path)
    loaded = AnchorTable.load(tmp_path, "collective")
    x = feature_matrix("collective", _ops([1500, 2000, 50000]), HW)
    assert np.array_equal(loaded.log_anchor(x), table.log_anchor(x))
    doc = json.loads((tmp_path / ANCHOR_FILE).read_text())
    doc["key_columns"] = doc["key_columns"][:-1]
    (tmp_path / ANCHOR_FILE).write_text(json.dumps(doc))
    with pytest.raises(LlmsimError, match="key_columns differ"):
        AnchorTable.load(tmp_path, "collective")
    (tmp_path / ANCHOR_FILE).write_text("{not json")
    with pytest.raises(LlmsimError, match="anchor.json: not valid JSON"):
        AnchorTable.load(tmp_path, "collective")
    with pytest.raises(LlmsimError, match="has no anchor axis"):
        AnchorTable.build("gemm", x, np.ones(3))


@pytest.fixture(scope="module")
def anchored(collective_frame, fast_config):
    data = training_data(collective_frame, hardware="h100-sxm", family="collective")
    config = replace(fast_config, n_configs=3, max_rounds=400)
    return data, train_predictor(data, HW, replace(config, target=Target.ANCHORED)), config


def test_anchored_model_beats_the_table_it_starts_from(anchored):
    data, result, config = anchored
    assert result.target == Target.ANCHORED
    assert any(row["target"] == "anchored" for row in result.search)
    shape = result.splits["heldout_shape"].metrics
    assert set(shape) == {"xgb", "interp", "table", "rf"}
    # the law's bandwidth ramp bends the curve between grid points; log-log interpolation
    # misses the bend and the anchored trees learn the correction
    assert shape["table"].mape > 0.3
    assert shape["xgb"].mape < 0.6 * shape["table"].mape
    # sizes beyond the measured range have no anchor: the roofline-ratio booster prices them
    model = result.model
    past = _ops([2**30], ranks=8)
    xp = feature_matrix("collective", past, HW)
    assert np.isnan(model.anchor.log_anchor(xp)).all()
    ratio = model.extrapolator.predict(xgb.DMatrix(xp, nthread=1)).astype(np.float64)
    assert model.predict(past, HW)[0] == np.exp(ratio[0]) * roofline_seconds("collective", xp)[0]


def test_anchored_model_reloads_bit_identical_in_a_fresh_process(anchored, tmp_path,
                                                                predict_in_fresh_process):
    data, result, _ = anchored
    folder = result.model.save(tmp_path / "m")
    assert (folder / ANCHOR_FILE).exists()
    ops = [*data.ops[::7], *_ops([3000, 2**30], ranks=8)]
    here = LatencyModel.load(folder).predict(ops, HW)
    assert np.array_equal(here, result.model.predict(ops, HW))
    assert np.array_equal(predict_in_fresh_process(folder, ops), here)
    (folder / ANCHOR_FILE).unlink()
    with pytest.raises(LlmsimError, match="anchor.json: missing"):
        LatencyModel.load(folder)


def test_anchored_training_is_deterministic(anchored):
    data, result, config = anchored
    again = train_predictor(data, HW, replace(config, target=Target.ANCHORED))
    assert again.model.model_bytes() == result.model.model_bytes()
    assert again.splits["heldout_shape"].metrics == result.splits["heldout_shape"].metrics


def test_anchored_target_is_refused_where_there_are_no_curves(gemm_frame, fast_config):
    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    with pytest.raises(LlmsimError, match="target anchored cannot be fitted"):
        train_predictor(data, HW, replace(fast_config, target=Target.ANCHORED))
