# SPDX-License-Identifier: Apache-2.0
"""Printing for commands: rich tables for people, ``--json`` for scripts. Library code never
prints; commands call these."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table


def _default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def print_json(obj: Any) -> None:
    """One JSON document on stdout, stable key order, no NaN."""
    click.echo(json.dumps(_finite(obj), indent=2, sort_keys=True, default=_default))


def format_value(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            return str(value)
        if abs(value) >= 1e5 or abs(value) < 1e-3:
            return f"{value:.4g}"
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    if isinstance(value, Enum):
        return str(value.value)
    return "" if value is None else str(value)


def print_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None, *,
                title: str | None = None) -> None:
    """A rich table of dict rows; columns default to the first row's keys."""
    rows = list(rows)
    if columns is None:
        columns = list(rows[0]) if rows else []
    table = Table(title=title, show_lines=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(format_value(row.get(col)) for col in columns))
    Console(width=max(140, Console().width)).print(table)


def print_mapping(data: Mapping[str, Any], *, title: str | None = None) -> None:
    """Two-column key/value table."""
    print_table(({"field": k, "value": v} for k, v in data.items()), ["field", "value"],
                title=title)
