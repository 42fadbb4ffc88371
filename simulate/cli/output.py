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

from analytical.errors import SpecError
from analytical.inputs import check_output_path, check_path, show_path


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


PLOT_SUFFIXES = (".png", ".svg", ".pdf")


class OutputPath(click.ParamType):
    """An output file (or folder) checked when the flag is parsed, before any long work: a bad
    path, a missing or read-only folder or an unknown suffix is exit 2 naming the path."""

    name = "path"

    def __init__(self, suffixes: Sequence[str] | None = None, *, directory: bool = False) -> None:
        self.suffixes = tuple(suffixes) if suffixes else None
        self.directory = directory

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Path:
        if isinstance(value, Path):
            return value
        try:
            return check_output_path(value, param.opts[0] if param else "output",
                                     suffixes=self.suffixes, directory=self.directory)
        except SpecError as exc:
            self.fail(exc.reason, param, ctx)


class FiniteFloat(click.FloatRange):
    """A float flag in a range that is also finite: click's FloatRange lets ``nan`` through
    (every comparison with NaN is false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class InputPath(click.ParamType):
    """An input path whose text the OS can take (no NUL byte, not absurdly long); whether the
    file exists and parses is checked where it is read, with a named error."""

    name = "path"

    def __init__(self, *, exists: bool = False) -> None:
        self.exists = exists

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Path:
        if isinstance(value, Path):
            return value
        try:
            path = check_path(value, param.human_readable_name if param else "path")
        except SpecError as exc:
            self.fail(exc.reason, param, ctx)
        if self.exists and not path.exists():
            self.fail(f"no such file or folder: {show_path(path)}", param, ctx)
        return path
