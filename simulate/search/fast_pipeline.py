# SPDX-License-Identifier: Apache-2.0
"""The pipeline schedule of `simulate.schedule.simulate_pipeline`, computed without an event heap
and with its steady state skipped, for the search.

Why it is exact. Every stage runs its tasks in the fixed order `stage_order` gives and a task
starts at max(stage free, its input's arrival); each send waits for the stage's p2p stream. So
start times follow a max-plus recurrence that any dependency-respecting order computes (no
heap needed). In the steady part of the schedule the task orders repeat with a period (one
micro-batch for 1F1B and GPipe, ``pp`` micro-batches = ``pp*vpp`` forward/backward pairs for
the interleaved order) and the recurrence is the same map every period. The map is max-plus
homogeneous (adding c to every input time adds c to every output), so once the state at the end
of one period (each stage's position, free time, p2p stream time, the inputs in flight) equals
the previous state shifted by one period's micro-batches and a constant time lambda, every
later period in the steady part repeats it: the state after K more periods is the state plus
K*lambda, reached with no work. Outside the steady part, or until the state repeats, every task
is simulated. Equality is checked within a relative tolerance of `TOL` (float rounding).
Schedules with fewer than `SKIP_MIN_PERIODS` steady periods (nothing worth skipping) replay a
dependency-ordered trace of their tasks, built once per (schedule, pp, vpp, micro-batches).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from analytical.parallel import Schedule
from simulate.schedule import PipelineResult, stage_order

__all__ = ["fast_pipeline", "skips", "TOL"]

FWD, BWD = 0, 1
TOL = 1e-12  # relative: two times closer than this are one time (float rounding only)
SKIP_MIN_PERIODS = 8  # fewer steady periods than this: replay every task (nothing to skip)


class _Order:
    """Stage task orders (`simulate.schedule.stage_order`'s lists) and their steady parts."""

    def __init__(self, schedule: Schedule, pp: int, vpp: int, m: int):
        self.gpipe = schedule == Schedule.GPIPE
        self.pp, self.vpp, self.m = pp, vpp, m
        self.lists = [stage_order(schedule, s, pp, vpp, m) for s in range(pp)]
        self.key_per_mb = 2 * pp * vpp
        self.recs = [self.records(s, order) for s, order in enumerate(self.lists)]
        self._trace: list[tuple] | None = None
        self.total = m * vpp
        self.length = 2 * self.total
        if self.gpipe:
            self.warm = [0] * pp
        elif vpp == 1:
            self.warm = [min(pp - s - 1, m) for s in range(pp)]
        else:
            self.warm = [min((pp - s - 1) * 2 + (vpp - 1) * pp, self.total) for s in range(pp)]

    def records(self, s: int, order: list[tuple[int, int, int]]) -> list[tuple]:
        """Per task: (is backward, chunk, input key or -1, output key or -1, stage the output
        goes to, whether it is a last-micro-batch backward). A key is
        2*(mb*pp*vpp + virtual stage) + direction, so moving d micro-batches adds
        d*`key_per_mb`."""
        pp, nv, m = self.pp, self.pp * self.vpp, self.m
        out = []
        for d, mb, ch in order:
            v = ch * pp + s
            first = v == 0 if d == FWD else v == nv - 1
            tv = v + 1 if d == FWD else v - 1
            send = 2 * (mb * nv + tv) + d if 0 <= tv < nv else -1
            out.append((d == BWD, ch, -1 if first else 2 * (mb * nv + v) + d, send, tv % pp,
                        d == BWD and mb == m - 1))
        return out

    def trace(self) -> list[tuple]:
        """Every task as (stage, *record), in an order that respects its dependencies (a
        structural pass: which order works does not depend on any time)."""
        if self._trace is not None:
            return self._trace
        pp, out, avail = self.pp, [], set()
        pos, waiting, stack = [0] * pp, [-1] * pp, list(range(pp))
        while stack:
            s = stack.pop()
            waiting[s] = -1
            k, recs = pos[s], self.recs[s]
            while k < self.length:
                rec = recs[k]
                dep, send, target = rec[2], rec[3], rec[4]
                if dep >= 0:
                    if dep not in avail:
                        waiting[s] = dep
                        break
                    avail.discard(dep)
                out.append((s, *rec))
                k += 1
                if send >= 0:
                    avail.add(send)
                    if target != s and waiting[target] == send:
                        waiting[target] = -1
                        stack.append(target)
            pos[s] = k
        if any(p != self.length for p in pos):
            raise RuntimeError("pipeline schedule deadlocked")  # a bug here, not bad input
        self._trace = out
        return out

    def phases(self) -> list[tuple[int, list[tuple[int, int]], int, int]]:
        """Steady parts: (limiting stage, per-stage [start, end) positions, period in tasks,
        micro-batch shift per period)."""
        pp, m = self.pp, self.m
        if self.gpipe:
            return [(0, [(0, m)] * pp, 1, 1), (pp - 1, [(m, 2 * m)] * pp, 1, 1)]
        per = 1 if self.vpp == 1 else pp * self.vpp
        g = 1 if self.vpp == 1 else pp
        steady = [(w, w + 2 * (self.total - w)) for w in self.warm]
        return [(0, steady, 2 * per, g)]


_ORDERS: dict[tuple[Any, ...], _Order] = {}
_ORDER_TASKS = 600_000  # tasks kept in the order cache (3 tuples each: about 150 MB at most)


def _order(schedule: Schedule, pp: int, vpp: int, m: int) -> _Order:
    """The orders of one (schedule, pp, vpp, micro-batches) class, shared by every layout of it
    (kept while the cache holds fewer than `_ORDER_TASKS` tasks; oldest dropped first)."""
    key = (schedule, pp, vpp, m)
    if key not in _ORDERS:
        while _ORDERS and sum(o.length * o.pp for o in _ORDERS.values()) > _ORDER_TASKS:
            del _ORDERS[next(iter(_ORDERS))]
        _ORDERS[key] = _Order(schedule, pp, vpp, m)
    return _ORDERS[key]


class _Sim:
    """Worklist evaluation of the recurrence; stages can be capped at a position."""

    def __init__(self, order: _Order, fwd: Sequence[Sequence[float]],
                 bwd: Sequence[Sequence[float]], p2p: float):
        pp = order.pp
        self.o, self.fwd, self.bwd, self.p2p = order, fwd, bwd, p2p
        self.nv = pp * order.vpp
        self.pos = [0] * pp
        self.free = [0.0] * pp
        self.comm = [0.0] * pp
        self.busy = [0.0] * pp
        self.last_bwd = [0.0] * pp
        self.arrived: dict[int, float] = {}  # input key (see `_Order.records`) -> arrival
        self.waiting: list[int] = [-1] * pp  # the input key each stage waits for, or -1

    def run(self, caps: Sequence[int]) -> None:
        o, pp, p2p = self.o, self.o.pp, self.p2p
        arrived, waiting, pos = self.arrived, self.waiting, self.pos
        pop = arrived.pop
        stack = [s for s in range(pp) if waiting[s] < 0 or waiting[s] in arrived]
        while stack:
            s = stack.pop()
            waiting[s] = -1
            k, cap = pos[s], min(caps[s], o.length)
            free, comm, busy = self.free[s], self.comm[s], self.busy[s]
            recs, fw, bw = o.recs[s], self.fwd[s], self.bwd[s]
            while k < cap:
                is_bwd, ch, dep, send, target, last = recs[k]
                if dep < 0:
                    start = free
                else:
                    ready = pop(dep, None)
                    if ready is None:
                        waiting[s] = dep
                        break
                    start = free if free > ready else ready
                dur = bw[ch] if is_bwd else fw[ch]
                free = start + dur
                busy += dur
                if last:
                    lb = self.last_bwd[s]
                    self.last_bwd[s] = start if lb == 0.0 else min(lb, start)
                k += 1
                if send >= 0:
                    if target == s:
                        arrived[send] = free
                    else:
                        comm = (free if free > comm else comm) + p2p
                        arrived[send] = comm
                        if waiting[target] == send:
                            waiting[target] = -1
                            stack.append(target)
            pos[s], self.free[s], self.comm[s], self.busy[s] = k, free, comm, busy

    def state(self, shift_mb: int) -> tuple:
        """Positions, then times and in-flight inputs keyed with micro-batches moved back by
        ``shift_mb`` (the p2p stream as max(stream, stage): a send never starts before the
        task that makes it ends, so only that maximum matters)."""
        shift = shift_mb * self.o.key_per_mb
        return (tuple(self.pos),
                [max(c, f) for c, f in zip(self.comm, self.free, strict=True)],
                {key - shift: t for key, t in self.arrived.items()})

    def jump(self, periods: int, tasks: int, g: int, lam: float, busy_step: Sequence[float]
             ) -> None:
        """Advance every stage ``periods`` steady periods at once (state + periods*lambda)."""
        dt = periods * lam
        self.comm = [max(c, f) + dt for c, f in zip(self.comm, self.free, strict=True)]
        self.free = [f + dt for f in self.free]
        self.pos = [p + periods * tasks for p in self.pos]
        self.busy = [b + periods * x for b, x in zip(self.busy, busy_step, strict=True)]
        shift = periods * g * self.o.key_per_mb
        self.arrived = {key + shift: t + dt for key, t in self.arrived.items()}
        self.waiting = [w if w < 0 else w + shift for w in self.waiting]


def _periodic(prev: tuple, cur: tuple, tasks: int) -> float | None:
    """lambda if ``cur`` is ``prev`` one period later (positions + ``tasks``, every time +
    lambda, the same inputs in flight), else None."""
    (pos0, comm0, arr0, free0, _), (pos1, comm1, arr1, free1, _) = prev, cur
    if any(b - a != tasks for a, b in zip(pos0, pos1, strict=True)) or arr0.keys() != arr1.keys():
        return None
    lam = free1[0] - free0[0]
    tol = TOL * max(1.0, max(abs(x) for x in free1))
    pairs = [*zip(free0, free1, strict=True), *zip(comm0, comm1, strict=True),
             *((arr0[k], arr1[k]) for k in arr0)]
    if lam <= 0 or any(abs(b - a - lam) > tol for a, b in pairs):
        return None
    return lam


def _skip_phase(sim: _Sim, limit: int, ranges: list[tuple[int, int]], tasks: int, g: int
                ) -> None:
    """Run the steady part period by period (the limiting stage capped, the others as far as
    their inputs allow) until the state repeats, then jump over all but the last periods."""
    o, pp = sim.o, sim.o.pp
    big = o.length
    prev, r = None, 0
    while ranges[limit][0] + (r + 1) * tasks <= ranges[limit][1]:
        caps = [big] * pp
        caps[limit] = ranges[limit][0] + r * tasks
        sim.run(caps)
        pos, comm, arr = sim.state(r * g)
        cur = (pos, comm, arr, list(sim.free), list(sim.busy))
        steady = all(lo + tasks <= p and p + tasks <= hi
                     for p, (lo, hi) in zip(pos, ranges, strict=True))
        lam = _periodic(prev, cur, tasks) if prev is not None and steady else None
        if lam is not None:
            # K more periods stay inside every stage's steady part and never reach the last
            # micro-batch (whose backward start is an output).
            top = max(o.lists[s][k][1] for s in range(pp) for k in range(pos[s] - tasks, pos[s]))
            periods = min([(hi - p) // tasks - 2 for p, (_, hi) in zip(pos, ranges, strict=True)]
                          + [(o.m - 2 - top) // g])
            if periods > 0:
                step = [b - a for a, b in zip(prev[4], cur[4], strict=True)]
                sim.jump(periods, tasks, g, lam, step)
                r += periods
                prev = None
                r += 1
                continue
        prev, r = cur, r + 1


def _replay(o: _Order, fwd: Sequence[Sequence[float]], bwd: Sequence[Sequence[float]],
            p2p: float) -> PipelineResult:
    """Every task once, in `_Order.trace` order (inputs indexed by key in a flat list)."""
    pp = o.pp
    free, comm, busy, last_bwd = [0.0] * pp, [0.0] * pp, [0.0] * pp, [0.0] * pp
    arrived = [0.0] * (o.key_per_mb * o.m)
    for s, is_bwd, ch, dep, send, target, last in o.trace():
        start = free[s]
        if dep >= 0 and arrived[dep] > start:
            start = arrived[dep]
        dur = bwd[s][ch] if is_bwd else fwd[s][ch]
        end = free[s] = start + dur
        busy[s] += dur
        if last:
            last_bwd[s] = start if last_bwd[s] == 0.0 else min(last_bwd[s], start)
        if send >= 0:
            if target == s:
                arrived[send] = end
            else:
                c = comm[s]
                arrived[send] = comm[s] = (end if end > c else c) + p2p
    return PipelineResult(span_s=max(free), stage_end_s=tuple(free), stage_busy_s=tuple(busy),
                          last_bwd_start_s=tuple(last_bwd))


def skips(schedule: Schedule, pp: int, vpp: int, m: int) -> bool:
    """Whether `fast_pipeline` skips steady periods for this class (else it replays every
    task, with the event simulation's exact arithmetic)."""
    return any((r[limit][1] - r[limit][0]) // tasks >= SKIP_MIN_PERIODS
               for limit, r, tasks, _ in _order(schedule, pp, vpp, m).phases())


def fast_pipeline(*, schedule: Schedule, pp: int, vpp: int, num_microbatches: int,
                  fwd_s: Sequence[Sequence[float]], bwd_s: Sequence[Sequence[float]],
                  p2p_s: float) -> PipelineResult:
    """`simulate_pipeline`'s result (records left out) for the same arguments."""
    order = _order(schedule, pp, vpp, num_microbatches)
    if not skips(schedule, pp, vpp, num_microbatches):
        return _replay(order, fwd_s, bwd_s, p2p_s)
    sim = _Sim(order, fwd_s, bwd_s, p2p_s)
    for limit, ranges, tasks, g in order.phases():
        _skip_phase(sim, limit, ranges, tasks, g)
    sim.run([order.length] * pp)
    if any(p != order.length for p in sim.pos):
        raise RuntimeError("pipeline schedule deadlocked")  # a bug here, not bad input
    return PipelineResult(span_s=max(sim.free), stage_end_s=tuple(sim.free),
                          stage_busy_s=tuple(sim.busy), last_bwd_start_s=tuple(sim.last_bwd))
