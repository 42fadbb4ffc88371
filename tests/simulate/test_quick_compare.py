# SPDX-License-Identifier: Apache-2.0
"""The quick path (``simulate --model --gpu --gpus``), ``llmsim compare`` and ``--version``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml

from analytical.errors import SpecError
from simulate.cli.main import main
from simulate.quick import (
    SERVE_INPUT_LEN,
    SERVE_REQUESTS,
    TRAIN_GLOBAL_BATCH,
    TRAIN_SEQ_LEN,
    Mode,
    QuickSpec,
    quick_scenario,
)

ROOT = Path(__file__).resolve().parents[2]
HF_CONFIG = ROOT / "datasets" / "models" / "llama-3-8b.json"  # a Hugging Face config.json


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMSIM_DB", raising=False)


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_defaults_are_in_the_document() -> None:
    train = quick_scenario(QuickSpec(model="llama-3-8b", gpu="h100-sxm", gpus=24,
                                     mode=Mode.TRAIN, tp=2))["training"]
    assert train["parallel"] == {"tp": 2, "pp": 1, "dp": 12, "fsdp": True}
    assert train["seq_len"] == TRAIN_SEQ_LEN
    assert train["global_batch"] % 12 == 0 and train["global_batch"] >= TRAIN_GLOBAL_BATCH
    serve = quick_scenario(QuickSpec(model="llama-3-70b", gpu="h100-sxm", gpus=16))
    assert serve["inference"]["parallel"] == {"tp": 8, "pp": 1, "dp": 2}  # a node per replica
    assert serve["inference"]["input_len"] == SERVE_INPUT_LEN
    assert serve["serving"]["arrival"]["num_requests"] == SERVE_REQUESTS
    with pytest.raises(SpecError, match="--gpus: 6 GPUs are not a multiple of tp\\*pp = 4"):
        quick_scenario(QuickSpec(model="llama-3-8b", gpu="h100-sxm", gpus=6, tp=4))


def test_quick_train_from_a_config_json_saves_a_scenario(tmp_path: Path, capsys) -> None:
    saved = tmp_path / "quick.yaml"
    code, out, err = _cli(capsys, "simulate", "--model", str(HF_CONFIG), "--gpu", "h100-sxm",
                          "--gpus", "8", "--train", "--save", str(saved), "--json",
                          "--no-store", "--no-predictors")
    assert code == 0, err
    data = json.loads(out)
    assert data["fits"] and data["num_gpus"] == 8 and 0 < data["mfu"] < 1
    doc = yaml.safe_load(saved.read_text())
    assert doc["model"] == str(HF_CONFIG) and doc["training"]["seq_len"] == TRAIN_SEQ_LEN
    code, out2, _ = _cli(capsys, "simulate", str(saved), "--json", "--no-store",
                         "--no-predictors")
    assert code == 0 and json.loads(out2)["iteration_time_s"] == data["iteration_time_s"]


def test_quick_serve_and_usage_errors(capsys) -> None:
    code, out, err = _cli(capsys, "simulate", "--model", "llama-3-8b", "--gpu", "h100-sxm",
                          "--gpus", "1", "--requests", "20", "--json", "--no-store",
                          "--no-predictors")
    assert code == 0, err
    assert json.loads(out)["num_requests"] == 20
    code, _, err = _cli(capsys, "simulate", "--gpu", "h100-sxm")
    assert code == 2 and "--model, --gpus" in err
    scenario = str(ROOT / "datasets" / "scenarios" / "gpt2-dp8-a100.yaml")
    code, _, err = _cli(capsys, "simulate", scenario, "--gpus", "4")
    assert code == 2 and "not both" in err


def test_compare_two_scenario_files(capsys) -> None:
    a = ROOT / "datasets" / "scenarios" / "gpt2-dp8-a100.yaml"
    b = ROOT / "datasets" / "scenarios" / "llama3-8b-fsdp-h100.yaml"
    code, out, err = _cli(capsys, "compare", str(a), str(b), "--json", "--no-store",
                          "--no-predictors")
    assert code == 0, err
    rows = {r["field"]: r for r in json.loads(out)}
    gpus = rows["num_gpus"]
    assert (gpus["a"], gpus["b"], gpus["diff"], gpus["rel"]) == (8, 64, 56, 7.0)
    time = rows["iteration_time_s"]
    assert time["diff"] == pytest.approx(time["b"] - time["a"])
    assert rows["model"]["diff"] == "differs"
    code, out, _ = _cli(capsys, "compare", str(a), str(b), "--no-store", "--no-predictors")
    assert code == 0 and "+700.0%" in out and "iteration_time_s" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_version(capsys) -> None:
    code, out, _ = _cli(capsys, "--version")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert code == 0 and out.strip() == f"llmsim {version}"
