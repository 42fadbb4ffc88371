# SPDX-License-Identifier: Apache-2.0
"""Progress with ETA on stderr for long commands: the one progress bar every command uses.

A command opens `bar` around its work, naming the unit it counts (``"points"``, ``"files"``,
``"rows"``, ``"requests"``); the code doing the work, however deep, reports with `expect` (more
units to do) and `advance` (units done) and needs no parameter for it. Both reach the innermost
open bar counting that unit and do nothing when there is none (library use, tests,
``--no-progress``, ``--json``, or work of another unit nested inside: a validation counting rows
is not advanced by the requests of the simulations it runs). Bars opened inside an open bar are
extra lines of the same display. It is drawn by rich on stderr, only when stderr is a terminal,
and only once the work has run ``delay_s`` (2 s), so quick commands print nothing extra; it
disappears when the work ends, so the command's output stays as it was.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

DELAY_S = 2.0  # a command quicker than this shows no bar


@dataclass(slots=True, kw_only=True)
class _Display:
    """One rich Progress on stderr, started late by a timer, shared by nested bars."""

    progress: Any  # rich.progress.Progress
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: bool = False
    closed: bool = False

    def show(self) -> None:
        with self.lock:
            if not self.closed and not self.started:
                self.progress.start()
                self.started = True

    def close(self) -> None:
        with self.lock:
            self.closed = True
            if self.started:
                self.progress.stop()


@dataclass(frozen=True, slots=True, kw_only=True)
class _Task:
    display: _Display
    task: Any  # rich TaskID
    unit: str
    title: str


_OPEN: ContextVar[tuple[_Task, ...]] = ContextVar("llmsim_progress", default=())


def _find(unit: str) -> _Task | None:
    return next((t for t in reversed(_OPEN.get()) if t.unit == unit), None)


def expect(units: float, *, unit: str) -> None:
    """Add ``units`` of work to the open bar counting ``unit`` (no-op without one)."""
    found = _find(unit)
    if found is not None and units > 0:
        progress = found.display.progress
        total = next(t.total for t in progress.tasks if t.id == found.task)
        progress.update(found.task, total=(total or 0) + units)


def advance(units: float = 1.0, *, unit: str, label: str | None = None) -> None:
    """Mark ``units`` done on the open bar counting ``unit``; ``label``: the item just done."""
    found = _find(unit)
    if found is not None:
        found.display.progress.update(
            found.task, advance=units, description=f"{found.title} {label}" if label else None)


def _new_display(console: Any) -> _Display:
    from rich.progress import (  # noqa: PLC0415 - rich only when a bar is drawn
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[unit]}"), TimeElapsedColumn(), TextColumn("ETA"),
               TimeRemainingColumn())
    return _Display(progress=Progress(*columns, console=console, transient=True))


@contextmanager
def bar(title: str, *, unit: str, total: float | None = None, enabled: bool = True,
        delay_s: float = DELAY_S, console: Any = None) -> Iterator[None]:
    """A progress bar over the work inside the ``with``; ``total`` may come later through
    `expect`. ``console`` (a rich Console) is for tests; by default stderr, drawn only when it
    is a terminal."""
    if not enabled:
        yield
        return
    outer = _OPEN.get()
    timer = None
    if outer:
        display = outer[-1].display
    else:
        from rich.console import Console  # noqa: PLC0415

        out = console or Console(stderr=True)
        if not out.is_terminal:
            yield
            return
        display = _new_display(out)
        timer = threading.Timer(delay_s, display.show)
        timer.daemon = True
    entry = _Task(display=display, unit=unit, title=title,
                  task=display.progress.add_task(title, total=total, unit=unit))
    token = _OPEN.set((*outer, entry))
    if timer is not None:
        timer.start()
    try:
        yield
    finally:
        _OPEN.reset(token)
        if timer is not None:
            timer.cancel()
            display.close()
        else:
            display.progress.remove_task(entry.task)
