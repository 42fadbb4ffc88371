# SPDX-License-Identifier: Apache-2.0
"""``llmsim compare A B``: predict two scenarios and print them side by side."""

from __future__ import annotations

from pathlib import Path

import click

from profiler.progress import bar
from simulate.cli.output import PROGRESS, format_field, format_percent, print_json, print_table

_SCENARIO = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command(name="compare")
@click.argument("first", type=_SCENARIO)
@click.argument("second", type=_SCENARIO)
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
              help="Override a field in both scenarios (repeatable).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Measurement store (default: $LLMSIM_DB or $LLMSIM_HOME/llmsim.duckdb).")
@click.option("--no-store", is_flag=True, help="Do not use measured latencies.")
@click.option("--no-predictors", is_flag=True, help="Do not use learned predictors.")
@click.option("--all", "show_all", is_flag=True, help="Also list fields that are equal.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON list.")
@PROGRESS
def command(first: Path, second: Path, overrides: tuple[str, ...], db_path: Path | None,
            no_store: bool, no_predictors: bool, show_all: bool, as_json: bool,
            progress: bool) -> None:
    """Predict scenarios FIRST and SECOND and print every field of both with the
    difference (b - a) and the relative change."""
    from simulate.api import run  # noqa: PLC0415 - heavy import, only when run
    from simulate.compare import compare_rows  # noqa: PLC0415

    with bar("compare", unit="requests", enabled=progress and not as_json):  # serving runs
        results = [run(path, overrides=overrides, store_path=db_path, use_store=not no_store,
                       use_predictors=not no_predictors).data for path in (first, second)]
    rows = compare_rows(*results)
    if as_json:
        print_json(rows)
        return
    names = [str(result.get("name", path.name)) for result, path in zip(results, (first, second),
                                                                         strict=True)]
    rows = [r for r in rows if r["field"] != "name"]
    if not show_all:
        rows = [r for r in rows if r["diff"] not in (None, 0.0)]
    table = [{"field": r["field"], "a": format_field(r["field"], r["a"]),
              "b": format_field(r["field"], r["b"]),
              "b - a": "" if r["diff"] is None else format_field(r["field"], r["diff"]),
              "change": "" if r["rel"] is None else format_percent(r["rel"], signed=True)}
             for r in rows]
    print_table(table, ["field", "a", "b", "b - a", "change"],
                title=f"a = {names[0]}, b = {names[1]}")
