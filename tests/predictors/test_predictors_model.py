# SPDX-License-Identifier: Apache-2.0
"""Training determinism, save/load, the committed fixture model and schema checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from analytical.errors import LlmsimError
from analytical.hardware import get_hardware
from predictors.dataset import training_data
from predictors.features import feature_matrix
from predictors.loader import load_predictor_dir
from predictors.model import LatencyModel
from predictors.train import train_predictor

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "predictors"


@pytest.fixture(scope="module")
def trained(gemm_frame, fast_config):
    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    return data, train_predictor(data, get_hardware("h100-sxm"), fast_config)


def test_training_is_deterministic(trained, fast_config):
    data, first = trained
    again = train_predictor(data, get_hardware("h100-sxm"), fast_config)
    assert first.model.model_bytes() == again.model.model_bytes()
    assert first.target == again.target and first.params == again.params
    for name, split in first.splits.items():
        assert split.metrics == again.splits[name].metrics


def test_protocol_covers_every_split_and_model(trained):
    _, result = trained
    assert set(result.splits) == {"random", "heldout_large", "heldout_shape"}
    for split in result.splits.values():
        assert set(split.metrics) == {"xgb", "interp", "rf"}
        assert split.metrics["xgb"].n == len(split.split.test) > 0
    # the synthetic law is max(compute, memory) + 6 us with a 3% wiggle: learnable
    assert result.splits["random"].metrics["xgb"].mape < 10.0
    assert result.target.value in result.target_reason
    # 2 configs x (log-latency free and monotone, ratio) + the gated join
    assert len(result.search) == 2 * 3 + 1
    assert (result.extrapolator_params is not None) == (result.target.value == "gated")


def test_save_load_roundtrip_and_fresh_process(trained, tmp_path, predict_in_fresh_process):
    data, result = trained
    folder = result.model.save(tmp_path / "m")
    loaded = LatencyModel.load(folder)
    hw = get_hardware("h100-sxm")
    ops = list(data.ops[:50])
    here = loaded.predict(ops, hw)
    assert np.array_equal(here, result.model.predict(ops, hw))
    fresh = predict_in_fresh_process(folder, ops)
    assert np.array_equal(fresh, here)


# Predictions are exp(float32 tree sum) x a roofline: libm's exp and SIMD summation may round
# the last bits differently on another CPU (seen: 2e-16 relative on an AMD EPYC), so committed
# values are compared with this tolerance, far below any modelling effect.
CROSS_MACHINE_RTOL = 1e-9


def test_committed_fixture_keeps_loading(tmp_path):
    import xgboost as xgb

    expected = json.loads((FIXTURE / "expected.json").read_text())
    model = LatencyModel.load(FIXTURE / "gemm-h100-sxm")
    x = np.array([[float.fromhex(v) for v in row] for row in expected["features"]])
    want = np.array([float.fromhex(v) for v in expected["predicted_s"]])
    np.testing.assert_allclose(model.predict_features(x), want, rtol=CROSS_MACHINE_RTOL, atol=0)
    # the raw margins are compared exactly only between boosters this process loaded itself
    again = LatencyModel.load(model.save(tmp_path / "again"))
    margins = [m.booster.predict(xgb.DMatrix(x, nthread=1), output_margin=True)
               for m in (model, again)]
    assert np.array_equal(margins[0], margins[1])
    predictor = load_predictor_dir(FIXTURE / "gemm-h100-sxm")
    assert predictor.family == "gemm" and predictor.hardware == "h100-sxm"


def _copy_fixture(tmp_path: Path) -> Path:
    target = tmp_path / "model"
    target.mkdir()
    for name in ("model.ubj", "schema.json"):
        (target / name).write_bytes((FIXTURE / "gemm-h100-sxm" / name).read_bytes())
    return target


def test_schema_version_mismatch_is_a_clear_error(tmp_path):
    folder = _copy_fixture(tmp_path)
    doc = json.loads((folder / "schema.json").read_text())
    doc["schema_version"] = 0
    (folder / "schema.json").write_text(json.dumps(doc))
    with pytest.raises(LlmsimError, match=r"schema version 0 .* version 2; retrain"):
        LatencyModel.load(folder)


def test_gemm_v1_fixture_is_refused_with_the_retrain_command():
    # GEMM went to v2 (row alignment of k and n); the v1 fixture committed before that change
    # must be refused, naming the command that retrains it, never silently fed v2 features
    with pytest.raises(LlmsimError, match=r"gemm feature schema version 1 but this llmsim uses "
                                          r"version 2; retrain with `llmsim train run "
                                          r"--hardware h100-sxm --op gemm`"):
        LatencyModel.load(FIXTURE / "gemm-h100-sxm-v1")


def test_old_attention_schema_is_refused_by_family(tmp_path):
    # attention went to v2 (work-item counts); a v1 attention model must say so and name
    # the command that retrains it.
    from predictors.model import check_schema

    doc = {"schema_version": 1, "family": "attention", "hardware": "a100-sxm-80gb",
           "target": "log_latency", "params": {}, "features": []}
    with pytest.raises(LlmsimError, match=r"attention feature schema version 1 but this llmsim "
                                          r"uses version 2; retrain with `llmsim train run "
                                          r"--hardware a100-sxm-80gb --op attention`"):
        check_schema(doc, source="schema.json")
    with pytest.raises(LlmsimError, match=r"family: 'conv'"):
        check_schema({**doc, "family": "conv"}, source="schema.json")


def test_schema_names_mismatch_and_missing_files(tmp_path):
    folder = _copy_fixture(tmp_path)
    doc = json.loads((folder / "schema.json").read_text())
    doc["features"][0]["name"] = "rows"
    (folder / "schema.json").write_text(json.dumps(doc))
    with pytest.raises(LlmsimError, match="feature names differ"):
        LatencyModel.load(folder)
    with pytest.raises(LlmsimError, match="schema.json: missing"):
        LatencyModel.load(tmp_path / "nowhere")


def test_gated_model_extrapolates_with_the_ratio_booster(gemm_frame, fast_config, tmp_path):
    from analytical.ops import GemmSpec
    from predictors.fit import fit_model
    from predictors.model import HyperParams, Target

    hw = get_hardware("h100-sxm")
    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    x = feature_matrix("gemm", data.ops, hw)
    rows = np.arange(len(data))
    params = HyperParams(max_rounds=150)
    fits = {t: fit_model(x, data.latency_s, "gemm", "h100-sxm", rows, None, t, params,
                         fast_config, rounds=(150, 150) if t == Target.GATED else (150,))
            for t in (Target.LOG_LATENCY, Target.LOG_ROOFLINE_RATIO, Target.GATED)}
    gated = fits[Target.GATED]
    assert gated.gate_log2_size == max(math.log2(op.flops) for op in data.ops)
    # 4x the largest m and n of the training grid: 16x the FLOPs, far past the gate
    big = GemmSpec(m=16384, n=57344, k=2048)
    law = big.flops / (0.7 * hw.peak_flops(big.dtype)) + 6e-6
    (g,), (ratio,), (logl,) = (fits[t].predict([big], hw) for t in
                               (Target.GATED, Target.LOG_ROOFLINE_RATIO, Target.LOG_LATENCY))
    assert g == ratio and abs(g / law - 1) < 0.1  # carried efficiency: right within the wiggle
    assert logl < 0.2 * law  # the log-latency trees repeat the largest training latency
    # inside the range it is the log-latency booster
    inside = list(data.ops[:20])
    assert np.array_equal(gated.predict(inside, hw), fits[Target.LOG_LATENCY].predict(inside, hw))
    folder = gated.save(tmp_path / "gated")
    loaded = LatencyModel.load(folder)
    both = [big, *inside]
    assert np.array_equal(loaded.predict(both, hw), gated.predict(both, hw))
    (folder / "extrapolator.ubj").unlink()
    with pytest.raises(LlmsimError, match="extrapolator.ubj: missing"):
        LatencyModel.load(folder)


def test_forced_target_is_kept_and_said(gemm_frame, fast_config):
    from dataclasses import replace

    from predictors.model import Target

    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    result = train_predictor(data, get_hardware("h100-sxm"),
                             replace(fast_config, target=Target.LOG_ROOFLINE_RATIO))
    assert result.target == Target.LOG_ROOFLINE_RATIO
    assert result.target_reason.startswith("log_roofline_ratio: forced by --target")
    assert result.model.extrapolator is None


def test_search_folds_hold_out_whole_interior_shapes():
    from dataclasses import replace

    from analytical.ops import CollectiveKind, CollectiveSpec
    from predictors.search_folds import search_folds
    from predictors.train import TrainConfig

    # 20 message sizes x 10 group sizes; the 18 interior sizes are the candidates (ninths of 2)
    ops = [CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=2 ** (10 + s),
                          group_size=g, ranks_per_node=g)
           for s in range(20) for g in range(2, 12)]
    large, rest = np.arange(190, 200), np.arange(190)  # the top size's rows are "large"
    config = TrainConfig(seed=5, search_valid_rows=50)
    folds = search_folds(ops, large, rest, config)
    assert len(folds) == 3  # each ninth holds 2 sizes x 10 rows: three make the 50 asked for
    held = [np.setdiff1d(valid, large) for _, valid in folds]
    sizes = [{ops[i].size_bytes for i in h} for h in held]
    assert all(len(h) == 20 and len(s) == 2 for h, s in zip(held, sizes, strict=True))
    assert not sizes[0] & sizes[1] and not sizes[1] & sizes[2]  # disjoint shapes
    assert all(2**10 not in s and 2**28 not in s for s in sizes)  # interior only
    for (train, valid), h, s in zip(folds, held, sizes, strict=True):
        assert np.isin(large, valid).all() and not np.isin(large, train).any()
        assert np.array_equal(np.sort(np.concatenate([train, h])), rest)  # a partition of rest
        assert not {ops[i].size_bytes for i in train} & s  # a held size is wholly unseen
    single = search_folds(ops, large, rest, replace(config, search_valid_rows=0))
    assert len(single) == 1
    assert all(np.array_equal(a, b) for a, b in zip(single[0], folds[0], strict=True))
    assert len(search_folds(ops, large, rest, replace(config, search_valid_rows=10**6))) == 9


def test_model_records_its_training_domain_and_names_what_is_outside(trained, tmp_path):
    from dataclasses import replace

    from analytical.dtypes import DType

    data, result = trained
    model = result.model
    seen = {str(op.dtype) for op in data.ops}
    assert model.domain["dtype"] == sorted(seen)
    op = data.ops[0]
    assert model.outside_domain(op) is None
    unseen = next(d for d in (DType.FP8, DType.FP32, DType.INT8) if str(d) not in seen)
    assert model.outside_domain(replace(op, dtype=unseen)) == f"dtype={unseen}"
    folder = model.save(tmp_path / "m")
    assert LatencyModel.load(folder).domain == model.domain
    # a model saved before the domain was recorded answers everything, as it did
    schema = folder / "schema.json"
    doc = json.loads(schema.read_text())
    del doc["domain"]
    schema.write_text(json.dumps(doc))
    assert LatencyModel.load(folder).outside_domain(replace(op, dtype=unseen)) is None
    schema.write_text(json.dumps({**doc, "domain": ["bf16"]}))
    with pytest.raises(LlmsimError, match="domain: expected a mapping"):
        LatencyModel.load(folder)


def test_attention_search_folds_also_hold_out_kv_lengths():
    from analytical.ops import AttentionSpec
    from predictors.search_folds import search_folds, unseen_in_fold
    from predictors.train import TrainConfig

    configs = [(h, kv, 128) for h in (8, 16, 32, 64) for kv in (1, 8)]
    lengths = [2 ** i for i in range(7, 18)]  # 11 lengths, 9 interior
    ops = [AttentionSpec(batch=1, q_len=1, kv_len=t, heads=h, kv_heads=kv, head_dim=d)
           for h, kv, d in configs for t in lengths]
    rest, large = np.arange(len(ops)), np.array([], dtype=int)
    folds = search_folds(ops, large, rest, TrainConfig(seed=0, search_valid_rows=1))
    train, valid = folds[0]
    head = {(ops[i].heads, ops[i].kv_heads) for i in train}
    held_heads = {(ops[i].heads, ops[i].kv_heads) for i in valid} - head
    held_lengths = {ops[i].kv_len for i in valid} - {ops[i].kv_len for i in train}
    assert len(held_heads) == 1 and len(held_lengths) == 1  # a ninth of 8 configs, of 9 lengths
    assert min(lengths) not in held_lengths and max(lengths) not in held_lengths
    # validation: every row of the held config plus every row at the held length
    (config,), (length,) = held_heads, held_lengths
    expected = {i for i, op in enumerate(ops)
                if (op.heads, op.kv_heads) == config or op.kv_len == length}
    assert set(valid.tolist()) == expected
    # the search scores each axis on the rows unseen along it (`_unseen_in_fold`)
    unseen_length = unseen_in_fold(ops, folds[:1], lambda op: (op.kv_len,))
    assert unseen_length.tolist() == [ops[i].kv_len == length for i in valid]


def test_monotone_log_latency_trees_never_fall_with_work():
    from predictors.features import MONOTONE_FEATURES, feature_names, monotone_constraints
    from predictors.model import HyperParams, fit_booster

    for family, names in MONOTONE_FEATURES.items():  # every constrained name is in the schema
        flags = monotone_constraints(family).strip("()").split(",")
        schema = feature_names(family)
        assert len(flags) == len(schema)
        assert {n for n, f in zip(schema, flags, strict=True) if f == "1"} == names
    assert "qblock_waves" not in MONOTONE_FEATURES["attention"]  # wave quantisation stays free
    # rows in the GEMM schema's shape whose latency rises with log2_k but dips by a third in
    # one band of it, as a noisy measurement or a kernel switch can make it: free trees learn
    # the dip, constrained trees cannot fall anywhere along k
    rng = np.random.default_rng(0)
    names = feature_names("gemm")
    x = rng.uniform(0.0, 14.0, size=(2000, len(names)))
    column = names.index("log2_k")
    y = 0.5 * x[:, column] + np.where((x[:, column] > 6) & (x[:, column] < 8), -1.0, 0.0)
    params = HyperParams(max_depth=6, max_rounds=200)
    sweep = np.repeat(np.full((1, len(names)), 7.0), 200, axis=0)
    sweep[:, column] = np.linspace(0.0, 14.0, 200)

    def slope(constraints):
        booster = fit_booster(x, y, params, seed=0, nthread=1, monotone_constraints=constraints)
        import xgboost as xgb
        return np.diff(booster.predict(xgb.DMatrix(sweep, nthread=1)).astype(np.float64))

    assert (slope(None) < -0.5).any()  # the free trees fall by most of the dip at k = 2**6
    assert (slope(monotone_constraints("gemm")) >= 0).all()


def test_search_scores_log_latency_trees_free_and_monotone(trained, tmp_path):
    from predictors.fit import booster_constraints
    from predictors.model import HyperParams, Target

    data, result = trained
    rows = [r for r in result.search if r["target"] in ("log_latency", "log_roofline_ratio")]
    monotone = {(r["target"], r["monotone"]) for r in rows}
    # each draw is scored free and monotone on log-latency; ratio trees stay free
    assert monotone == {("log_latency", False), ("log_latency", True),
                        ("log_roofline_ratio", False)}
    assert sum(r["target"] == "log_latency" for r in rows) == 2 * sum(
        r["target"] == "log_roofline_ratio" for r in rows)
    if result.target in (Target.LOG_LATENCY, Target.GATED):
        assert "log-latency trees" in result.target_reason
        assert ("monotone in work" in result.target_reason) == result.params.monotone
    # the choice is saved with the model (schema.json params) and read back
    folder = result.model.save(tmp_path / "m")
    assert LatencyModel.load(folder).params.monotone == result.params.monotone
    with pytest.raises(LlmsimError, match="monotone constraints are for log-latency boosters"):
        booster_constraints("gemm", Target.LOG_ROOFLINE_RATIO, HyperParams(monotone=True))
