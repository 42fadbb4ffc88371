# SPDX-License-Identifier: Apache-2.0
"""Printing for commands: tables for people, ``--json`` for scripts. Library code never prints;
commands call these.

One formatting rule for every command: a value is shown by what its name says it is. Seconds
(``*_s``, ``(s)``) get the unit that keeps 1-999 before it (ns, us, ms, s); ``*_gib`` gets GiB;
MFU, fractions, utilisation and engine coverage are percentages; large numbers get thousands
separators instead of exponents. Tables are at most `WIDTH` columns wide: a wider table is
split into parts that repeat its first column, so no cell wraps. JSON output is never
formatted.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from analytical.errors import SpecError
from analytical.inputs import check_output_path, check_path, show_path

WIDTH = 100  # columns a table may use (a terminal narrower than this gets its own width)
_PAD = 3  # rich's per-column padding and border
_TEXT_CAP = 34  # a text column wider than this folds instead of pushing columns off the table


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
    """A number for people: 4 significant digits, thousands separators, no exponent above
    1e-3 (smaller magnitudes keep one, e.g. 1.66e-05)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy scalars
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            return "0" if value == 0 else str(value)
        magnitude = abs(value)
        if magnitude >= 1000 and value.is_integer():  # a count held in a float
            return format_value(int(value))
        if magnitude >= 10_000:
            return f"{value:,.0f}"
        if magnitude >= 1000:
            return f"{value:,.1f}"
        if magnitude >= 1e-3:
            return f"{value:.4g}"
        return f"{value:.3g}"
    if isinstance(value, Enum):
        return str(value.value)
    return "" if value is None else str(value)


def format_seconds(value: float) -> str:
    """Seconds in the unit that keeps 1-999 before it: 1.66e-05 -> '16.6 us'."""
    magnitude = abs(value)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if magnitude >= scale:
            return f"{format_value(value / scale)} {unit}"
    return f"{format_value(value / 1e-9)} ns" if magnitude else "0 s"


def format_percent(fraction: float, *, signed: bool = False) -> str:
    """0.386 -> '38.6%' ('+38.6%' with ``signed``)."""
    return f"{100 * fraction:{'+' if signed else ''}.1f}%"


_PERCENT_NAMES = re.compile(r"(^|[._ ])(mfu|utilisation|utilization|fraction|coverage|attainment)"
                            r"|fraction$|^engine_coverage\.|busy", re.IGNORECASE)


def format_field(name: str, value: Any) -> str:
    """``value`` formatted by what ``name`` says it holds (see the module docstring)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return format_value(value)
    if not math.isfinite(value):
        return str(value)
    lowered = name.lower().strip()
    if _PERCENT_NAMES.search(lowered) and "roofline_s" not in lowered and -2 <= value <= 2 \
            and not re.match(r"n[ _]", lowered):  # 'n MFU' is a count
        return format_percent(float(value))
    if (re.search(r"(_s|\(s\)|seconds)$", lowered) and "per_s" not in lowered
            or lowered.startswith("breakdown.")) and isinstance(value, float):
        return format_seconds(value)
    if re.search(r"(^|[._])flops($|_per_(iteration|token|step))", lowered) and abs(value) >= 1e6:
        return format_si(float(value), "FLOP")
    if lowered.endswith("_gib"):
        return f"{format_value(float(value))} GiB"
    if lowered.endswith(("_pct", " %")):  # already in percent; signed errors keep their +
        sign = "+" if value > 0 and re.search(r"err|signed", lowered) else ""
        return f"{sign}{format_value(value)}%"
    if re.search(r"(^|_)bytes($|_per_)", lowered):
        return format_bytes(float(value))
    return format_value(value)


def format_si(value: float, unit: str) -> str:
    """A count with an SI prefix instead of 18 digits: 2.024e17 FLOP -> '202.4 PFLOP'."""
    for power, prefix in ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if abs(value) >= 10 ** power:
            return f"{format_value(value / 10 ** power)} {prefix}{unit}"
    return f"{format_value(value)} {unit}"


def format_bytes(value: float) -> str:
    """Bytes in the binary unit that keeps 1-1023 before it: 524288 -> '512 KiB'."""
    for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if abs(value) >= 1024 ** power:
            return f"{format_value(value / 1024 ** power)} {unit}"
    return f"{format_value(value)} B"


def _cells(rows: list[Mapping[str, Any]], columns: Sequence[str]) -> list[list[str]]:
    """Formatted cells; a key/value table formats each value by its row's field name."""
    keyed = "field" in columns and "value" in columns
    out = []
    for row in rows:
        name = str(row.get("field", "")) if keyed else ""
        out.append([format_field(name if keyed and col == "value" else col, row.get(col))
                    for col in columns])
    for i, col in enumerate(columns):  # one style per column: 9890 beside 71,038 reads wrong
        if not keyed and any("," in r[i] for r in out):
            for r, row in zip(out, rows, strict=True):
                value = row.get(col)
                if r[i].isdigit() and _is_number(value) and abs(value) >= 1000:
                    r[i] = f"{int(value):,}"
    return out


def _width() -> int:
    console = Console()
    return min(WIDTH, console.width) if console.is_terminal else WIDTH


def _column_groups(columns: Sequence[str], cells: list[list[str]], texts: Sequence[bool],
                   width: int) -> list[list[int]]:
    """Column indexes per printed part: each part repeats column 0 and fits ``width``. Text
    columns count as at most `_TEXT_CAP` wide (rich folds longer text); numbers never fold."""
    sizes = [min(max([len(str(col)), *(len(r[i]) for r in cells)]), _TEXT_CAP if text else 10**6)
             + _PAD for i, (col, text) in enumerate(zip(columns, texts, strict=True))]
    groups: list[list[int]] = []
    current: list[int] = [0]
    used = sizes[0] + 1
    for i in range(1, len(columns)):
        if len(current) > 1 and used + sizes[i] > width:
            groups.append(current)
            current, used = [0], sizes[0] + 1
        current.append(i)
        used += sizes[i]
    groups.append(current)
    return groups


def print_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None, *,
                title: str | None = None) -> None:
    """A table of dict rows (columns default to the first row's keys), at most `WIDTH` wide."""
    rows = list(rows)
    if columns is None:
        columns = list(rows[0]) if rows else []
    columns = [str(c) for c in columns]
    cells = _cells(rows, columns)
    width = _width()
    numeric = [bool(rows) and all(_is_number(r.get(col)) or r.get(col) is None for r in rows)
               for col in columns]
    texts = [not n and col not in ("field",) for col, n in zip(columns, numeric, strict=True)]
    groups = _column_groups(columns, cells, texts, width) if columns else [[]]
    console = Console(width=width)
    for part, indexes in enumerate(groups):
        label = title
        if len(groups) > 1:
            label = f"{title or 'table'} ({part + 1}/{len(groups)})"
        natural = 1 + sum(_PAD + max([len(columns[i]), *(len(r[i]) for r in cells)])
                          for i in indexes)
        if part and label and len(label) > natural:  # a continuation: keep its title short
            label = f"{title[:max(natural - len(label) + len(title) - 3, 8)]}... " \
                    f"({part + 1}/{len(groups)})"
        # a first table narrower than its title grows to it rather than fold the title
        table = Table(title=label, show_lines=False, min_width=min(len(label or "") + 4, width))
        for i in indexes:
            table.add_column(columns[i], overflow="fold", no_wrap=not texts[i],
                             justify="right" if numeric[i] else "left")
        for row in cells:
            table.add_row(*(row[i] for i in indexes))
        console.print(table)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def print_mapping(data: Mapping[str, Any], *, title: str | None = None) -> None:
    """Two-column key/value table."""
    print_table(({"field": k, "value": v} for k, v in data.items()), ["field", "value"],
                title=title)


_RST = (
    (re.compile(r":[a-z]+:`([^`]+)`"), r"\1"),  # :func:`x` -> x
    (re.compile(r"``([^`]+)``"), r"\1"),  # ``x`` -> x
    (re.compile(r"(?<![\w`])`([^`]+)`(?![\w`])"), r"\1"),  # `x` -> x
)


def plain_text(text: str | None) -> str | None:
    """Help text without reStructuredText markup (double backticks, roles)."""
    if not text:
        return text
    for pattern, replacement in _RST:
        text = pattern.sub(replacement, text)
    return text


def plain_help(command: click.Command) -> click.Command:
    """Strip RST markup from a command's help, its options' help and its sub-commands'."""
    command.help = plain_text(command.help)
    command.short_help = plain_text(command.short_help)
    for param in command.params:
        if isinstance(param, click.Option):
            param.help = plain_text(param.help)
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    return command
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


PROGRESS = click.option(
    "--progress/--no-progress", default=True, show_default=True,
    help="Progress bar with ETA on stderr (on a terminal, once the work has run 2 s).")
