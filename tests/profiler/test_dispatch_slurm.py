# SPDX-License-Identifier: Apache-2.0
"""Slurm dispatch: the batch script, the CLI, and a real one-node Slurm started by the test."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from analytical.errors import SpecError
from profiler.dispatch import DISPATCHERS
from profiler.dispatch.slurm import SlurmOptions, run_slurm, sbatch_script
from profiler.store import Store
from profiler.sweep import load_sweep
from simulate.cli.main import main

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "datasets" / "sweeps" / "cpu-smoke.yaml"
SCRIPT = REPO / "scripts" / "slurm_local.sh"


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))


def test_script_runs_one_shard_per_array_task(tmp_path):
    db = tmp_path / "prof.duckdb"
    text = sbatch_script(SMOKE, db, SlurmOptions(array_size=3, partition="gpu", gpus_per_task=1,
                                                 cpus_per_task=4, time="00:30:00",
                                                 device="cuda"))
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for directive in ("--array=0-2", "--partition=gpu", "--gpus-per-task=1",
                      "--cpus-per-task=4", "--time=00:30:00",
                      f"--output={db}.shards/task-%a.log"):
        assert f"#SBATCH {directive}" in lines
    run = lines[-1]
    assert "profile run" in run and str(SMOKE) in run and '--shard "$task/3"' in run
    assert f'--db {db}.shards/task-"$task".duckdb' in run and "--device cuda" in run


@pytest.mark.parametrize(("kwargs", "field"), [({"array_size": 0}, "array-size"),
                                               ({"time": "1h"}, "time"),
                                               ({"gpus_per_task": -1}, "gpus-per-task")])
def test_options_are_validated(kwargs, field):
    with pytest.raises(SpecError) as info:
        SlurmOptions(**kwargs)
    assert info.value.field == field


def test_cli_dry_run_prints_the_script(tmp_path, capsys):
    code = main(["profile", "submit", str(SMOKE), "--dry-run", "--array-size", "2",
                 "--db", str(tmp_path / "x.duckdb")])
    out = capsys.readouterr().out
    assert code == 0 and "#SBATCH --array=0-1" in out and '--shard "$task/2"' in out
    assert set(DISPATCHERS) == {"local", "torchrun", "slurm"}


def test_cli_bad_sweep_exits_2_naming_file_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nfamilies:\n  - {family: gemm, dtypes: [fp7], shapes: {}}\n",
                   encoding="utf-8")
    assert main(["profile", "run", str(bad), "--db", str(tmp_path / "d.duckdb")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "families[0].dtypes[0]" in err and "\n" == err[-1]
    assert err.count("\n") == 1  # one line, no traceback


def test_cli_run_and_expand_json(tmp_path, capsys):
    import json

    db = tmp_path / "d.duckdb"
    assert main(["profile", "run", str(SMOKE), "--db", str(db), "--shard", "0/10",
                 "--threads", "1", "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["points"] == summary["inserted"] == 3 and summary["statuses"] == {"ok": 3}
    assert main(["profile", "expand", str(SMOKE), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(load_sweep(SMOKE).points("cpu"))


def _slurm_missing() -> str | None:
    for exe in ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scontrol", "sinfo"):
        if shutil.which(exe) is None and not Path("/usr/sbin", exe).exists():
            return f"{exe} not installed (Debian slurm-wlm + munge)"
    if os.geteuid() != 0:
        return "starting slurmctld/slurmd needs root"
    return None


@pytest.fixture
def local_slurm(tmp_path_factory, monkeypatch):
    """A one-node Slurm (munged, slurmctld, slurmd) for this host via scripts/slurm_local.sh:
    slurm.conf from `slurmd -C`, partition debug, proctrack/linuxproc, select/cons_tres, no
    accounting, state and spool in a temp dir; stopped by pid afterwards."""
    reason = _slurm_missing()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "LLMSIM_SLURM_PORT": "16817"}
    started = subprocess.run(["bash", str(SCRIPT), "start", str(workdir)], env=env,
                             capture_output=True, text=True, timeout=120, check=False)
    try:
        if started.returncode != 0:
            pytest.skip(f"local Slurm did not start: {started.stderr.strip()[-300:]}")
        monkeypatch.setenv("SLURM_CONF", str(workdir / "slurm.conf"))
        yield workdir
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(workdir)], env=env,
                       capture_output=True, timeout=60, check=False)


@pytest.mark.slurm
def test_submit_two_task_array_and_merge(local_slurm, tmp_path):
    db = tmp_path / "merged.duckdb"
    options = SlurmOptions(array_size=2, partition="debug", cpus_per_task=1, time="00:10:00")
    checked = run_slurm(SMOKE, db, options, test_only=True)
    assert checked.job_id == "" and "to start" in checked.message
    result = run_slurm(SMOKE, db, options, poll_s=0.5, timeout_s=240)
    assert result.states == {"0": "COMPLETED", "1": "COMPLETED"}
    total = len(load_sweep(SMOKE).points("cpu"))
    assert result.inserted == total and result.skipped == 0
    shards = sorted(p.name for p in Path(f"{db}.shards").glob("task-*.duckdb"))
    assert shards == ["task-0.duckdb", "task-1.duckdb"]
    with Store(db, read_only=True) as store:
        counts = store.info()
    assert int(counts["rows"].sum()) == total
    again = run_slurm(SMOKE, db, options, poll_s=0.5, timeout_s=240)  # resumed: all skipped
    assert again.inserted == 0 and again.skipped == total
