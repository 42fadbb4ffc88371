# SPDX-License-Identifier: Apache-2.0
"""The one progress bar: drawn late, only for its own unit, silent when nobody listens."""

from __future__ import annotations

import io

from rich.console import Console

from profiler import progress


def _terminal() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=True, width=100), buffer


def _task(unit: str):
    (entry,) = [t for t in progress._OPEN.get() if t.unit == unit]
    return next(t for t in entry.display.progress.tasks if t.id == entry.task)


def test_work_reports_to_the_bar_of_its_unit_only() -> None:
    console, _ = _terminal()
    with progress.bar("validate", unit="runs", total=2, console=console, delay_s=3600):
        with progress.bar("serving", unit="requests", console=console):  # nested: same display
            progress.expect(10, unit="requests")
            progress.advance(4, unit="requests")
            progress.advance(1, unit="points")  # nobody counts points: ignored
            assert (_task("requests").completed, _task("requests").total) == (4, 10)
        progress.advance(1, unit="runs", label="row-1")
        assert _task("runs").completed == 1
        assert _task("runs").description == "validate row-1"
    assert progress._OPEN.get() == ()


def test_nothing_is_drawn_before_the_delay_or_off_a_terminal() -> None:
    console, buffer = _terminal()
    with progress.bar("quick", unit="files", total=3, console=console, delay_s=3600):
        progress.advance(3, unit="files")
    assert buffer.getvalue() == ""
    plain = io.StringIO()
    with progress.bar("piped", unit="files", console=Console(file=plain), delay_s=0):
        assert progress._OPEN.get() == ()  # not a terminal: no bar, reports go nowhere
        progress.advance(1, unit="files")
    assert plain.getvalue() == ""


def test_a_disabled_bar_and_no_bar_are_silent() -> None:
    progress.expect(5, unit="rows")
    progress.advance(5, unit="rows")
    with progress.bar("off", unit="rows", enabled=False):
        assert progress._OPEN.get() == ()
