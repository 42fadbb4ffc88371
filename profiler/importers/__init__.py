# SPDX-License-Identifier: Apache-2.0
"""Importers of published GPU measurements (one module per source) and their registry.

Each source module exposes ``measurements(data_dir, *, gpus=None, families=None, limit=None)``
yielding `Measurement`s with ``provenance="imported:<source>"``; its docstring records how the
units were verified. `import_published` loads them into a store in chunks; point keys make a
second import store nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from analytical.errors import UnknownNameError
from profiler.importers import aiconfigurator, vidur
from profiler.importers.common import chunked
from profiler.measurement import Measurement
from profiler.progress import advance
from profiler.store import Store

__all__ = ["IMPORTERS", "import_published"]

IMPORTERS: dict[str, Callable[..., Iterator[Measurement]]] = {
    "aiconfigurator": aiconfigurator.measurements,
    "vidur": vidur.measurements,
}



def sources(source: str) -> list[str]:
    """``"all"`` or one registered source name -> the list of sources."""
    if source == "all":
        return list(IMPORTERS)
    if source not in IMPORTERS:
        raise UnknownNameError("measurement source", source, [*IMPORTERS, "all"])
    return [source]


def import_published(store: Store, *, data_dir: str | Path, source: str = "all",
                     chunk_rows: int = 50_000) -> dict[str, tuple[int, int]]:
    """Load published sets into ``store``; returns {source: (inserted, already stored)}.

    ``data_dir`` holds ``aiconfigurator/`` and ``vidur/`` (checkouts of those projects' data);
    each chunk of ``chunk_rows`` measurements is one transaction.
    """
    data_dir = Path(data_dir)
    result: dict[str, tuple[int, int]] = {}
    for name in sources(source):
        inserted = seen = 0
        for batch in chunked(IMPORTERS[name](data_dir), chunk_rows):
            seen += len(batch)
            inserted += store.insert(batch)
            advance(len(batch), unit="rows", label=name)
        result[name] = (inserted, seen - inserted)
    return result
