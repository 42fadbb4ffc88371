# SPDX-License-Identifier: Apache-2.0
"""Chrome / Perfetto trace-event JSON of a simulated iteration: one process per pipeline stage,
one thread (track) per stream: micro-batch tasks (compute), pipeline sends (p2p), gradient sync
(dp), and inside the detailed micro-batches each operator on an operator track (ops) and each
collective on its communication track (tp, cp, ep, fsdp). Times are microseconds, as the format
wants (Trace Event Format, "Duration events" / complete events ``ph: X``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analytical.errors import SpecError
from analytical.layer_spec import Stream
from simulate.costs import OpEvent
from simulate.schedule import TaskRecord

STREAM_TIDS = {Stream.COMPUTE: 0, Stream.P2P: 1, Stream.DP: 2, Stream.OPS: 3, Stream.TP: 4,
               Stream.CP: 5, Stream.EP: 6, Stream.FSDP: 7}


def expand_ops(records: Sequence[TaskRecord],
               timelines: Mapping[tuple[int, int, str], Sequence[OpEvent]], *,
               microbatches: int = 1) -> list[TaskRecord]:
    """Operator records inside the first ``microbatches`` micro-batches of each stage.

    ``timelines[(stage, chunk, "F"|"B")]`` is the pass's operator timeline (`pass_timeline` of
    each block, end to end); it is scaled onto the task's simulated span. Task names are the
    schedule's labels: ``F3`` / ``B3`` (micro-batch 3), ``F3.c1`` (chunk 1, interleaved).
    """
    out: list[TaskRecord] = []
    for r in records:
        if r.stream != Stream.COMPUTE or r.name[:1] not in ("F", "B"):
            continue
        mb, _, chunk = r.name[1:].partition(".c")
        if not mb.isdigit() or int(mb) >= microbatches:
            continue
        events = timelines.get((r.stage, int(chunk or 0), r.name[0]), ())
        span = max((e.end_s for e in events), default=0.0)
        if span <= 0:
            continue
        scale = (r.end_s - r.start_s) / span
        out += [TaskRecord(stage=r.stage,
                           stream=Stream.OPS if e.stream == Stream.COMPUTE else e.stream,
                           name=e.name, start_s=r.start_s + e.start_s * scale,
                           end_s=r.start_s + e.end_s * scale) for e in events]
    return out


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
