# SPDX-License-Identifier: Apache-2.0
"""Search answers a user can act on: ties collapsed onto the least memory, the baseline and the
gain over it, the best layout as a scenario and as --set flags that `simulate` reproduces,
frontiers only where their axis varies, list-valued GPU type / sequence length, --out files."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from click.testing import CliRunner

from analytical.errors import SpecError
from simulate.cli.main import main
from simulate.cli.search_cmd import command
from simulate.engines import EngineOptions
from simulate.scenario import apply_overrides, load_scenario, parse_scenario
from simulate.search.answers import collapse_ties, scenario_doc, set_flags
from simulate.search.training_search import search_training
from simulate.training import run_training

ENGINES = EngineOptions(use_store=False, use_predictors=False)
DOC = {
    "name": "small", "model": "llama-2-7b",
    "hardware": {"gpu": ["h100-sxm", "h200"], "num_gpus": 8, "gpus_per_node": 8},
    "training": {"parallel": {"tp": [1, 2, 8], "pp": [1, 2], "zero": [0, 1, 2]},
                 "global_batch": 32, "micro_batch": [1, 2], "seq_len": [2048, 4096],
                 "recompute": ["none", "full"]},
}
PLAIN = {"name": "plain", "model": "llama-2-7b",
         "hardware": {"gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8},
         "training": {"parallel": {"tp": 8}, "global_batch": 16, "micro_batch": 1,
                      "seq_len": 4096}}


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


@pytest.fixture(scope="module")
def result():
    return search_training(DOC, executor="serial", engines=ENGINES)


def test_outer_axes_are_searched(result):
    seen = {(r["gpu"], r["layout"]["seq_len"]) for r in result.rows}
    assert seen == {(g, s) for g in ("h100-sxm", "h200") for s in (2048, 4096)}
    assert "num_gpus" not in result.frontiers  # one GPU count: no GPU-count frontier
    assert "cost" not in result.frontiers  # no price given
    front = result.frontiers["memory_headroom"]
    assert len(front) > 1
    for a, b in zip(front, front[1:], strict=False):  # more tokens/s costs headroom
        assert a["tokens_per_s"] >= b["tokens_per_s"]
        assert a["memory_headroom_gib"] < b["memory_headroom_gib"]


def test_ties_collapse_onto_least_memory(result):
    answers = collapse_ties(result.rows, "tokens_per_s", 5)
    assert len(answers) == 5
    tied = [a for a in answers if a["ties"]]
    assert tied  # ZeRO 1 and 2 time the same here: one answer, the other under ties
    for a in tied:
        assert all(t["memory_per_gpu_gib"] >= a["memory_per_gpu_gib"] for t in a["ties"])
        assert all(set(t) - {"memory_per_gpu_gib"} for t in a["ties"])  # names what differs
    values = [a["tokens_per_s"] for a in answers]
    assert len(set(values)) == len(values) or \
        len({(a["gpu"], a["tokens_per_s"]) for a in answers}) == len(answers)


def test_best_as_scenario_and_flags_reproduce_it(result):
    best = result.rows[0]
    again = run_training(load_scenario(scenario_doc(result.doc, best)), use_store=False,
                         use_predictors=False)
    assert again.tokens_per_s == pytest.approx(best["tokens_per_s"], rel=1e-9)
    flagged = parse_scenario(apply_overrides(result.doc, set_flags(best)))
    assert run_training(flagged, use_store=False, use_predictors=False).tokens_per_s == \
        pytest.approx(best["tokens_per_s"], rel=1e-9)


def test_auto_baseline_and_gain():
    res = search_training(PLAIN, executor="serial", engines=ENGINES, auto=True)
    base = res.baseline
    want = run_training(load_scenario(PLAIN), use_store=False, use_predictors=False)
    assert base["fits"] and base["tokens_per_s"] == pytest.approx(want.tokens_per_s, rel=1e-9)
    assert res.gain == pytest.approx(res.rows[0]["tokens_per_s"] / base["tokens_per_s"])
    assert res.gain >= 1.0  # the scenario's own layout is in the auto space
    with pytest.raises(SpecError, match="training.micro_batch"):
        search_training({**PLAIN, "baseline": {"training": {"micro_batch": [1, 2]}}},
                        engines=ENGINES)


def test_cli_out_files_and_answers(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**DOC, "hardware": {**DOC["hardware"], "num_gpus": [8, 16]}}))
    args = [str(path), "--no-store", "--no-predictors", "--executor", "serial", "--top", "3"]
    out = CliRunner().invoke(command, [*args, "--out", str(tmp_path / "all.csv")])
    assert out.exit_code == 0, out.output
    assert "tokens/s vs GPU count" in out.output and "best layout as a scenario" in out.output
    assert "--set training.parallel.tp=" in out.output
    with (tmp_path / "all.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    out = CliRunner().invoke(command, [*args, "--json", "--out", str(tmp_path / "all.json")])
    data = json.loads(out.output)
    assert len(rows) == len(json.loads((tmp_path / "all.json").read_text())) == data["timed"]
    assert data["best_scenario"]["training"] == data["top"][0]["layout"]
    assert main(["search", *args, "--out", str(tmp_path / "all.txt")]) == 2
    assert not (tmp_path / "all.txt").exists()


def test_overlap_switches_are_searched():
    doc = {**PLAIN, "training": {**PLAIN["training"], "parallel": {"tp": [2, 8]},
                                 "overlap": {"tp_comm": [False, True], "dp_grad": [True, False]}}}
    res = search_training(doc, executor="serial", engines=ENGINES)
    seen = {(r["layout"]["overlap"]["tp_comm"], r["layout"]["overlap"]["dp_grad"])
            for r in res.rows}
    assert seen == {(a, b) for a in (False, True) for b in (True, False)}
    for row in res.rows:
        want = run_training(load_scenario(scenario_doc(res.doc, row)), use_store=False,
                            use_predictors=False)
        assert row["tokens_per_s"] == pytest.approx(want.tokens_per_s, rel=1e-9)
    with pytest.raises(SpecError, match="training.overlap.tp_comm"):
        search_training({**doc, "training": {**doc["training"], "overlap": {"tp_comm": []}}},
                        engines=ENGINES)
