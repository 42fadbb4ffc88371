# SPDX-License-Identifier: Apache-2.0
"""The anchored target: the measured curves (both interpolations, the leave-one-out choice
between them, JSON round trip), the table baseline, and an anchored model that corrects the
table it starts from."""

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


def _table(sizes, latencies, interpolation="log_log", **kw):
    ops = _ops(sizes, **kw)
    return AnchorTable.build("collective", feature_matrix("collective", ops, HW),
                             np.array(latencies, dtype=float), interpolation=interpolation)


def test_log_log_interpolates_log_latency_linearly_in_log2_size():
    table = _table([1024, 4096, 65536], [10e-6, 20e-6, 320e-6])
    x = feature_matrix("collective", _ops([2048, 4096, 16384, 512, 131072]), HW)
    got = np.exp(table.log_anchor(x))
    # 2048 is halfway (in log2) between 1024 and 4096: the geometric mean
    assert got[0] == pytest.approx(math.sqrt(10e-6 * 20e-6), rel=1e-12)
    assert got[1] == pytest.approx(20e-6, rel=1e-12)  # a measured point reads back
    # 16384 is halfway between 4096 and 65536 in log2: sqrt(20 * 320) us
    assert got[2] == pytest.approx(math.sqrt(20e-6 * 320e-6), rel=1e-12)
    assert np.isnan(got[3]) and np.isnan(got[4])  # outside the measured range: no anchor


def test_linear_interpolation_is_exact_on_an_alpha_beta_curve():
    # latency = 5 us + bytes / 100 GB/s: affine in bytes, so linear reads it exactly
    sizes = [1024, 8192, 65536, 2**20]
    law = [5e-6 + s / 100e9 for s in sizes]
    table = _table(sizes, law, interpolation="linear")
    between = [4096, 30000, 500000]
    got = np.exp(table.log_anchor(feature_matrix("collective", _ops(between), HW)))
    assert got == pytest.approx([5e-6 + s / 100e9 for s in between], rel=1e-12)
    # log-log bends a straight line: in the latency-to-bandwidth turn (300 kB, where both
    # terms are near 3 us and 5 us) it is off by more than 10%
    loglog = _table(sizes, law).log_anchor(feature_matrix("collective", _ops([300000]), HW))
    assert abs(np.exp(loglog[0]) / (5e-6 + 300000 / 100e9) - 1) > 0.1


def test_the_table_keeps_the_interpolation_with_lower_leave_one_out_error():
    sizes = [2**i for i in range(10, 24)]
    affine = AnchorTable.build("collective", feature_matrix("collective", _ops(sizes), HW),
                               np.array([5e-6 + s / 100e9 for s in sizes]))
    assert affine.interpolation == "linear" and affine.loo_mape["linear"] < 1e-9
    assert affine.loo_mape["log_log"] > 1.0
    power = AnchorTable.build("collective", feature_matrix("collective", _ops(sizes), HW),
                              np.array([1e-9 * s ** 0.7 for s in sizes]))
    assert power.interpolation == "log_log" and power.loo_mape["log_log"] < 1e-9
    with pytest.raises(LlmsimError, match="unknown interpolation 'cubic'"):
        _table(sizes[:3], [1e-5, 2e-5, 3e-5], interpolation="cubic")


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
    x = feature_matrix("collective", _ops([1500, 2000, 50000]), HW)
    for interpolation in ("linear", "log_log"):
        table = _table([1024, 3000, 65536], [1.1e-5, 2.3e-5, 3.37e-4], interpolation)
        table.save(tmp_path)
        loaded = AnchorTable.load(tmp_path, "collective")
        assert loaded.interpolation == interpolation
        assert np.array_equal(loaded.log_anchor(x), table.log_anchor(x))
    # a table written before the choice existed has no field and was read log-log
    doc = json.loads((tmp_path / ANCHOR_FILE).read_text())
    del doc["interpolation"]
    (tmp_path / ANCHOR_FILE).write_text(json.dumps(doc))
    assert AnchorTable.load(tmp_path, "collective").interpolation == "log_log"
    (tmp_path / ANCHOR_FILE).write_text(json.dumps({**doc, "interpolation": "spline"}))
    with pytest.raises(LlmsimError, match="interpolation 'spline' is not one of"):
        AnchorTable.load(tmp_path, "collective")
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
    config = replace(fast_config, n_configs=3, max_rounds=400, search_valid_rows=400)
    return data, train_predictor(data, HW, replace(config, target=Target.ANCHORED)), config


@pytest.mark.slow
def test_anchored_model_beats_the_table_it_starts_from(anchored):
    data, result, config = anchored
    assert result.target == Target.ANCHORED
    assert any(row["target"] == "anchored" for row in result.search)
    assert "9 inner folds" in result.target_reason  # 222 rows: ninths of ~16 rows each
    # noise-free curves: the trees' correction is worth applying in full
    assert result.model.anchor_weight == 1.0
    assert "weight 1" in result.target_reason
    shape = result.splits["heldout_shape"].metrics
    assert set(shape) == {"xgb", "interp", "table", "rf"}
    # the protocol switch bends the curve between grid points; interpolation (linear, kept by
    # leave-one-out) misses the bend and the anchored trees learn the correction
    assert result.model.anchor.interpolation == "linear"
    assert shape["table"].mape > 0.3
    assert shape["xgb"].mape < 0.6 * shape["table"].mape
    # sizes beyond the measured range have no anchor: the roofline-ratio booster prices them
    model = result.model
    past = _ops([2**30], ranks=8)
    xp = feature_matrix("collective", past, HW)
    assert np.isnan(model.anchor.log_anchor(xp)).all()
    ratio = model.extrapolator.predict(xgb.DMatrix(xp, nthread=1)).astype(np.float64)
    assert model.predict(past, HW)[0] == np.exp(ratio[0]) * roofline_seconds("collective", xp)[0]


@pytest.mark.slow
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


@pytest.mark.slow
def test_anchored_training_is_deterministic(anchored):
    data, result, config = anchored
    again = train_predictor(data, HW, replace(config, target=Target.ANCHORED))
    assert again.model.model_bytes() == result.model.model_bytes()
    assert again.splits["heldout_shape"].metrics == result.splits["heldout_shape"].metrics


def test_anchored_target_is_refused_where_there_are_no_curves(gemm_frame, fast_config):
    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    with pytest.raises(LlmsimError, match="target anchored cannot be fitted"):
        train_predictor(data, HW, replace(fast_config, target=Target.ANCHORED))


@pytest.mark.slow
def test_anchor_weight_scales_the_correction_and_survives_a_reload(anchored, tmp_path):
    data, result, _ = anchored
    model = result.model
    x = feature_matrix("collective", data.ops, HW)
    log_anchor = model.anchor.log_anchor(x)
    on = ~np.isnan(log_anchor)
    full = model.predict_features(x[on])
    for weight in (0.0, 0.5):
        weighted = LatencyModel(booster=model.booster, extrapolator=model.extrapolator,
                                family=model.family, hardware=model.hardware,
                                target=model.target, params=model.params, anchor=model.anchor,
                                anchor_weight=weight)
        got = weighted.predict_features(x[on])
        # log-space: the anchor plus weight x the trees' correction
        expected = np.exp(log_anchor[on] + weight * (np.log(full) - log_anchor[on]))
        assert got == pytest.approx(expected, rel=1e-12)
        folder = weighted.save(tmp_path / f"w{weight}")
        assert LatencyModel.load(folder).anchor_weight == weight
    # weight 0 is the table itself
    table_only = LatencyModel.load(tmp_path / "w0.0").predict_features(x[on])
    assert np.array_equal(table_only, np.exp(log_anchor[on]))
    # a model folder written before the weight existed applied the trees in full
    schema = tmp_path / "w0.0" / "schema.json"
    doc = json.loads(schema.read_text())
    del doc["anchor_weight"]
    schema.write_text(json.dumps(doc))
    assert LatencyModel.load(tmp_path / "w0.0").anchor_weight == 1.0
    schema.write_text(json.dumps({**doc, "anchor_weight": "half"}))
    with pytest.raises(LlmsimError, match="anchor_weight: 'half' is not a float.hex"):
        LatencyModel.load(tmp_path / "w0.0")


@pytest.mark.slow
def test_collective_of_an_unseen_dtype_is_asked_as_a_seen_one_of_the_same_width(anchored):
    from analytical.dtypes import DType

    data, result, _ = anchored
    model = result.model
    assert model.domain["dtype"] == ["bf16"]  # the synthetic tables are bf16 only
    op = data.ops[5]
    as_fp16 = replace(op, dtype=DType.FP16)  # same width: asked as bf16
    assert model.outside_domain(as_fp16) is None
    assert model.predict([as_fp16], HW)[0] == model.predict([op], HW)[0]
    assert model.outside_domain(replace(op, dtype=DType.FP32)) == "dtype=fp32"
    assert model.outside_domain(replace(op, kind=CollectiveKind.SEND_RECV)) == "kind=send_recv"
