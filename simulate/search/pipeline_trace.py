# SPDX-License-Identifier: Apache-2.0
"""Every pipeline task of one (schedule, pp, vpp, micro-batches) class in an order that respects
its dependencies: the structure `batch_pipeline` levels, independent of any duration.

Every stage runs its tasks in the fixed order `simulate.schedule.stage_order` gives; a task
waits for its stage's previous task and for the task that sends its input. Which order of all
tasks satisfies that is a structural question (no time enters it), so it is computed once per
class.
"""

from __future__ import annotations

from analytical.parallel import Schedule
from simulate.schedule import stage_order

__all__ = ["task_trace"]

FWD, BWD = 0, 1

# (stage, is backward, chunk, input key or -1, output key or -1, stage the output goes to,
# whether it is the last micro-batch's backward)
Task = tuple[int, bool, int, int, int, int, bool]


def _records(s: int, pp: int, vpp: int, m: int, order: list[tuple[int, int, int]]
             ) -> list[Task]:
    """Stage ``s``'s tasks. A key is 2*(mb*pp*vpp + virtual stage) + direction."""
    nv = pp * vpp
    out = []
    for d, mb, ch in order:
        v = ch * pp + s
        first = v == 0 if d == FWD else v == nv - 1
        tv = v + 1 if d == FWD else v - 1
        send = 2 * (mb * nv + tv) + d if 0 <= tv < nv else -1
        out.append((s, d == BWD, ch, -1 if first else 2 * (mb * nv + v) + d, send, tv % pp,
                    d == BWD and mb == m - 1))
    return out


def task_trace(schedule: Schedule, pp: int, vpp: int, m: int) -> list[Task]:
    """All tasks of the class, each after its stage's previous task and its input's sender."""
    recs = [_records(s, pp, vpp, m, stage_order(schedule, s, pp, vpp, m)) for s in range(pp)]
    length = 2 * m * vpp
    out: list[Task] = []
    avail: set[int] = set()
    pos, waiting, stack = [0] * pp, [-1] * pp, list(range(pp))
    while stack:
        s = stack.pop()
        waiting[s] = -1
        k = pos[s]
        while k < length:
            task = recs[s][k]
            dep, send, target = task[3], task[4], task[5]
            if dep >= 0:
                if dep not in avail:
                    waiting[s] = dep
                    break
                avail.discard(dep)
            out.append(task)
            k += 1
            if send >= 0:
                avail.add(send)
                if target != s and waiting[target] == send:
                    waiting[target] = -1
                    stack.append(target)
        pos[s] = k
    if any(p != length for p in pos):
        raise RuntimeError("pipeline schedule deadlocked")  # a bug here, not bad input
    return out
