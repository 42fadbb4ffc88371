# SPDX-License-Identifier: Apache-2.0
"""Parquet in and out of the store: ``<dir>/<hardware>/<family>.parquet``.

Each file holds the family table's columns plus the fingerprint columns, so it is self-contained:
`import_parquet` rebuilds fingerprints and rows from it alone (a fresh clone loads the curated
sets in ``datasets/measurements/`` this way). Importing a file twice stores nothing twice. Each
file is one transaction and the derived roofline columns are filled afterwards for every row
that lacks them, not only this import's: an import killed at any point is completed exactly by
the next one (no row lost, none twice, no row left without its roofline).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from profiler.measurement import StoreError
from profiler.progress import advance, expect
from profiler.store import Store
from profiler.store_file import crash_point
from profiler.store_schema import FAMILIES, FINGERPRINT_COLUMNS, family_columns

_FP_EXTRA = [name for name, _ in FINGERPRINT_COLUMNS if name not in ("fingerprint_id", "hardware")]


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def export_parquet(store: Store, directory: str | Path, *, where: str = "",
                   families: tuple[str, ...] = FAMILIES) -> list[Path]:
    """Write ``<directory>/<hardware>/<family>.parquet`` for every non-empty (hardware, family).

    ``where`` is an optional SQL condition on the family table's columns (alias ``t``), e.g.
    ``t.provenance LIKE 'imported:vidur%'``. Files are zstd-compressed and sorted by op key.
    Returns the files written.
    """
    directory = Path(directory)
    con = store.connection
    written: list[Path] = []
    condition = f"AND ({where})" if where else ""
    extra = ", ".join(f'f."{name}"' for name in _FP_EXTRA)
    for family in families:
        cols = ", ".join(f't."{name}"' for name, _ in family_columns(family))
        try:
            names = [row[0] for row in con.execute(
                f'SELECT DISTINCT t.hardware FROM "{family}" t WHERE TRUE {condition} '
                "ORDER BY 1").fetchall()]
        except duckdb.Error as exc:
            raise StoreError(f"export: bad --where condition: {exc}") from None
        for name in names:
            target = directory / name / f"{family}.parquet"
            target.parent.mkdir(parents=True, exist_ok=True)
            con.execute(
                f'COPY (SELECT {cols}, {extra} FROM "{family}" t LEFT JOIN fingerprints f '
                f"USING (fingerprint_id) WHERE t.hardware = {_text(name)} {condition} "
                f"ORDER BY t.op_key, t.point_key) TO {_text(str(target))} "
                "(FORMAT parquet, COMPRESSION zstd)")
            written.append(target)
    return written


def parquet_files(path: str | Path) -> list[Path]:
    """``path`` itself if it is a file, else every ``<family>.parquet`` below it, sorted."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise StoreError(f"{path}: no such file or directory")
    return sorted(p for p in path.rglob("*.parquet") if p.stem in FAMILIES)


def import_parquet(store: Store, path: str | Path) -> tuple[int, int]:
    """Load Parquet files written by `export_parquet`; returns (inserted, skipped).

    The family is the file stem (``gemm.parquet``); a file missing a column raises StoreError
    naming the file and column. Roofline columns are recomputed where the catalog knows the
    hardware and the store has none, including rows an interrupted import left unfilled.
    """
    con = store.connection
    inserted = skipped = 0
    files = list(parquet_files(path))
    expect(len(files), unit="files")
    for file in files:
        family = file.stem
        if family not in FAMILIES:
            raise StoreError(f"{file}: file name must be <family>.parquet, family one of "
                             f"{', '.join(FAMILIES)}")
        source = f"read_parquet({_text(str(file))})"
        try:
            present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
        except duckdb.Error as exc:
            raise StoreError(f"{file}: not a readable Parquet file: {exc}") from None
        needed = [name for name, _ in family_columns(family)] + _FP_EXTRA
        missing = [name for name in needed if name not in present]
        if missing:
            raise StoreError(f"{file}: missing column {missing[0]!r} for family {family}")
        fp_cols = ", ".join(f'"{name}"' for name, _ in FINGERPRINT_COLUMNS)
        counts = [0, 0]

        def work(source: str = source, fp_cols: str = fp_cols, family: str = family,
                 counts: list[int] = counts) -> None:
            con.execute(f"INSERT OR IGNORE INTO fingerprints SELECT DISTINCT {fp_cols} "
                        f"FROM {source}")
            counts[1] = con.execute(f"SELECT count(*) FROM {source}").fetchall()[0][0]
            counts[0] = store.upsert(family, source)

        try:
            store.transaction(work, phase="import")
        except duckdb.Error as exc:
            raise StoreError(f"{file}: cannot load: {exc}") from None
        inserted += counts[0]
        skipped += counts[1] - counts[0]
        advance(1, unit="files", label=f"{file.parent.name}/{file.name}")
        crash_point("import.between_files")
    crash_point("import.before_fill")
    store.fill_roofline()  # also repairs rows an interrupted import left without it
    return inserted, skipped
