# SPDX-License-Identifier: Apache-2.0
"""Chrome / Perfetto trace-event JSON of a simulated iteration: one process per pipeline stage,
one thread (track) per stream (compute, p2p, dp). Times are microseconds, as the format wants
(Trace Event Format, "Duration events" / complete events ``ph: X``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analytical.errors import SpecError
from simulate.schedule import TaskRecord

STREAM_TIDS = {"compute": 0, "p2p": 1, "dp": 2}


def chrome_trace(records: Sequence[TaskRecord], *, name: str) -> dict[str, Any]:
    """Trace events for ``records`` with process/thread name metadata."""
    events: list[dict[str, Any]] = []
    stages = sorted({r.stage for r in records})
    for stage in stages:
        events.append({"name": "process_name", "ph": "M", "pid": stage, "tid": 0,
                       "args": {"name": f"{name} stage {stage}"}})
        for stream, tid in STREAM_TIDS.items():
            events.append({"name": "thread_name", "ph": "M", "pid": stage, "tid": tid,
                           "args": {"name": stream}})
    for r in sorted(records, key=lambda r: (r.stage, STREAM_TIDS[r.stream], r.start_s, r.name)):
        events.append({"name": r.name, "cat": r.stream, "ph": "X", "pid": r.stage,
                       "tid": STREAM_TIDS[r.stream], "ts": r.start_s * 1e6,
                       "dur": max(0.0, r.end_s - r.start_s) * 1e6})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def check_trace(trace: Mapping[str, Any]) -> None:
    """Schema check of a trace object (the subset of the Trace Event Format we write)."""
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        raise SpecError("traceEvents", "missing or not a list")
    for i, ev in enumerate(events):
        where = f"traceEvents[{i}]"
        if not isinstance(ev, Mapping):
            raise SpecError(where, "not an object")
        for key, kind in (("name", str), ("ph", str), ("pid", int), ("tid", int)):
            if not isinstance(ev.get(key), kind):
                raise SpecError(f"{where}.{key}", f"missing or not {kind.__name__}")
        if ev["ph"] == "X":
            for key in ("ts", "dur"):
                value = ev.get(key)
                if not isinstance(value, (int, float)) or value < 0:
                    raise SpecError(f"{where}.{key}", f"must be a number >= 0, got {value!r}")
        elif ev["ph"] == "M":
            if not isinstance(ev.get("args", {}).get("name"), str):
                raise SpecError(f"{where}.args.name", "metadata events need a name")
        else:
            raise SpecError(f"{where}.ph", f"unexpected phase {ev['ph']!r}")
