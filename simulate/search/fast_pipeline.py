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
"""

from __future__ import annotations

from collections.abc import Sequence

from analytical.parallel import Schedule
from simulate.schedule import PipelineResult

__all__ = ["fast_pipeline", "TOL"]

FWD, BWD = 0, 1
TOL = 1e-12  # relative: two times closer than this are one time (float rounding only)


class _Order:
    """Stage task orders as closed forms (the orders `simulate.schedule.stage_order` builds)."""

    def __init__(self, schedule: Schedule, pp: int, vpp: int, m: int):
        self.gpipe = schedule == Schedule.GPIPE
        self.pp, self.vpp, self.m = pp, vpp, m
        self.total = m * vpp
        self.length = 2 * self.total
        if self.gpipe:
            self.warm = [0] * pp
        elif vpp == 1:
            self.warm = [min(pp - s - 1, m) for s in range(pp)]
        else:
            self.warm = [min((pp - s - 1) * 2 + (vpp - 1) * pp, self.total) for s in range(pp)]

    def unit(self, k: int, direction: int) -> tuple[int, int, int]:
        pp, vpp = self.pp, self.vpp
        if vpp == 1:
            return direction, k, 0
        chunk = (k // pp) % vpp
        if direction == BWD:
            chunk = vpp - 1 - chunk
        return direction, (k // (pp * vpp)) * pp + k % pp, chunk

    def task(self, s: int, k: int) -> tuple[int, int, int]:
        if self.gpipe:  # vpp == 1 (the interleaved schedule is the only one with vpp > 1)
            return (FWD, k, 0) if k < self.m else (BWD, k - self.m, 0)
        w = self.warm[s]
        if k < w:
            return self.unit(k, FWD)
        j, n = k - w, self.total - w
        if j < 2 * n:
            return self.unit(w + j // 2, FWD) if j % 2 == 0 else self.unit(j // 2, BWD)
        return self.unit(n + j - 2 * n, BWD)

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
        self.arrived: dict[tuple[int, int, int], float] = {}
        self.waiting: list[tuple[int, int, int] | None] = [None] * pp

    def run(self, caps: Sequence[int]) -> None:
        o, pp, nv, m, p2p = self.o, self.o.pp, self.nv, self.o.m, self.p2p
        arrived, waiting, pos = self.arrived, self.waiting, self.pos
        stack = [s for s in range(pp) if waiting[s] is None or waiting[s] in arrived]
        while stack:
            s = stack.pop()
            waiting[s] = None
            k, cap = pos[s], min(caps[s], o.length)
            free, comm, busy = self.free[s], self.comm[s], self.busy[s]
            while k < cap:
                d, mb, ch = o.task(s, k)
                v = ch * pp + s
                if (v == 0) if d == FWD else (v == nv - 1):
                    start = free
                else:
                    ready = arrived.pop((d, mb, v), None)
                    if ready is None:
                        waiting[s] = (d, mb, v)
                        break
                    start = free if free > ready else ready
                dur = (self.fwd if d == FWD else self.bwd)[s][ch]
                free = start + dur
                busy += dur
                if d == BWD and mb == m - 1:
                    lb = self.last_bwd[s]
                    self.last_bwd[s] = start if lb == 0.0 else min(lb, start)
                k += 1
                tv = v + 1 if d == FWD else v - 1
                if 0 <= tv < nv:
                    t = tv % pp
                    key = (d, mb, tv)
                    if t == s:
                        arrived[key] = free
                    else:
                        cs = free if free > comm else comm
                        comm = cs + p2p
                        arrived[key] = comm
                        if waiting[t] == key:
                            waiting[t] = None
                            stack.append(t)
            pos[s], self.free[s], self.comm[s], self.busy[s] = k, free, comm, busy

    def state(self, shift_mb: int) -> tuple:
        """Positions, then times and in-flight inputs keyed with micro-batches moved back by
        ``shift_mb`` (the p2p stream as max(stream, stage): a send never starts before the
        task that makes it ends, so only that maximum matters)."""
        return (tuple(self.pos),
                [max(c, f) for c, f in zip(self.comm, self.free, strict=True)],
                {(d, mb - shift_mb, v): t for (d, mb, v), t in self.arrived.items()})

    def jump(self, periods: int, tasks: int, g: int, lam: float, busy_step: Sequence[float]
             ) -> None:
        """Advance every stage ``periods`` steady periods at once (state + periods*lambda)."""
        dt = periods * lam
        self.comm = [max(c, f) + dt for c, f in zip(self.comm, self.free, strict=True)]
        self.free = [f + dt for f in self.free]
        self.pos = [p + periods * tasks for p in self.pos]
        self.busy = [b + periods * x for b, x in zip(self.busy, busy_step, strict=True)]
        self.arrived = {(d, mb + periods * g, v): t + dt
                        for (d, mb, v), t in self.arrived.items()}
        self.waiting = [None if w is None else (w[0], w[1] + periods * g, w[2])
                        for w in self.waiting]


def _periodic(prev: tuple, cur: tuple, tasks: int) -> float | None:
    """lambda if ``cur`` is ``prev`` one period later (positions + ``tasks``, every time +
    lambda, the same inputs in flight), else None."""
    (pos0, comm0, arr0, free0, _), (pos1, comm1, arr1, free1, _) = prev, cur
    if any(b - a != tasks for a, b in zip(pos0, pos1, strict=True)) or arr0.keys() != arr1.keys():
        return None
    lam = free1[0] - free0[0]
    tol = TOL * max(1.0, max(abs(x) for x in free1))
    pairs = [*zip(free0, free1), *zip(comm0, comm1), *((arr0[k], arr1[k]) for k in arr0)]
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
            top = max(o.task(s, k)[1] for s in range(pp) for k in range(pos[s] - tasks, pos[s]))
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


def fast_pipeline(*, schedule: Schedule, pp: int, vpp: int, num_microbatches: int,
                  fwd_s: Sequence[Sequence[float]], bwd_s: Sequence[Sequence[float]],
                  p2p_s: float) -> PipelineResult:
    """`simulate_pipeline`'s result (records left out) for the same arguments."""
    order = _Order(schedule, pp, vpp, num_microbatches)
    sim = _Sim(order, fwd_s, bwd_s, p2p_s)
    for limit, ranges, tasks, g in order.phases():
        _skip_phase(sim, limit, ranges, tasks, g)
    sim.run([order.length] * pp)
    if any(p != order.length for p in sim.pos):
        raise RuntimeError("pipeline schedule deadlocked")  # a bug here, not bad input
    return PipelineResult(span_s=max(sim.free), stage_end_s=tuple(sim.free),
                          stage_busy_s=tuple(sim.busy), last_bwd_start_s=tuple(sim.last_bwd))
