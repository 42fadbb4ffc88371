# SPDX-License-Identifier: Apache-2.0
"""MLflow: run logging, registry, champion loader, promotion and the CLI, in a temp home."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analytical.errors import LlmsimError
from predictors.loader import clear_cache, load_champion
from predictors.pipeline import train_frame
from predictors.promote import promote
from predictors.report import champion_rows, markdown_table
from predictors.tracking import client_for
from predictors.train import TrainConfig
from simulate.cli.main import main


@pytest.fixture()
def tracked(llmsim_home, gemm_frame, fast_config):
    clear_cache()
    first = train_frame(gemm_frame, hardware="h100-sxm", family="gemm", config=fast_config)
    yield first
    clear_cache()


@pytest.mark.slow
def test_run_registry_and_champion(tracked, llmsim_home):
    assert (llmsim_home / "mlflow.db").exists()
    client = client_for()
    run = client.get_run(tracked.logged.run_id)
    tags = run.data.tags
    assert tags["hardware"] == "h100-sxm" and tags["family"] == "gemm"
    assert tags["data_fingerprint"] == str(tracked.result.data.fingerprint)
    assert tags["schema_version"] == "2" and tags["seed"] == "0"
    assert tags["target"] in tags["target_reason"]
    assert run.data.metrics["heldout_shape.xgb.n"] > 0
    assert "heldout_large.rf.mape" in run.data.metrics
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"model", "heldout_model", "predicted_vs_measured.png", "metrics.json",
            "heldout_test.parquet"} <= artifacts
    model_files = {a.path for a in client.list_artifacts(run.info.run_id, "model")}
    gated = {"model/extrapolator.ubj"} if tags["target"] == "gated" else set()
    assert model_files == {"model/model.ubj", "model/schema.json"} | gated
    assert str(llmsim_home / "mlartifacts") in run.info.artifact_uri
    assert tracked.promotion.promoted
    assert tracked.promotion.reason.startswith("no champion yet; v1 beats every baseline")

    predictor = load_champion("h100-sxm", "gemm")
    assert predictor is load_champion("h100-sxm", "gemm")  # cached
    assert predictor.info.version == "1"
    ops = list(tracked.result.data.ops[:20])
    assert np.array_equal(predictor.predict(ops), tracked.result.model.predict(ops,
                                                                               predictor.hw))


@pytest.mark.slow
def test_promote_compares_on_the_same_rows(tracked, gemm_frame):
    weak = TrainConfig(seed=1, n_configs=1, max_rounds=3, early_stopping_rounds=2, rf_trees=5)
    second = train_frame(gemm_frame, hardware="h100-sxm", family="gemm", config=weak,
                         auto_promote=False)
    decision = promote("h100-sxm", "gemm", version=second.logged.version)
    assert not decision.promoted  # 3 trees beat neither the baselines nor the champion
    assert "v2 does not beat the baselines (heldout_shape MAPE" in decision.reason
    assert "--version 2 --force" in decision.reason
    assert load_champion("h100-sxm", "gemm").info.version == "1"
    # forced: promoted, and both gates' verdicts are still computed and said
    forced = promote("h100-sxm", "gemm", version=second.logged.version, force=True)
    assert forced.promoted and forced.reason.startswith("forced (--force)")
    assert forced.candidate.n == forced.champion.n > 0
    assert forced.candidate.mape > forced.champion.mape
    assert "candidate v2" in forced.reason and "champion v1" in forced.reason
    back = promote("h100-sxm", "gemm", version="1")  # beats the baselines and champion v2
    assert back.promoted and back.champion_version == "2"
    assert back.candidate.mape < back.champion.mape
    again = promote("h100-sxm", "gemm", version="1")
    assert not again.promoted and "already is the champion" in again.reason


def test_missing_champion_is_a_clear_error(llmsim_home):
    clear_cache()
    with pytest.raises(LlmsimError, match=r"no champion .*'a100-sxm-80gb'.*llmsim train run"):
        load_champion("a100-sxm-80gb", "attention")


@pytest.mark.slow
def test_report_and_cli(tracked, capsys, tmp_path):
    rows = champion_rows()
    assert {r["split"] for r in rows} == {"heldout_shape", "heldout_large", "random"}
    shape = next(r for r in rows if r["split"] == "heldout_shape" and r["group"] == "all")
    assert shape["n"] == tracked.result.splits["heldout_shape"].metrics["xgb"].n
    assert "| h100-sxm | gemm | synthetic | all | heldout_shape |" in markdown_table(rows)
    # the gap column: XGBoost minus the best baseline of the split, as logged
    split = tracked.result.splits["heldout_shape"]
    best = min(("interp", "rf"), key=lambda b: split.metrics[b].mape)
    assert shape["gap_baseline"] == best
    assert shape["gap_points"] == pytest.approx(split.metrics["xgb"].mape
                                                - split.metrics[best].mape, rel=1e-9)
    assert shape["gap_low"] <= shape["gap_points"] <= shape["gap_high"]
    assert shape["gap"] in markdown_table(rows)
    assert shape["gap"].endswith(f"] {best}, {shape['gap_shapes']} shapes")
    held = {(op.n, op.k) for op in (tracked.result.data.ops[i] for i in split.split.test)}
    assert shape["gap_shapes"] == len(held) > 1

    assert main(["train", "report", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {r["family"] for r in printed} == {"gemm"}
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- accuracy-table:begin (generated by `llmsim train report "
                      "--write-readme`) -->\nold\n<!-- accuracy-table:end -->\ny\n")
    assert main(["train", "report", "--markdown", "--write-readme", str(readme)]) == 0
    assert "old" not in readme.read_text() and "| h100-sxm | gemm |" in readme.read_text()
    assert main(["train", "promote", "--hardware", "h100-sxm", "--op", "gemm"]) == 0
    assert "already is the champion" in capsys.readouterr().out
    assert main(["train", "promote", "--hardware", "b200", "--op", "gemm"]) == 2
    assert main(["train", "run", "--hardware", "h100-sxm", "--op", "gemm", "--db",
                 str(tmp_path / "none.duckdb")]) == 2
    assert "no measurement store" in capsys.readouterr().err


@pytest.mark.slow
def test_report_per_provenance_shows_each_data_source(tracked, gemm_frame, fast_config):
    other = gemm_frame.assign(provenance="imported:aiconfigurator-0.12.0/nccl-2.27.3")
    second = train_frame(other, hardware="h100-sxm", family="gemm", config=fast_config,
                         auto_promote=False)
    assert second.logged.version == "2"
    champions = champion_rows(splits=("heldout_shape",))
    assert {(r["provenance"], r["version"]) for r in champions} == {("synthetic", "1")}
    rows = champion_rows(splits=("heldout_shape",), per_provenance=True)
    assert {(r["provenance"], r["version"]) for r in rows} == {
        ("synthetic", "1*"), ("aiconfigurator/nccl-2.27.3", "2")}
    assert all(r["table_mape"] is None for r in rows)  # GEMM has no measured-curve baseline


@pytest.mark.slow
def test_unusable_champion_is_said_once_not_skipped_silently(tracked, llmsim_home, capsys):
    """A registered champion whose artifacts are gone (a home copied without them) falls to
    the next engine, and says so on stderr once; no champion at all says nothing."""
    import shutil

    from analytical.hardware import get_hardware
    from predictors import tracking
    from simulate.engines import EngineChain

    shutil.rmtree(llmsim_home / "mlartifacts")
    clear_cache()
    tracking._SAID_UNUSABLE.clear()
    capsys.readouterr()
    for _ in range(2):
        assert EngineChain(get_hardware("h100-sxm"))._predictor("gemm") is None
    err = capsys.readouterr().err
    assert err.count("'llmsim-h100-sxm-gemm' cannot be used") == 1
    assert "cannot fetch artifact" in err
    assert EngineChain(get_hardware("a100-sxm-80gb"))._predictor("gemm") is None
    assert capsys.readouterr().err == ""
