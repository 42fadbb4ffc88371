# SPDX-License-Identifier: Apache-2.0
"""The survey suite: one file per scenario, each predicted and supported, with its metric."""

from __future__ import annotations

from collections import Counter

import pytest
from click.testing import CliRunner

from simulate.scenario import load_scenario
from simulate.suite import SUITE, suite_dir

# Survey Table 3, per-category counts: T1 3, T2 2, T3 2, T4 4, I1 3, I2 3, I3 2, I4 1, I5 4.
COUNTS = {"T1": 3, "T2": 2, "T3": 2, "T4": 4, "I1": 3, "I2": 3, "I3": 2, "I4": 1, "I5": 4}


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def test_one_file_per_scenario_and_table3_counts():
    assert Counter(sid.split(".")[0] for sid in SUITE) == COUNTS
    files = {p.stem for p in suite_dir().glob("*.yaml")}
    assert files == {e.file for e in SUITE.values()}
    for entry in SUITE.values():
        sc = load_scenario(suite_dir() / f"{entry.file}.yaml")
        assert sc.name == entry.file


def test_suite_command_lists_every_scenario_supported():
    from simulate.cli.suite_cmd import command

    res = CliRunner().invoke(command, ["--json", "--no-store", "--no-predictors"])
    assert res.exit_code == 0, res.output
    import json

    rows = json.loads(res.output)
    assert [r["id"] for r in rows] == list(SUITE)
    for r in rows:
        assert r["status"] == "supported", r
        assert r["value"] is not None and r["metric"] and r["engines"]
