# SPDX-License-Identifier: Apache-2.0
"""`llmsim validate published --kind serving --rows FILE`: one CSV line per scored row."""

from __future__ import annotations

import csv
from pathlib import Path

from simulate.cli.validate_cmd import _write_serving_rows


def test_each_row_gets_its_measured_predicted_and_signed_error(tmp_path: Path) -> None:
    results = [
        {"id": "src/0/0", "source": "src", "engine": "vllm", "mode": "closed", "concurrency": 4,
         "measured": {"tpot_ms": 5.0, "ttft_ms": 20.0}, "predicted": {"tpot_ms": 6.0},
         "error": {"tpot_ms": 0.2}},
        {"id": "src/0/1", "source": "src", "engine": "vllm", "mode": "offline",
         "concurrency": 0, "measured": {"output_tok_s": 100.0}, "fits": False},
    ]
    path = tmp_path / "rows.csv"
    _write_serving_rows(path, results, ("ttft_ms", "tpot_ms", "output_tok_s"))
    rows = list(csv.DictReader(path.open()))
    assert [r["id"] for r in rows] == ["src/0/0", "src/0/1"]
    first = rows[0]
    assert (first["tpot_ms_measured"], first["tpot_ms_predicted"], first["tpot_ms_error"]) == (
        "5.0", "6.0", "0.2")
    assert first["ttft_ms_measured"] == "20.0" and first["ttft_ms_predicted"] == ""
    assert rows[1]["output_tok_s_measured"] == "100.0" and rows[1]["output_tok_s_error"] == ""
    assert rows[1]["mode"] == "offline" and rows[0]["concurrency"] == "4"


def test_serving_refuses_the_training_only_flags(tmp_path: Path) -> None:
    """--write-readme and --corpus were accepted and silently ignored with --kind serving."""
    from click.testing import CliRunner

    from simulate.cli.validate_cmd import group

    for flag in ("--write-readme", "--corpus"):
        target = tmp_path / "x.md"
        target.write_text("")
        out = CliRunner().invoke(group, ["published", "--kind", "serving", flag, str(target),
                                         "--no-store", "--no-predictors"])
        assert out.exit_code == 2, out.output
        assert flag in out.output and "--kind training" in out.output
        assert target.read_text() == ""
