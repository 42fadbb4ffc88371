# SPDX-License-Identifier: Apache-2.0
"""The fast search path gives `simulate`'s numbers: the batched pipeline of a class equals the
event simulation for each layout, every timed layout equals `run_training` of it, and the
bound-pruned search returns the exhaustive top k."""

from __future__ import annotations

import random

import pytest

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.parallel import Schedule
from simulate.engines import EngineChain, EngineOptions
from simulate.scenario import load_scenario
from simulate.schedule import simulate_pipeline
from simulate.search.batch_pipeline import batch_pipeline
from simulate.search.training_search import search_training
from simulate.training import run_training

ENGINES = EngineOptions(use_store=False, use_predictors=False)
REL = 1e-9
DENSE = {
    "name": "dense", "model": "llama-2-7b",
    "hardware": {"gpu": "h100-sxm", "num_gpus": [8, 16], "gpus_per_node": 8},
    "training": {"parallel": {"tp": [1, 2, 8], "pp": [1, 2, 4], "vpp": [1, 2], "zero": [0, 1, 3],
                              "sp": [False, True], "cp": [1, 2]},
                 "global_batch": 32, "micro_batch": [1, 2], "seq_len": 4096,
                 "recompute": ["none", "full"], "schedule": ["1f1b", "interleaved", "gpipe"]},
}
MOE = {
    "name": "moe", "model": "mixtral-8x7b",
    "hardware": {"gpu": "h100-sxm", "num_gpus": 32, "gpus_per_node": 8},
    "training": {"parallel": {"tp": [2, 4], "pp": [2, 4], "ep": [2, 8], "sp": True,
                              "zero": [1, 3]},
                 "global_batch": 64, "micro_batch": 1, "seq_len": 4096,
                 "recompute": ["selective", "full"], "schedule": "1f1b",
                 "overlap": {"tp_comm": True}},
}


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def _random_case(rng: random.Random) -> dict:
    sched = rng.choice(list(Schedule))
    pp = rng.choice([1, 2, 3, 4, 8] if sched != Schedule.INTERLEAVED else [2, 3, 4, 8])
    vpp = rng.choice([2, 3]) if sched == Schedule.INTERLEAVED else 1
    m = pp * rng.choice([1, 2, 9]) if vpp > 1 else rng.choice([1, 3, 8, 40, 90])
    uniform = rng.random() < 0.6
    fwd = [[(1.3 if uniform and s == 0 else 1.0) * (1.0 if uniform else rng.uniform(0.5, 2))
            for _ in range(vpp)] for s in range(pp)]
    return {"schedule": sched, "pp": pp, "vpp": vpp, "num_microbatches": m, "fwd_s": fwd,
            "bwd_s": [[2.0 * x for x in row] for row in fwd],
            "p2p_s": rng.choice([0.0, 0.02, 0.5, 4.0])}


def test_batch_pipeline_equals_event_simulation():
    rng = random.Random(11)
    for _ in range(40):
        first = _random_case(rng)
        cls = {k: first[k] for k in ("schedule", "pp", "vpp", "num_microbatches")}
        cases = [first]
        while len(cases) < 3:  # more layouts of the same class, other durations
            case = _random_case(rng)
            cases += [{**case, **cls, "fwd_s": _resize(case["fwd_s"], cls),
                       "bwd_s": _resize(case["bwd_s"], cls)}]
        got = batch_pipeline(**cls, fwd_s=[c["fwd_s"] for c in cases],
                             bwd_s=[c["bwd_s"] for c in cases], p2p_s=[c["p2p_s"] for c in cases])
        for case, res in zip(cases, got, strict=True):
            want = simulate_pipeline(**case)
            for field in ("span_s", "stage_end_s", "stage_busy_s", "last_bwd_start_s"):
                assert getattr(res, field) == pytest.approx(getattr(want, field), rel=REL,
                                                            abs=1e-12), (field, case)


def _resize(rows: list[list[float]], cls: dict) -> list[list[float]]:
    """``rows`` cut or repeated to pp x vpp."""
    flat = [x for r in rows for x in r]
    return [[flat[(s * cls["vpp"] + c) % len(flat)] for c in range(cls["vpp"])]
            for s in range(cls["pp"])]


def _check_rows_equal_simulate(doc: dict, res) -> None:
    chains: dict = {}
    for row in res.rows:
        sc = load_scenario({"name": "x", "model": doc["model"],
                            "hardware": {"gpu": row["gpu"], "num_gpus": row["num_gpus"],
                                         "gpus_per_node": 8},
                            "training": row["layout"]})
        if row["gpu"] not in chains:
            chains[row["gpu"]] = EngineChain.from_options(get_hardware(row["gpu"]), ENGINES)
        chain = chains[row["gpu"]]
        want = run_training(sc, chain=chain)
        assert want.fits
        for key in ("tokens_per_s", "iteration_time_s", "mfu", "memory_per_gpu_gib",
                    "bubble_fraction"):
            assert row[key] == pytest.approx(getattr(want, key), rel=REL), (key, row["layout"])
        for key, value in want.breakdown_s.items():
            assert row["breakdown_s"][key] == pytest.approx(value, rel=1e-7, abs=1e-9), key
        for key, value in want.engine_coverage.items():
            assert row["engine_coverage"][key] == pytest.approx(value, rel=1e-7, abs=1e-12)


LORA = {
    "name": "lora", "model": "llama-2-7b",
    "hardware": {"gpu": "a100-sxm-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "training": {"parallel": {"tp": [1, 2], "pp": [1, 2], "zero": [0, 1]}, "global_batch": 16,
                 "micro_batch": 1, "seq_len": 2048, "recompute": "selective",
                 "precision": "bf16", "overlap": {"dp_grad": False}, "lora": {"rank": 16}},
}


@pytest.mark.parametrize("doc", [DENSE, MOE, LORA], ids=["dense", "moe", "lora"])
def test_every_timed_layout_equals_run_training(doc):
    res = search_training(doc, executor="serial", engines=ENGINES)
    assert res.timed >= 6
    _check_rows_equal_simulate(doc, res)


@pytest.mark.parametrize("objective", ["tokens_per_s", "cost"])
@pytest.mark.parametrize("k", [1, 5])
def test_pruned_top_k_equals_exhaustive(objective, k):
    kw = {"executor": "serial", "engines": ENGINES, "objective": objective,
          "usd_per_gpu_hour": 2.0}
    full = search_training(DENSE, **kw)
    pruned = search_training(DENSE, prune_top=k, **kw)
    assert pruned.timed < full.timed  # the bound pruned something
    key = "tokens_per_s" if objective == "tokens_per_s" else "usd_per_million_tokens"
    assert [(r["gpu"], r["num_gpus"], r["layout"]) for r in pruned.rows[:k]] == \
        [(r["gpu"], r["num_gpus"], r["layout"]) for r in full.rows[:k]]
    assert [r[key] for r in pruned.rows[:k]] == [r[key] for r in full.rows[:k]]


def test_bad_prune_and_outer_axes():
    with pytest.raises(SpecError, match="prune-top"):
        search_training(DENSE, engines=ENGINES, prune_top=0)
    with pytest.raises(SpecError, match="training.seq_len"):
        search_training({**DENSE, "training": {**DENSE["training"], "seq_len": []}},
                        engines=ENGINES)


OFFLOAD = {
    "name": "offload", "model": "llama-2-7b",
    "hardware": {"gpu": "a100-sxm-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "training": {"parallel": {"tp": [2, 8], "pp": [1, 4], "zero": [0, 1]}, "global_batch": 16,
                 "micro_batch": 2, "seq_len": 4096, "recompute": "selective",
                 "offload": {"weights": [False, True], "activations": [False, True],
                             "optimizer": [False, True]}},
}


def test_offload_axes_cut_memory_cost_time_and_equal_simulate():
    res = search_training(OFFLOAD, executor="serial", engines=ENGINES)
    _check_rows_equal_simulate(OFFLOAD, res)
    names = ("weights", "activations", "optimizer")
    by = {}
    for r in res.rows:
        lay = dict(r["layout"])
        off = lay.pop("offload")
        by[(tuple(off[k] for k in names), str(lay))] = r
    assert len(by) == res.timed >= 16
    slower = 0
    for (off, lay), r in by.items():
        plain = by.get(((False, False, False), lay))
        if any(off) and plain is not None:
            assert r["memory_per_gpu_gib"] < plain["memory_per_gpu_gib"], (off, lay)
            assert r["iteration_time_s"] >= plain["iteration_time_s"] * (1 - 1e-12), (off, lay)
            slower += r["iteration_time_s"] > plain["iteration_time_s"] * 1.01
    assert slower > 0  # some transfer is not hidden (weights over PCIe every micro-batch)


@pytest.mark.parametrize(("offload", "field"), [({"weights": "yes"}, "training.offload.weights"),
                                                ({"gpu": True}, "training.offload.gpu")])
def test_bad_offload_names_the_field(offload, field):
    from simulate.scenario import parse_training

    block = {"parallel": {"tp": 1}, "global_batch": 8, "seq_len": 2048, "offload": offload}
    with pytest.raises(SpecError) as exc:
        parse_training(block)
    assert exc.value.field == field


# The a2a overlap (`simulate.moe_overlap`) and its combined 1F1B order (`simulate.schedule`):
# interleaved layouts run merged passes, plain 1F1B ones only the hidden all-to-alls.
MOE_A2A = {**MOE, "name": "moe-a2a",
           "training": {**MOE["training"], "parallel": {"tp": 2, "pp": [2, 4], "vpp": [1, 2],
                                                        "ep": [2, 8], "sp": True, "zero": 1},
                        "recompute": "full", "schedule": ["1f1b", "interleaved"],
                        "overlap": {"tp_comm": True, "moe_a2a": True}}}


def test_a2a_overlap_search_equals_run_training():
    res = search_training(MOE_A2A, executor="serial", engines=ENGINES)
    assert {r["layout"]["schedule"] for r in res.rows} == {"1f1b", "interleaved"}
    assert all(r["layout"]["overlap"]["moe_a2a"] for r in res.rows)
    _check_rows_equal_simulate(MOE_A2A, res)


def test_a2a_overlap_best_candidate_prices_as_simulate_json(tmp_path, capsys):
    import json

    import yaml

    from simulate.cli.main import main
    from simulate.search.answers import scenario_doc

    res = search_training(MOE_A2A, executor="serial", engines=ENGINES)
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(scenario_doc(MOE_A2A, res.rows[0])))
    assert main(["simulate", str(path), "--json", "--no-store", "--no-predictors"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["iteration_time_s"] == pytest.approx(res.rows[0]["iteration_time_s"], rel=REL)


def test_cuda_graph_scopes_search_equals_run_training():
    """The MoE host floor sees the scenario's CUDA-graph scopes in the search as in simulate."""
    doc = {**MOE, "name": "moe-graphs",
           "training": {**MOE["training"], "parallel": {"tp": 2, "pp": 2, "ep": [2, 8],
                                                        "sp": True, "zero": 1},
                        "recompute": "selective", "cuda_graph": ["attn", "moe_router"]}}
    _check_rows_equal_simulate(doc, search_training(doc, executor="serial", engines=ENGINES))
