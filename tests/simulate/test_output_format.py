# SPDX-License-Identifier: Apache-2.0
"""One formatting rule for every command: units, separators, percentages, 100 columns, plain
help."""

from __future__ import annotations

import click

from simulate.cli.main import COMMANDS, cli, main
from simulate.cli.output import (
    format_field,
    format_seconds,
    format_value,
    plain_text,
    print_table,
)


def test_numbers_units_and_percentages() -> None:
    assert format_value(870_512.3) == "870,512"
    assert format_value(1187.54) == "1,187.5"
    assert format_value(131072) == "131,072" and format_value(4096) == "4096"
    assert format_value(1.6561e-5) == "1.66e-05"
    assert format_seconds(1.6561e-5) == "16.56 us" and format_seconds(2.5) == "2.5 s"
    assert format_field("median_s", 1.6561e-5) == "16.56 us"
    assert format_field("ttft_s", 0.1783) == "178.3 ms"
    assert format_field("tokens_per_s", 870512.3) == "870,512"
    assert format_field("MFU", 0.5555) == format_field("mfu", 0.5555) == "55.5%"
    assert format_field("engine_coverage.store", 0.2041) == "20.4%"
    assert format_field("memory.weights_gib", 14.96) == "14.96 GiB"
    assert format_field("tp", 8) == "8" and format_field("fits", True) == "True"
    assert format_field("slo_attainment", 1) == "100.0%"
    assert format_field("kv_cache.blocks", 7545.0) == "7545"  # a count, not a measurement
    assert format_field("kv_cache.blocks", 120720.0) == "120,720"
    assert format_field("memory.kv_bytes_per_token_per_gpu", 524288) == "512 KiB"
    assert format_field("weight_bytes", 3 * 2**30) == "3 GiB"
    assert format_field("mean_pct", 0.64) == "0.64%"  # already a percentage
    assert format_field("err %", 13.9) == "+13.9%" and format_field("err %", -1.2) == "-1.2%"
    assert format_field("model_flops_per_iteration", 202_371_712_161_939_456) == "202.4 PFLOP"
    assert format_field("tflops_per_gpu", 588.9) == "588.9"  # TFLOP/s, not a count
    assert format_field("breakdown.compute", 41.34) == "41.34 s"
    assert format_field("n MFU", 0) == "0" and format_field("n_mfu", 2) == "2"  # counts


def test_wide_table_is_split_not_wrapped(capsys) -> None:
    columns = ["rank", *(f"column_{i}_s" for i in range(12))]
    rows = [{"rank": r, **{c: 1e-3 * (r + 1) * 1234.5 for c in columns[1:]}} for r in range(3)]
    print_table(rows, columns, title="wide")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "wide (1/2)" in out and "wide (2/2)" in out
    assert "1.234 s" in out and "3.704 s" in out  # every cell on one line, in its unit


def test_key_value_rows_format_by_field(capsys) -> None:
    print_table([{"field": "tokens/s", "value": 870512.3}, {"field": "MFU", "value": 0.386},
                 {"field": "iteration time (s)", "value": 40.79}], ["field", "value"])
    out = capsys.readouterr().out
    assert "870,512" in out and "38.6%" in out and "40.79 s" in out and "e+05" not in out


def test_help_text_is_plain(capsys) -> None:
    assert plain_text("see ``llmsim db schema`` and :func:`run`") == "see llmsim db schema and run"
    for name in COMMANDS:
        command = cli.get_command(click.Context(cli), name)
        assert "``" not in (command.help or ""), name
    assert main(["db", "import-published", "--help"]) == 0
    out = capsys.readouterr().out
    assert "PATH" in out and "``" not in out
