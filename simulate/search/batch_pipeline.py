# SPDX-License-Identifier: Apache-2.0
"""The pipeline schedules of many layouts of one (schedule, pp, vpp, micro-batches) class at
once: `simulate.schedule.simulate_pipeline`'s result for each, computed with numpy over layouts.

Why it is exact. Every task starts at max(its stage's previous task end, its input's arrival)
and a send waits for its stage's p2p stream (`pipeline_trace`), so the start times are a
longest path over a task graph that depends only on the class, not on the durations. Tasks are
grouped by their depth in that graph (a level holds at most one task per stage and never a task
and its input), so one level is a handful of numpy operations over (layouts x its tasks), each
value computed with the same additions and maxima, in the same order, as the event simulation.
A class has about tasks / pp levels and a level costs about 20 tasks of the per-layout replay,
so a class of L layouts costs about 20 / (L * pp) of replaying each (the evaluator batches
classes with two or more distinct stage costs in a chunk).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from analytical.parallel import Schedule
from simulate.schedule import PipelineResult
from simulate.search.pipeline_trace import task_trace

__all__ = ["batch_pipeline", "levels"]

_LEVELS: dict[tuple[Any, ...], _Levels] = {}
_LEVEL_CLASSES = 256  # classes kept (oldest dropped first)


class _Levels:
    """A class's tasks by depth (1 + the deeper of the stage's previous task and the task that
    sends its input), as dense (level, stage) slots: a slot without a task takes no input and
    lasts 0 s, which leaves its stage's times unchanged (x + 0.0 == x, max(x, 0.0) == x for
    the times >= 0 here). Every level's stage end times are rows ``2*pp*level + s`` of a history,
    its p2p send times rows ``2*pp*level + pp + s``; an input is read from its sender's row.
    """

    def __init__(self, schedule: Schedule, pp: int, vpp: int, m: int):
        stage_lvl = [-1] * pp
        made: dict[int, tuple[int, int]] = {}  # key -> (level, history row)
        lvls, stages, cols, deps, sends_out, lasts = [], [], [], [], [], []
        for s, is_bwd, ch, dep, send, target, is_last in task_trace(schedule, pp, vpp, m):
            if dep >= 0:
                dl, row = made[dep]
                lvl = (dl if dl > stage_lvl[s] else stage_lvl[s]) + 1
            else:
                lvl, row = stage_lvl[s] + 1, -1
            stage_lvl[s] = lvl
            if send >= 0:
                made[send] = (lvl, 2 * pp * lvl + (pp if target != s else 0) + s)
            lvls.append(lvl)
            stages.append(s)
            cols.append((pp if is_bwd else 0) * vpp + s * vpp + ch)
            deps.append(row)
            sends_out.append(send >= 0 and target != s)
            lasts.append(is_last)
        self.n = max(lvls) + 1
        self.rows = 2 * pp * self.n + 1  # the last history row stays 0.0 (no input)
        lv, st = np.array(lvls, dtype=np.intp), np.array(stages, dtype=np.intp)
        self.deps = np.full((self.n, pp), self.rows - 1, dtype=np.intp)
        dep_rows = np.array(deps, dtype=np.intp)
        self.deps[lv, st] = np.where(dep_rows >= 0, dep_rows, self.rows - 1)
        self.cols = np.full((self.n, pp), 2 * pp * vpp, dtype=np.intp)  # that row is 0.0
        self.cols[lv, st] = cols
        self.remote = np.zeros((self.n, pp, 1), dtype=bool)
        self.remote[lv, st, 0] = sends_out
        self.any_remote = self.remote.any(axis=(1, 2)).tolist()
        self.last: dict[int, np.ndarray] = {}
        for lvl, s, is_last in zip(lvls, stages, lasts, strict=True):
            if is_last:
                self.last[lvl] = np.append(self.last.get(lvl, np.zeros(0, np.intp)), s)


def levels(schedule: Schedule, pp: int, vpp: int, m: int) -> _Levels:
    """The level structure of one class (cached)."""
    key = (schedule, pp, vpp, m)
    if key not in _LEVELS:
        while len(_LEVELS) >= _LEVEL_CLASSES:
            del _LEVELS[next(iter(_LEVELS))]
        _LEVELS[key] = _Levels(schedule, pp, vpp, m)
    return _LEVELS[key]


def batch_pipeline(*, schedule: Schedule, pp: int, vpp: int, num_microbatches: int,
                   fwd_s: Sequence[Sequence[Sequence[float]]],
                   bwd_s: Sequence[Sequence[Sequence[float]]],
                   p2p_s: Sequence[float]) -> list[PipelineResult]:
    """`simulate_pipeline`'s result (records left out) for each layout: ``fwd_s[i][s][c]``,
    ``bwd_s[i][s][c]`` and ``p2p_s[i]`` are layout i's arguments."""
    n = len(p2p_s)
    lv = levels(schedule, pp, vpp, num_microbatches)
    durs = np.zeros((2 * pp * vpp + 1, n))
    durs[:pp * vpp] = np.asarray(fwd_s, dtype=np.float64).reshape(n, pp * vpp).T
    durs[pp * vpp:-1] = np.asarray(bwd_s, dtype=np.float64).reshape(n, pp * vpp).T
    p2p = np.asarray(p2p_s, dtype=np.float64)
    hist = np.zeros((lv.rows, n))
    free, comm = np.zeros((pp, n)), np.zeros((pp, n))
    busy, last_bwd = np.zeros((pp, n)), np.zeros((pp, n))
    p2p_row = p2p[None, :]
    for i in range(lv.n):
        start = np.maximum(free, hist[lv.deps[i]])
        dur = durs[lv.cols[i]]
        free = start + dur
        busy += dur
        row = 2 * pp * i
        hist[row:row + pp] = free
        if lv.any_remote[i]:
            sent = np.maximum(free, comm) + p2p_row
            comm = np.where(lv.remote[i], sent, comm)
            hist[row + pp:row + 2 * pp] = sent
        lst = lv.last.get(i)
        if lst is not None:
            lb, sl = last_bwd[lst], start[lst]
            last_bwd[lst] = np.where(lb == 0.0, sl, np.minimum(lb, sl))
    return [PipelineResult(span_s=max(f), stage_end_s=tuple(f), stage_busy_s=tuple(b),
                           last_bwd_start_s=tuple(lb))
            for f, b, lb in zip(free.T.tolist(), busy.T.tolist(), last_bwd.T.tolist(),
                                strict=True)]
