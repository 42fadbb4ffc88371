# SPDX-License-Identifier: Apache-2.0
"""``llmsim suite``: run the survey's benchmark suite and report per-scenario support."""

from __future__ import annotations

from pathlib import Path

import click

from profiler.progress import bar
from simulate.cli.output import PROGRESS, InputPath, format_field, print_json, print_table
from simulate.suite import run_suite


def _fmt(metric: str, value) -> str:
    """The value in the unit its metric names: '(s)' -> ms/us, utilisation -> %."""
    return "-" if value is None else format_field(metric, value)


@click.command(name="suite")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
@click.option("--dir", "directory", type=InputPath(exists=True),
              help="Suite folder (default: datasets/scenarios/suite).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Measurement store (default: $LLMSIM_DB or ~/.llmsim/llmsim.duckdb).")
@click.option("--no-store", is_flag=True, help="Do not use measured latencies.")
@click.option("--no-predictors", is_flag=True, help="Do not use learned predictors.")
@PROGRESS
def command(as_json: bool, directory: Path | None, db_path: Path | None, no_store: bool,
            no_predictors: bool, progress: bool) -> None:
    """Run every scenario of the survey suite (T1-T4, I1-I5): metric, predicted value, engines
    and supported / partial / unsupported."""
    from simulate.engines import EngineOptions

    with bar("suite", unit="scenarios", enabled=progress and not as_json):
        rows = run_suite(directory=directory,
                         engines=EngineOptions(
                             store_path=None if db_path is None else str(db_path),
                             use_store=not no_store, use_predictors=not no_predictors).checked())
    if as_json:
        print_json(rows)
        return
    columns = ["id", "category", "metric", "value", "engines", "status"]
    columns += ["note"] if any(r["note"] for r in rows) else []  # empty: keep one table
    print_table([{**r, "value": _fmt(r["metric"], r["value"]), "engines": ",".join(r["engines"])}
                 for r in rows], columns, title="llmsim benchmark suite")
    counts = {s: sum(r["status"] == s for r in rows) for s in ("supported", "partial",
                                                               "unsupported")}
    click.echo(", ".join(f"{v} {k}" for k, v in counts.items()))
