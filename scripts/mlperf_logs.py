# SPDX-License-Identifier: Apache-2.0
"""Read the step time of an MLPerf Training submission from its result logs, as the
`mlperf-training` corpus rows do (datasets/validation/training/README.md, "MLPerf Training").

Usage: python scripts/mlperf_logs.py REPO_GIT_DIR RESULTS_DIR [RESULTS_DIR ...]
  e.g. .../training_results_v5.1 University-of-Florida/results/hpg.dgxb200x8.n4/llama31_8b

Prints one JSON line per results directory: the median over its logs of each log's median
`tracked_stats` train step time (NeMo's `train_step_timing`, `train_step_timing in s` in v4.1,
`train_step_time` in v5.x), the same median of the training blocks (block_start..block_stop per
step, where the blocks carry a step: v5.x; the v3.x/v4.x blocks count samples, and the v4.0
rows without tracked_stats were timed from them by hand), and the logged global batch, gradient accumulation and
sequence length that a row's layout is checked against. Reads the newest commit of a git
mirror so that the numbers are those of the commit the corpus names.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from typing import Any

STEP_KEYS = ("train_step_time", "train_step_timing", "train_step_timing in s")
LOGGED = ("global_batch_size", "gradient_accumulation_steps", "max_sequence_length",
          "submission_org", "submission_platform")


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          check=False).stdout


def _records(text: str) -> list[dict[str, Any]]:
    """The `:::MLLOG {...}` records of a log; multi-rank logs prefix each line with `N: `."""
    out = []
    for line in text.splitlines():
        i = line.find(":::MLLOG ")
        if i < 0:
            continue
        try:
            out.append(json.loads(line[i + len(":::MLLOG "):]))
        except json.JSONDecodeError:
            continue
    return out


def read_log(text: str) -> tuple[list[float], list[float], dict[str, str]]:
    """(tracked step times, per-step block times, logged settings) of one result log."""
    steps: list[float] = []
    blocks: list[float] = []
    logged: dict[str, str] = {}
    start: tuple[int, Any] | None = None
    for r in _records(text):
        key, value, meta = r.get("key"), r.get("value"), r.get("metadata") or {}
        if key in LOGGED:
            logged[key] = str(value)
        elif key == "tracked_stats" and isinstance(value, dict):
            steps += [float(value[k]) for k in STEP_KEYS if k in value]
        elif key == "block_start":
            start = (r["time_ms"], meta.get("step"))
        elif key == "block_stop" and start is not None:
            if meta.get("step") is not None and start[1] is not None and meta["step"] > start[1]:
                blocks.append((r["time_ms"] - start[0]) / 1000 / (meta["step"] - start[1]))
            start = None
    return steps, blocks, logged


def read_submission(repo: str, results_dir: str) -> dict[str, Any]:
    """The corpus measurement of one `<Submitter>/results/<system>/<benchmark>` directory."""
    names = [f for f in _git(repo, "ls-tree", "--name-only", "HEAD", results_dir + "/").split()
             if re.search(r"result_[^/]*\.txt$", f)]
    medians, block_medians, n_steps = [], [], 0
    settings: dict[str, set[str]] = {}
    for name in names:
        steps, blocks, logged = read_log(_git(repo, "show", "HEAD:" + name))
        if steps:
            medians.append(statistics.median(steps))
            n_steps += len(steps)
        if blocks:
            block_medians.append(statistics.median(blocks))
        for k, v in logged.items():
            settings.setdefault(k, set()).add(v)
    return {"dir": results_dir, "logs": len(names), "tracked_steps": n_steps,
            "step_time_s": statistics.median(medians) if medians else None,
            "block_step_s": statistics.median(block_medians) if block_medians else None,
            **{k: sorted(v) for k, v in settings.items()}}


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    for d in argv[2:]:
        print(json.dumps(read_submission(argv[1], d.rstrip("/"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
