# SPDX-License-Identifier: Apache-2.0
"""``llmsim db``: inspect, query, compare, merge, export and import the measurement store.

``--db`` (or ``$LLMSIM_DB``) picks the DuckDB file; the default is ``$LLMSIM_HOME/llmsim.duckdb``.
Commands that read open it with `profiler.store.open_for_reading` (missing, locked or corrupt:
exit 2 naming the file); merge and the imports create it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pandas as pd

from analytical.paths import DATASETS_DIR
from profiler.importers import import_published
from profiler.importers.curate import write_curated
from profiler.progress import bar
from profiler.store import Store, open_for_reading
from profiler.store_parquet import export_parquet, import_parquet
from simulate.cli.output import PROGRESS, InputPath, OutputPath, print_json, print_table

_DB = click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                   help="Store file (default: $LLMSIM_DB or $LLMSIM_HOME/llmsim.duckdb).")
_SOURCE = click.option("--source", type=click.Choice(["aiconfigurator", "vidur", "all"]),
                       default="all", show_default=True, help="Published set(s).")
_DATA_DIR = click.option("--data-dir", type=InputPath(exists=True), required=True,
                         help="Folder holding aiconfigurator/ and vidur/ (their LICENSE files "
                         "are copied beside the Parquet).")


def _plain(value: Any) -> Any:
    """A JSON-friendly scalar: NULL/NaN -> None, timestamps -> ISO text, numpy -> Python."""
    if not pd.api.types.is_scalar(value):
        return value.tolist() if hasattr(value, "tolist") else value
    if pd.isna(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value.item() if hasattr(value, "item") else value


def _reading(db: Path | None) -> Store:
    return open_for_reading(db, required=True, missing_hint=(
        "import or profile data first (llmsim db import-parquet datasets/measurements)"))


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): _plain(v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")]


@click.group()
def group() -> None:
    """The measurement store: info, query, merge, export, import."""


@group.command()
@_DB
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def info(db: Path | None, as_json: bool) -> None:
    """Row counts per provenance, hardware, family and status, the fingerprints, and the
    DuckDB library and storage format (the oldest DuckDB, CLI included, that opens the file)."""
    with _reading(db) as store:
        counts, fingerprints = store.info(), store.fingerprints()
        storage = store.storage_info()
    rows = int(counts["rows"].sum()) if len(counts) else 0
    if as_json:
        print_json({**storage, "rows": rows, "counts": _records(counts),
                    "fingerprints": _records(fingerprints)})
        return
    click.echo(f"DuckDB library {storage['duckdb_library']}; storage format "
               f"{storage['storage_version']} (the oldest DuckDB that opens this file)")
    # ok rows without a status column, so the longest provenance fits 100 columns unfolded
    ok = counts["status"] == "ok"
    print_table(_records(counts[ok]), ["provenance", "hardware", "family", "rows"],
                title=f"{storage['db']}: {rows:,} rows, {int(counts[ok]['rows'].sum()):,} ok")
    if (~ok).any():
        print_table(_records(counts[~ok]), title="rows not ok")
    print_table(_records(fingerprints), ["fingerprint_id", "hardware", "device_name",
                                         "device_count", "torch", "cuda", "nccl", "host", "rows"],
                title="fingerprints")


@group.command()
@click.argument("sql")
@_DB
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON list.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the rows as CSV.")
def query(sql: str, db: Path | None, as_json: bool, as_csv: bool) -> None:
    """Run one SQL statement on the store (read-only)."""
    if as_json and as_csv:
        raise click.UsageError("--json and --csv are exclusive")
    with _reading(db) as store:
        frame = store.query(sql)
    if as_csv:
        click.echo(frame.to_csv(index=False), nl=False)
    elif as_json:
        print_json(_records(frame))
    else:
        print_table(_records(frame), [str(c) for c in frame.columns])


@group.command()
@click.argument("first", type=InputPath(exists=True))
@click.argument("second", type=InputPath(exists=True))
@click.option("--across-backends", is_flag=True,
              help="Match on op key alone: two software stacks measuring the same shapes.")
@click.option("--across-hardware", is_flag=True,
              help="Match on op key and backend: one stack's kernels on two GPUs.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON list.")
def compare(first: Path, second: Path, across_backends: bool, across_hardware: bool,
            as_json: bool) -> None:
    """Run-to-run agreement of two measurements of the same operators (the noise floor).

    FIRST and SECOND are store files or Parquet folders (`db export`); operators match on
    hardware, op key and backend. Prints |second - first| / first in percent and the median
    ratio second / first, per family and per latency band of the first run.
    """
    from profiler.repeatability import compare_runs, load_ok_rows  # noqa: PLC0415

    rows = [a.as_row() for a in compare_runs(load_ok_rows(first), load_ok_rows(second),
                                             across_backends=across_backends,
                                             across_hardware=across_hardware)]
    if as_json:
        print_json(rows)
        return
    for row in rows:
        for key in ("mean_pct", "median_pct", "p90_pct", "max_pct", "over_10_pct",
                    "median_ratio"):
            row[key] = round(float(row[key]), 2 if key != "median_ratio" else 3)
    print_table(rows, title=f"{second} vs {first}: |difference| in % of the first run")


@group.command()
@click.argument("shards", nargs=-1, required=True,
                type=InputPath(exists=True))
@_DB
@PROGRESS
def merge(shards: tuple[Path, ...], db: Path | None, progress: bool) -> None:
    """Fold worker shards into the store (idempotent)."""
    with Store(db) as store, bar("merge", unit="files", enabled=progress):
        inserted, skipped = store.merge(shards)
    click.echo(f"merged {len(shards)} shard(s): {inserted:,} rows inserted, {skipped:,} already stored")


@group.command()
@click.option("--parquet", "directory", required=True,
              type=OutputPath(directory=True),
              help="Write <DIR>/<hardware>/<family>.parquet.")
@click.option("--where", default="", help="SQL condition on the family table (alias t).")
@_DB
def export(directory: Path, where: str, db: Path | None) -> None:
    """Export the store as Parquet, one file per hardware and family."""
    with _reading(db) as store:
        files = export_parquet(store, directory, where=where)
    click.echo(f"wrote {len(files)} file(s) under {directory}")


@group.command("import-published")
@click.argument("data_dir", metavar="PATH",
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@_SOURCE
@_DB
@PROGRESS
def import_published_cmd(source: str, data_dir: Path, db: Path | None, progress: bool) -> None:
    """Load the published AIConfigurator / Vidur measurements from PATH, the folder holding
    aiconfigurator/ and vidur/ (imported only once)."""
    with Store(db) as store, bar("import-published", unit="rows", enabled=progress):
        result = import_published(store, source=source, data_dir=data_dir)
    for name, (inserted, skipped) in result.items():
        click.echo(f"{name}: {inserted:,} rows inserted, {skipped:,} already stored")


@group.command("import-parquet")
@click.argument("path", type=InputPath(exists=True))
@_DB
@PROGRESS
def import_parquet_cmd(path: Path, db: Path | None, progress: bool) -> None:
    """Load Parquet written by `db export` or `db curate` (a file or a folder)."""
    with Store(db) as store, bar("import-parquet", unit="files", enabled=progress):
        inserted, skipped = import_parquet(store, path)
    click.echo(f"{path}: {inserted:,} rows inserted, {skipped:,} already stored")


@group.command()
@_SOURCE
@click.option("--out", type=OutputPath(directory=True),
              default=DATASETS_DIR / "measurements", show_default=True,
              help="Folder for <source>/<hardware>/<family>.parquet.")
@_DATA_DIR
@_DB
def curate(source: str, out: Path, data_dir: Path, db: Path | None) -> None:
    """Write the curated subset of imported sets as Parquet (run import-published first)."""
    with _reading(db) as store:
        files = write_curated(store, out, source=source, data_dir=data_dir)
    click.echo(f"wrote {len(files)} file(s) under {out}")


# `db import` and `db schema` (user tables, column docs) live in their own module.
from simulate.cli.db_import_cmd import import_cmd, schema_cmd  # noqa: E402

group.add_command(import_cmd)
group.add_command(schema_cmd)
