# SPDX-License-Identifier: Apache-2.0
"""``llmsim db import FILE`` and ``llmsim db schema``: bring your own measurements.

The logic is in `profiler.import_table` (reading, validation, derivation) and
`profiler.store_docs` (what each column means); this module only parses options and prints.
"""

from __future__ import annotations

from pathlib import Path

import click

from analytical.ops import OP_FAMILIES
from simulate.cli.output import PROGRESS, print_json, print_table

_FAMILY = click.Choice(list(OP_FAMILIES))


@click.command("import")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("--family", type=_FAMILY, default=None,
              help="Operator family (default: a 'family' column, else told by the columns).")
@click.option("--hardware", default=None,
              help="Catalog hardware name for rows without a 'hardware' column.")
@click.option("--source", default=None,
              help="Provenance imported:<SOURCE> (default: a 'source' column, else the file "
              "name).")
@click.option("--backend", default=None, help="Backend for rows without one (default: user).")
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Store file (default: $LLMSIM_DB or $LLMSIM_HOME/llmsim.duckdb).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@PROGRESS
def import_cmd(files: tuple[Path, ...], family: str | None, hardware: str | None,
               source: str | None, backend: str | None, db: Path | None,
               as_json: bool, progress: bool) -> None:
    """Import measurements from CSV, Parquet or JSON files.

    Each row needs the operator's shape columns and dtype, one latency column
    (latency_s, latency_ms, latency_us or median_s) and a hardware name. See
    `llmsim db schema` for the columns of each family. A file is checked completely
    before anything is stored; importing it twice stores nothing twice.
    """
    from profiler.import_table import import_table  # noqa: PLC0415
    from profiler.progress import advance, bar  # noqa: PLC0415
    from profiler.store import Store  # noqa: PLC0415
    from profiler.store_docs import comment_store  # noqa: PLC0415

    results = []
    with Store(db) as store, bar("import", unit="files", total=len(files), enabled=progress and not as_json):
        for path in files:
            results.append(import_table(store, path, family=family, hardware=hardware,
                                        source=source, backend=backend))
            advance(1, unit="files", label=path.name)
        comment_store(store.connection)
    if as_json:
        print_json([{"file": str(r.path), "family": r.family, "rows": r.rows,
                     "points": r.measurements, "inserted": r.inserted, "skipped": r.skipped}
                    for r in results])
        return
    for r in results:
        click.echo(f"{r.path}: {r.rows:,} rows -> {r.measurements:,} {r.family} points, "
                   f"{r.inserted:,} inserted, {r.skipped:,} already stored")


@click.command("schema")
@click.option("--family", type=_FAMILY, default=None, help="Only this family's import columns.")
@click.option("--store", "show_store", is_flag=True,
              help="Describe the store's tables and columns instead.")
@click.option("--write-comments", is_flag=True,
              help="Write the descriptions into the store (--db) as DuckDB column comments.")
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Store file for --write-comments (default: $LLMSIM_DB or "
              "$LLMSIM_HOME/llmsim.duckdb).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def schema_cmd(family: str | None, show_store: bool, write_comments: bool, db: Path | None,
               as_json: bool) -> None:
    """The columns `llmsim db import` reads, per family (or, with --store, every table).

    `db import` and --write-comments store the same descriptions as DuckDB column comments,
    so `SELECT table_name, column_name, comment FROM duckdb_columns()` in the duckdb CLI
    shows them too.
    """
    from profiler.store_docs import comment_store, import_schema, store_columns  # noqa: PLC0415

    if write_comments:
        from profiler.store import Store  # noqa: PLC0415

        with Store(db) as store:
            count = comment_store(store.connection)
            path = store.path
        click.echo(f"{path}: {count} column comments written" if count else
                   f"{path}: this DuckDB has no COMMENT ON COLUMN; nothing written")
        return
    if show_store:
        rows = store_columns()
        if as_json:
            print_json(rows)
        else:
            print_table(rows, ["table", "column", "type", "meaning"], title="store columns")
        return
    families = [family] if family else list(OP_FAMILIES)
    if as_json:
        print_json({name: import_schema(name) for name in families})
        return
    for name in families:
        print_table(import_schema(name), ["column", "need", "meaning"],
                    title=f"db import: {name}")
