# SPDX-License-Identifier: Apache-2.0
"""The fit verdict reads the allocated peak; the reported memory is the reserved one
(`analytical.step_peak`: the caching allocator frees its cached segments before an OOM)."""

from __future__ import annotations

import pytest

import simulate.training as training
from analytical.hardware import GIB, get_hardware
from analytical.step_peak import TrainingMemory
from simulate.engines import EngineChain
from simulate.report import result_to_dict, summary_rows
from simulate.scenario import load_scenario

DOC = {"name": "t", "model": "gpt2-xl", "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
       "training": {"parallel": {"tp": 1, "pp": 1, "dp": 1}, "global_batch": 1,
                    "micro_batch": 1, "seq_len": 1024}}


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "none.duckdb"))


def _run(monkeypatch, allocated_gib: float, allocator_gib: float):
    mem = TrainingMemory(weights_bytes=allocated_gib * GIB, gradients_bytes=0.0,
                         optimizer_bytes=0.0, activations_bytes=0.0, other_bytes=0.0,
                         allocator_bytes=allocator_gib * GIB)
    monkeypatch.setattr(training, "spec_memory", lambda model, t: mem)
    chain = EngineChain(get_hardware("h100-sxm"), use_store=False, use_predictors=False)
    return training.run_training(load_scenario(DOC), chain=chain)


def test_reserved_over_capacity_still_fits(monkeypatch):
    capacity = get_hardware("h100-sxm").memory_bytes / GIB
    result = _run(monkeypatch, capacity - 10.0, 20.0)
    assert result.fits
    assert result.memory_per_gpu_gib == pytest.approx(capacity + 10.0)
    memory = result_to_dict(result)["memory"]
    assert memory["allocated_gib"] == pytest.approx(capacity - 10.0)
    assert memory["allocator_gib"] == pytest.approx(20.0)


def test_allocated_over_capacity_does_not_fit(monkeypatch):
    capacity = get_hardware("h100-sxm").memory_bytes / GIB
    assert not _run(monkeypatch, capacity + 1.0, 0.0).fits


def test_summary_shows_the_allocated_peak_beside_the_reserved(monkeypatch):
    rows = {r["field"]: r["value"] for r in summary_rows(result_to_dict(_run(monkeypatch,
                                                                             30.0, 5.0)))}
    assert rows["allocated peak (must fit)"] == "30.0 GiB"
    assert rows["memory per GPU"].startswith("35.0 of")
