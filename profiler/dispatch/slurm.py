# SPDX-License-Identifier: Apache-2.0
"""Slurm dispatch: a job array where each task measures one shard of a sweep into its own file.

`sbatch_script` writes the batch script: task ``i`` of ``N`` runs ``llmsim profile run SWEEP
--shard i/N --db <db>.shards/task-<i>.duckdb`` (DuckDB allows one writer per file, so tasks
never share one). `run_slurm` submits it with ``sbatch --parsable``, polls ``squeue`` until the
array has left the queue, reads each task's final state from ``scontrol show job`` (no
accounting database needed) and merges the shards into the store.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from analytical.errors import LlmsimError, SpecError
from profiler.measurement import shard_path
from profiler.store import Store

__all__ = ["SlurmOptions", "SlurmResult", "job_states", "run_slurm", "sbatch_script",
           "submit_script", "wait_for_job"]

_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmOptions:
    """sbatch settings of a profiling job array."""

    array_size: int = 1
    partition: str | None = None
    gpus_per_task: int | None = None
    cpus_per_task: int | None = None
    time: str = "01:00:00"  # Slurm time limit per task, [D-]HH:MM:SS
    job_name: str = "llmsim-profile"
    device: str | None = None  # passed to `llmsim profile run --device`

    def __post_init__(self) -> None:
        for name in ("array_size", "gpus_per_task", "cpus_per_task"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise SpecError(name.replace("_", "-"), f"must be an integer >= 1, got {value!r}")
        if not _TIME.match(self.time):
            raise SpecError("time", f"expected [D-]HH:MM:SS, got {self.time!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmResult:
    """A finished (or test-only) submission."""

    job_id: str
    script_path: str
    states: dict[str, str] = field(default_factory=dict)  # array task id -> final state
    inserted: int = 0
    skipped: int = 0
    message: str = ""

    def to_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


def shard_dir(db: str | Path) -> Path:
    """``<db>.shards``: where the tasks write."""
    return shard_path(db, "x").parent


def sbatch_script(sweep_path: str | Path, db: str | Path, options: SlurmOptions, *,
                  python: str = sys.executable, workdir: str | Path | None = None) -> str:
    """The batch script of the job array (absolute paths, so it runs from any directory)."""
    sweep_path, db = Path(sweep_path).resolve(), Path(db).resolve()
    shards = shard_dir(db)
    n = options.array_size
    lines = ["#!/bin/bash", f"#SBATCH --job-name={options.job_name}",
             f"#SBATCH --array=0-{n - 1}", f"#SBATCH --output={shards}/task-%a.log",
             f"#SBATCH --time={options.time}", "#SBATCH --ntasks=1"]
    if options.partition:
        lines.append(f"#SBATCH --partition={options.partition}")
    if options.cpus_per_task:
        lines.append(f"#SBATCH --cpus-per-task={options.cpus_per_task}")
    if options.gpus_per_task:
        lines.append(f"#SBATCH --gpus-per-task={options.gpus_per_task}")
    device = f" --device {shlex.quote(options.device)}" if options.device else ""
    lines += ["set -euo pipefail", f"cd {shlex.quote(str(Path(workdir or Path.cwd()).resolve()))}",
              'task="${SLURM_ARRAY_TASK_ID:-0}"',
              f"exec {shlex.quote(python)} -m simulate.cli.main profile run "
              f"{shlex.quote(str(sweep_path))} --shard \"$task/{n}\" "
              f"--db {shlex.quote(str(shards))}/task-\"$task\".duckdb --no-progress{device}", ""]
    return "\n".join(lines)


def _slurm(args: list[str], timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    exe = shutil.which(args[0])
    if exe is None:
        raise LlmsimError(f"{args[0]} not found: is Slurm installed and on PATH?")
    try:
        return subprocess.run([exe, *args[1:]], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise LlmsimError(f"{args[0]} did not answer within {timeout_s} s") from None


def submit_script(script_path: Path, *, test_only: bool = False) -> tuple[str, str]:
    """``sbatch --parsable`` the script; returns (job id, message). Test-only gives no id."""
    args = ["sbatch", "--parsable", *(["--test-only"] if test_only else []), str(script_path)]
    done = _slurm(args)
    message = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise LlmsimError(f"sbatch failed ({done.returncode}): {message}")
    if test_only:
        return "", message
    job_id = done.stdout.strip().split(";", 1)[0]
    if not job_id.isdigit():
        raise LlmsimError(f"sbatch printed no job id: {message}")
    return job_id, message


def job_states(job_id: str) -> dict[str, str]:
    """Array task id -> JobState, from ``scontrol show job`` (empty once Slurm forgot it)."""
    done = _slurm(["scontrol", "-o", "show", "job", job_id])
    states: dict[str, str] = {}
    for line in done.stdout.splitlines():
        state = re.search(r"\bJobState=(\S+)", line)
        task = re.search(r"\bArrayTaskId=(\S+)", line)
        if state:
            states[task.group(1) if task else "0"] = state.group(1)
    return states


def wait_for_job(job_id: str, *, poll_s: float = 2.0, timeout_s: float | None = None
                 ) -> dict[str, str]:
    """Poll ``squeue`` until no task of the job is queued or running; return final states."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        done = _slurm(["squeue", "-h", "-j", job_id, "-o", "%T"])
        active = [s for s in done.stdout.split() if s not in ("COMPLETED", "FAILED",
                                                                "CANCELLED", "TIMEOUT")]
        if done.returncode == 0 and not active:
            return job_states(job_id)
        if done.returncode != 0 and "Invalid job id" in done.stderr:
            return job_states(job_id)
        if deadline is not None and time.monotonic() > deadline:
            raise LlmsimError(f"Slurm job {job_id} still running after {timeout_s} s "
                              f"(scancel {job_id} to stop it)")
        time.sleep(poll_s)


def run_slurm(sweep_path: str | Path, db: str | Path, options: SlurmOptions, *,
              test_only: bool = False, poll_s: float = 2.0,
              timeout_s: float | None = None) -> SlurmResult:
    """Write the script next to the shards, submit it, wait, merge the shards into ``db``."""
    from profiler.sweep import load_sweep  # noqa: PLC0415 - validate before submitting

    load_sweep(sweep_path)
    shards = shard_dir(db)
    shards.mkdir(parents=True, exist_ok=True)
    script = shards / "job.sbatch"
    script.write_text(sbatch_script(sweep_path, db, options), encoding="utf-8")
    job_id, message = submit_script(script, test_only=test_only)
    if test_only:
        return SlurmResult(job_id="", script_path=str(script), message=message)
    states = wait_for_job(job_id, poll_s=poll_s, timeout_s=timeout_s)
    files = sorted(shards.glob("task-*.duckdb"))
    with Store(db) as store:
        inserted, skipped = store.merge(files) if files else (0, 0)
    failed = {task: state for task, state in states.items() if state != "COMPLETED"}
    result = SlurmResult(job_id=job_id, script_path=str(script), states=states,
                         inserted=inserted, skipped=skipped, message=message)
    if failed:
        raise LlmsimError(f"Slurm job {job_id}: tasks not completed {failed} (logs in "
                          f"{shards}); merged {inserted} rows from the finished shards")
    return result
