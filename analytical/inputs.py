# SPDX-License-Identifier: Apache-2.0
"""The input contract: every file llmsim reads or writes goes through here.

A bad file is a `SpecError` naming the file and the cause (exit 2), never a traceback: bad
paths (NUL, absurd length), missing or unreadable files, text that is not UTF-8 or holds NUL
bytes, YAML/JSON that is too large, too deep or an alias bomb (refused while composing, before
anything is expanded: the "billion laughs" pattern, see
https://en.wikipedia.org/wiki/Billion_laughs_attack), and output paths that cannot be written.
Numbers inside documents are checked by the field readers (`simulate.fields`); work whose size is
known up front is checked with `check_work`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

from analytical.errors import SpecError

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_NODES", "MAX_PATH_CHARS", "check_latencies",
           "check_output_path", "check_path", "check_work", "load_json", "load_yaml",
           "output_errors", "parse_json", "parse_yaml", "read_csv_rows", "read_parquet",
           "read_text", "show_path", "write_text"]

MAX_FILE_BYTES = 64 * 2**20  # a scenario, sweep, hardware or config file; traces are larger
MAX_TRACE_BYTES = 512 * 2**20
MAX_DEPTH = 64  # nesting of mappings/lists; our deepest file (a sweep) uses 6
MAX_NODES = 250_000  # scalars + collections after alias expansion
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux
_SHOW_CHARS = 80


def show_path(path: str | os.PathLike[str]) -> str:
    """A path short enough for a one-line error (absurd paths are cut, with their length)."""
    text = os.fspath(path).replace("\x00", "\\0").replace("\n", "\\n")
    if len(text) <= _SHOW_CHARS:
        return text
    return f"{text[:_SHOW_CHARS]}... ({len(text):,} characters)"


def check_path(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` as a `Path` if the OS could use it: no NUL byte, not absurdly long."""
    if not isinstance(path, (str, os.PathLike)):
        raise SpecError(what, f"expected a file path, got {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise SpecError(what, "expected a text path")
    if not text:
        raise SpecError(what, "empty path")
    if "\x00" in text:
        raise SpecError(what, f"path contains a NUL byte: {show_path(text)}")
    if len(text) > MAX_PATH_CHARS:
        raise SpecError(what, f"path is {len(text):,} characters; the limit is "
                        f"{MAX_PATH_CHARS}: {show_path(text)}")
    if any(len(part) > 255 for part in Path(text).parts):  # NAME_MAX on Linux file systems
        raise SpecError(what, f"a path component is longer than 255 characters: "
                        f"{show_path(text)}")
    return Path(text)


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return exc.strerror or type(exc).__name__


def read_bytes(path: str | os.PathLike[str], what: str, *, limit: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes; missing, unreadable or larger than ``limit`` is a named error."""
    p = check_path(path, what)
    try:
        with p.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise SpecError(what, f"cannot read: {_os_reason(exc)}", source=show_path(p)) from None
    if len(data) > limit:
        raise SpecError(what, f"file larger than {limit / 2**20:.0f} MiB", source=show_path(p))
    return data


def read_text(path: str | os.PathLike[str], what: str, *, limit: int = MAX_FILE_BYTES) -> str:
    """The file as UTF-8 text (a BOM is allowed); NUL bytes or other encodings are named."""
    data = read_bytes(path, what, limit=limit)
    where = show_path(path)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise SpecError(what, f"contains a NUL byte at offset {nul} (binary file?)", source=where)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(what, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                        f"{exc.start}); save the file as UTF-8", source=where) from None


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader that bounds nesting depth and the size the document would have once every
    alias is expanded; both are checked while composing, before any Python object is built."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            # types-PyYAML leaves Parser.peek_event unannotated; it returns an Event.
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise _LimitError(f"nested deeper than {MAX_DEPTH} levels (line "
                              f"{event.start_mark.line + 1})")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Node | None:
        node = Composer.compose_document(self)
        if node is not None:  # never None in PyYAML; the stubs say it may be
            _expanded_size(node, {}, set())
        return node


class _LimitError(Exception):
    pass


def _expanded_size(node: Node, memo: dict[int, int], active: set[int]) -> int:
    """Nodes in the tree once aliases are expanded; memoised, so a bomb costs its text size."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise _LimitError("an alias refers to itself (recursive structure)")
    active.add(key)
    total = 1
    if isinstance(node, SequenceNode):
        total += sum(_expanded_size(child, memo, active) for child in node.value)
    elif isinstance(node, MappingNode):
        for k, v in node.value:
            total += _expanded_size(k, memo, active) + _expanded_size(v, memo, active)
            if total > MAX_NODES:
                break
    active.discard(key)
    if total > MAX_NODES:
        raise _LimitError(f"expands to more than {MAX_NODES:,} values (an alias bomb?)")
    memo[key] = total
    return total


def parse_yaml(text: str, what: str, *, source: str | None = None) -> Any:
    """One YAML document (safe types only) with depth and expansion limits."""
    try:
        return yaml.load(text, Loader=_LimitedLoader)  # noqa: S506 - a SafeLoader subclass
    except _LimitError as exc:
        raise SpecError(what, f"refused: {exc}", source=source) from None
    except yaml.YAMLError as exc:
        reason = " ".join(str(exc).split())
        raise SpecError(what, f"not valid YAML: {reason[:300]}", source=source) from None
    except RecursionError:
        raise SpecError(what, f"refused: nested deeper than {MAX_DEPTH} levels",
                        source=source) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, what: str, *, source: str | None = None) -> Any:
    """One JSON document; NaN/Infinity literals and deep nesting are refused."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise SpecError(what, f"refused: nested deeper than {MAX_DEPTH} levels",
                        source=source) from None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise SpecError(what, f"not valid JSON: {exc}", source=source) from None
    if _depth(data) > MAX_DEPTH:
        raise SpecError(what, f"refused: nested deeper than {MAX_DEPTH} levels", source=source)
    return data


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item)
        if deepest > MAX_DEPTH:
            break
    return deepest


def load_yaml(path: str | os.PathLike[str], what: str) -> Any:
    """Read and parse a YAML file under the contract (``what`` names it in errors)."""
    return parse_yaml(read_text(path, what), what, source=show_path(path))


def load_json(path: str | os.PathLike[str], what: str) -> Any:
    """Read and parse a JSON file under the contract."""
    return parse_json(read_text(path, what), what, source=show_path(path))


def read_csv_rows(path: str | os.PathLike[str], what: str, *, required: Iterable[str],
                  max_rows: int) -> tuple[list[str], list[dict[str, str]]]:
    """(header, rows) of a CSV file; no rows, missing columns or too many rows are errors."""
    import csv
    import io

    text = read_text(path, what, limit=MAX_TRACE_BYTES)
    where = show_path(path)
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = list(reader.fieldnames or ())
        missing = sorted(set(required) - set(header))
        if missing:
            raise SpecError(what, f"missing columns {', '.join(missing)}; header is "
                            f"{','.join(header)[:200] or '(empty)'}", source=where)
        rows = []
        for row in reader:
            rows.append(row)
            if len(rows) > max_rows:
                raise SpecError(what, f"more than {max_rows:,} rows (the limit)", source=where)
    except csv.Error as exc:
        raise SpecError(what, f"not valid CSV: {exc}", source=where) from None
    if not rows:
        raise SpecError(what, "has a header but no rows", source=where)
    return header, rows


def read_parquet(path: str | os.PathLike[str], what: str, *, columns: Sequence[str] | None = None
                 ) -> Any:
    """A pandas DataFrame from a Parquet file; a file that is not Parquet is a named error."""
    import pandas as pd

    p = check_path(path, what)
    if not p.exists():
        raise SpecError(what, "no such file", source=show_path(p))
    try:
        return pd.read_parquet(p, columns=list(columns) if columns else None)
    except OSError as exc:
        raise SpecError(what, f"cannot read: {_os_reason(exc)}", source=show_path(p)) from None
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid & co for bad files
        reason = " ".join(str(exc).split())[:200]
        raise SpecError(what, f"not a readable Parquet file: {reason}",
                        source=show_path(p)) from None


def check_latencies(values: Iterable[Any], what: str, *, source: str | None = None,
                    allow_zero: bool = False) -> None:
    """Refuse measured latencies that are NaN, infinite, negative (or zero): for importers."""
    for i, value in enumerate(values):
        if value is None:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise SpecError(f"{what}[{i}]", f"not a number: {value!r}", source=source) from None
        bad = not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero)
        if bad:
            raise SpecError(f"{what}[{i}]", f"latency must be a finite number "
                            f"{'>=' if allow_zero else '>'} 0, got {value!r}", source=source)


def check_work(what: str, size: int, limit: int, unit: str, hint: str = "", *,
               source: str | None = None) -> None:
    """Refuse work whose size is known up front and larger than ``limit``."""
    if size > limit:
        extra = f"; {hint}" if hint else ""
        raise SpecError(what, f"would be {size:,} {unit}; the limit is {limit:,}{extra}",
                        source=source)


def check_output_path(path: str | os.PathLike[str], what: str, *,
                      suffixes: Sequence[str] | None = None, directory: bool = False,
                      create_parents: bool = False) -> Path:
    """Fail now, before long work, if ``path`` cannot be written (a file, or a folder to fill;
    missing folders above it only where the writer creates them: ``directory``/``create_parents``)."""
    p = check_path(path, what)
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise SpecError(what, f"unknown suffix {p.suffix or '(none)'!r} for {show_path(p)}; "
                        f"use one of {', '.join(suffixes)}")
    if directory:
        if p.exists() and not p.is_dir():
            raise SpecError(what, f"not a folder: {show_path(p)}")
        target = p
    else:
        if p.is_dir():
            raise SpecError(what, f"is a folder, not a file: {show_path(p)}")
        if p.exists():
            if not os.access(p, os.W_OK) or not _is_writable_fs(p.parent):
                raise SpecError(what, f"cannot write {show_path(p)}: permission denied")
            return p
        target = p.parent
        if not create_parents and not target.is_dir():
            raise SpecError(what, f"cannot write {show_path(p)}: folder {show_path(target)} "
                            f"{'is not a folder' if target.exists() else 'does not exist'}")
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise SpecError(what, f"cannot write {show_path(p)}: {show_path(existing)} is not a "
                        "folder")
    if not _is_writable_fs(existing):
        raise SpecError(what, f"cannot write {show_path(p)}: folder {show_path(existing)} is "
                        "not writable")
    return p


def _is_writable_fs(folder: Path) -> bool:
    """Whether a file can be created in ``folder`` (a probe: read-only mounts, even for root)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def output_errors(path: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Turn an OSError while writing ``path`` (full disk, permissions) into a named error."""
    try:
        yield
    except OSError as exc:
        reason = "no space left on device" if exc.errno == errno.ENOSPC else _os_reason(exc)
        raise SpecError(what, f"cannot write {show_path(path)}: {reason}") from None


def write_text(path: str | os.PathLike[str], text: str, what: str) -> None:
    """Write ``text`` (UTF-8); a write error names the path and the cause."""
    p = check_path(path, what)
    with output_errors(p, what), p.open("w", encoding="utf-8") as handle:
        handle.write(text)
