# SPDX-License-Identifier: Apache-2.0
"""Every case of the bad-input corpus exits 2 with one stderr line naming the field or cause.

Cases run in-process through `simulate.cli.main.main` (the same code path as the ``llmsim``
script). A case that runs past its time limit is stopped by SIGALRM and fails (no wall-clock
assert: the limit only turns a hang into a failure). No case may leave a store behind.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from fuzz_corpus import Case, cases

from simulate.cli.main import main

CASES = cases()


class CaseTimeout(BaseException):
    """Not an Exception, so the CLI's catch-all cannot swallow it."""


def _alarm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise CaseTimeout


def _materialise(case: Case, folder: Path) -> list[str]:
    for name, body in case.files.items():
        (folder / name).write_bytes(body.replace(b"{d}", str(folder).encode()))
    return [arg.replace("{d}", str(folder)) for arg in case.argv]


def test_corpus_is_large_and_covers_every_command():
    commands = {c.argv[0] for c in CASES}
    assert len(CASES) >= 300
    assert commands >= {"simulate", "search", "profile", "hardware", "models", "train", "db",
                        "validate", "simulate-torch", "suite"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_2_with_one_named_line(case: Case, tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("LLMSIM_HOME", str(home))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "default.duckdb"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    argv = _materialise(case, tmp_path)
    before = set(tmp_path.rglob("*"))
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(case.timeout_s)
    try:
        code = main(argv)
    except CaseTimeout:
        pytest.fail(f"{case.id}: still running after {case.timeout_s} s (hang or blow-up)")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"exit {code}; stderr: {err[-2000:]}"
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert re.search(case.match, lines[0], re.IGNORECASE), lines[0][:500]
    created = {p for p in set(tmp_path.rglob("*")) - before if p.suffix in (".duckdb", ".wal")}
    assert not created, f"a store was written: {sorted(map(str, created))}"
