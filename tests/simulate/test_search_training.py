# SPDX-License-Identifier: Apache-2.0
"""Training search: the best layout is one `simulate` accepts; the pruned search agrees with a
brute-force run; executors agree; the Pareto frontier."""

from __future__ import annotations

import itertools

import pytest

from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.engines import EngineChain, EngineOptions
from simulate.layout import validate_layout
from simulate.scenario import load_scenario
from simulate.search.executors import chunked, get_executor
from simulate.search.pareto import pareto_front
from simulate.search.training_search import search_training
from simulate.training import run_training

ENGINES = EngineOptions(use_store=False, use_predictors=False)
DOC = {
    "name": "small",
    "model": "llama-2-7b",
    "hardware": {"gpu": "h100-sxm", "num_gpus": [8, 16], "gpus_per_node": 8},
    "training": {"parallel": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "zero": [0, 1]},
                 "global_batch": 32, "micro_batch": [1, 2], "seq_len": 4096,
                 "recompute": ["none", "selective"]},
}


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


@pytest.fixture(scope="module")
def result():
    return search_training(DOC, executor="serial", engines=ENGINES)


def _scenario(row):
    return load_scenario({"name": "x", "model": "llama-2-7b",
                          "hardware": {"gpu": "h100-sxm", "num_gpus": row["num_gpus"],
                                       "gpus_per_node": 8},
                          "training": row["layout"]})


def test_best_layout_is_accepted_by_simulate(result):
    best = result.rows[0]
    sc = _scenario(best)
    hw = get_hardware("h100-sxm")
    validate_layout(load_model("llama-2-7b"), hw, sc.cluster, sc.training)  # raises if rejected
    again = run_training(sc, chain=EngineChain.from_options(hw, ENGINES))
    assert again.fits
    assert again.tokens_per_s == pytest.approx(best["tokens_per_s"], rel=1e-12)


def test_pruned_search_agrees_with_brute_force(result):
    """Every raw combination straight into run_training (no enumeration checks, no memory
    pruning): the same set of fitting layouts and the same best."""
    hw = get_hardware("h100-sxm")
    chain = EngineChain.from_options(hw, ENGINES)
    brute = []
    for n, tp, pp, zero, mb, rc in itertools.product([8, 16], [1, 2, 4, 8], [1, 2, 4], [0, 1],
                                                     [1, 2], ["none", "selective"]):
        if n % (tp * pp):
            continue
        row = {"num_gpus": n, "layout": {"parallel": {"tp": tp, "pp": pp, "zero": zero,
                                                      "dp": n // (tp * pp)},
                                         "global_batch": 32, "micro_batch": mb,
                                         "seq_len": 4096, "recompute": rc}}
        try:
            res = run_training(_scenario(row), chain=chain)
        except SpecError:
            continue
        if res.fits:
            brute.append((res.tokens_per_s, n, tp, pp, zero, mb, rc))
    found = {(r["num_gpus"], r["layout"]["parallel"]["tp"], r["layout"]["parallel"]["pp"],
              r["layout"]["parallel"]["zero"], r["layout"]["micro_batch"],
              r["layout"]["recompute"]) for r in result.rows}
    assert found == {b[1:] for b in brute}
    assert result.rows[0]["tokens_per_s"] == pytest.approx(max(brute)[0], rel=1e-12)
    assert result.fit == len(brute) < result.valid <= result.candidates


def test_executors_agree(result):
    proc = search_training(DOC, executor="process", workers=2, engines=ENGINES)
    assert [r["layout"] for r in proc.rows] == [r["layout"] for r in result.rows]
    assert [r["tokens_per_s"] for r in proc.rows] == [r["tokens_per_s"] for r in result.rows]


def test_ray_executor_agrees(result):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        got = search_training(DOC, executor="ray", workers=2, engines=ENGINES)
    finally:
        ray.shutdown()
    assert [r["layout"] for r in got.rows] == [r["layout"] for r in result.rows]
    assert [r["tokens_per_s"] for r in got.rows] == [r["tokens_per_s"] for r in result.rows]


def test_frontier_is_best_per_gpu_count(result):
    best = {}
    for r in result.rows:
        best[r["num_gpus"]] = max(best.get(r["num_gpus"], 0.0), r["tokens_per_s"])
    front = {r["num_gpus"]: r["tokens_per_s"] for r in result.frontier}
    assert front == {n: best[n] for n in front}
    assert 8 in front  # the fewest GPUs are always on the front


def test_pareto_front_closed_form():
    rows = [{"x": 1, "y": 1}, {"x": 2, "y": 3}, {"x": 2, "y": 2}, {"x": 3, "y": 3},
            {"x": 4, "y": 5}]
    front = pareto_front(rows, [("x", "min"), ("y", "max")])
    assert [(r["x"], r["y"]) for r in front] == [(1, 1), (2, 3), (4, 5)]
    three = pareto_front([{**r, "z": 0} for r in rows], [("x", "min"), ("y", "max"),
                                                         ("z", "min")])
    assert sorted((r["x"], r["y"]) for r in three) == [(1, 1), (2, 3), (4, 5)]


def test_cost_objective_and_errors():
    doc = {**DOC, "hardware": {**DOC["hardware"], "num_gpus": 8}}
    res = search_training(doc, executor="serial", engines=ENGINES, objective="cost",
                          usd_per_gpu_hour=2.0)
    top = res.rows[0]
    assert top["usd_per_million_tokens"] == pytest.approx(8 * 2.0 / 3600 / top["tokens_per_s"]
                                                          * 1e6)
    with pytest.raises(SpecError, match="usd"):
        search_training(doc, engines=ENGINES, objective="cost")
    with pytest.raises(UnknownNameError):
        search_training(doc, engines=ENGINES, executor="nope")
    with pytest.raises(SpecError, match="training.parallel.tp"):
        search_training({**doc, "training": {**doc["training"],
                                             "parallel": {"tp": {"min": 1}}}}, engines=ENGINES)


def test_chunked_keeps_order():
    items = list(range(10))
    chunks = chunked(items, 2)
    assert [x for c in chunks for x in c] == items and len(chunks) <= 8
    assert get_executor("serial")(abs, [-1, 2], 1) == [1, 2]


def test_search_command_json(tmp_path):
    import json

    import yaml
    from click.testing import CliRunner

    from simulate.cli.search_cmd import command

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**DOC, "hardware": {**DOC["hardware"], "num_gpus": 8}}))
    out = CliRunner().invoke(command, [str(path), "--json", "--no-store", "--no-predictors",
                                       "--executor", "serial", "--top", "2",
                                       "--csv", str(tmp_path / "s.csv")])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert len(data["top"]) == 2 and data["top"][0]["rank"] == 1
    assert data["candidates"] >= data["valid"] >= data["fit_in_memory"] > 0
    assert (tmp_path / "s.csv").read_text().startswith("rank,gpu,gpus,tp")


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_progress_reports_every_timed_layout(result, executor):
    seen = []
    got = search_training(DOC, executor=executor, workers=2, engines=ENGINES,
                          progress=lambda done, total: seen.append((done, total)))
    assert [r["layout"] for r in got.rows] == [r["layout"] for r in result.rows]
    assert len(seen) > 1 and seen == sorted(seen)
    assert seen[-1] == (got.fit, got.fit)
