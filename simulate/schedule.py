# SPDX-License-Identifier: Apache-2.0
"""Event-level simulation of a pipeline schedule (GPipe, 1F1B, interleaved 1F1B).

Each stage has a compute stream that runs its forward/backward tasks in the order the schedule
fixes (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", sec. 2.2; the interleaved order follows Megatron-Core's
``forward_backward_pipelining_with_interleaving``) and a communication stream that sends
activations (forward) and gradients (backward) to the neighbouring stage. A task starts when its
stage is free and its input has arrived. Events are popped from a heap ordered by (time, seq)
so ties break the same way every run. One task per (stage, micro-batch, chunk, fwd/bwd).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from analytical.parallel import Schedule

FWD, BWD = 0, 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """One executed task, for the trace: stage, stream ("compute"/"p2p"), label, times."""

    stage: int
    stream: str
    name: str
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineResult:
    """Timing of all micro-batches through all stages (seconds)."""

    span_s: float  # first task start to last task end, over all stages
    stage_end_s: tuple[float, ...]  # when each stage's compute stream finishes
    stage_busy_s: tuple[float, ...]  # compute time per stage
    last_bwd_start_s: tuple[float, ...]  # start of each stage's final micro-batch backward
    records: tuple[TaskRecord, ...] = ()

    def bubble_fraction(self, stage: int) -> float:
        """Idle share of the span on ``stage``: (span - busy) / span."""
        return (self.span_s - self.stage_busy_s[stage]) / self.span_s if self.span_s else 0.0


def stage_order(schedule: Schedule, stage: int, pp: int, vpp: int, m: int
                ) -> list[tuple[int, int, int]]:
    """The task order (direction, micro-batch, chunk) of one stage's compute stream."""
    if schedule == Schedule.GPIPE:
        fwd = [(FWD, mb, c) for c in range(vpp) for mb in range(m)]
        bwd = [(BWD, mb, c) for c in reversed(range(vpp)) for mb in range(m)]
        return fwd + bwd
    total = m * vpp

    def unit(k: int, direction: int) -> tuple[int, int, int]:
        chunk = (k // pp) % vpp
        if direction == BWD:
            chunk = vpp - 1 - chunk
        return direction, (k // (pp * vpp)) * pp + k % pp, chunk

    if vpp == 1:
        warmup = min(pp - stage - 1, m)
        order = [(FWD, k, 0) for k in range(warmup)]
        for i in range(m - warmup):
            order += [(FWD, warmup + i, 0), (BWD, i, 0)]
        return order + [(BWD, i, 0) for i in range(m - warmup, m)]
    warmup = min((pp - stage - 1) * 2 + (vpp - 1) * pp, total)
    order = [unit(k, FWD) for k in range(warmup)]
    for i in range(total - warmup):
        order += [unit(warmup + i, FWD), unit(i, BWD)]
    return order + [unit(i, BWD) for i in range(total - warmup, total)]


def simulate_pipeline(*, schedule: Schedule, pp: int, vpp: int, num_microbatches: int,
                      fwd_s: Sequence[Sequence[float]], bwd_s: Sequence[Sequence[float]],
                      p2p_s: float, record: bool = False) -> PipelineResult:
    """Run the schedule; ``fwd_s[stage][chunk]`` / ``bwd_s`` are one micro-batch's times and
    ``p2p_s`` one activation (or gradient) transfer between neighbouring stages."""
    m, n_virtual = num_microbatches, pp * vpp
    orders = [stage_order(schedule, s, pp, vpp, m) for s in range(pp)]
    pos = [0] * pp
    stage_free = [0.0] * pp
    comm_free = [0.0] * pp
    busy = [0.0] * pp
    running = [False] * pp
    last_bwd = [0.0] * pp
    arrived: dict[tuple[int, int, int], float] = {}  # (dir, mb, virtual stage) -> input ready
    records: list[TaskRecord] = []
    heap: list[tuple[float, int, int, int]] = []  # (time, seq, stage, kind 0=end)
    seq = 0

    def needs(stage: int, task: tuple[int, int, int]) -> tuple[int, int, int] | None:
        direction, mb, chunk = task
        v = chunk * pp + stage
        if direction == FWD:
            return None if v == 0 else (FWD, mb, v)
        return None if v == n_virtual - 1 else (BWD, mb, v)

    def try_start(stage: int, now: float) -> None:
        nonlocal seq
        if running[stage] or pos[stage] >= len(orders[stage]):
            return
        task = orders[stage][pos[stage]]
        dep = needs(stage, task)
        ready = now if dep is None else arrived.get(dep)
        if ready is None:
            return
        start = max(now, ready, stage_free[stage])
        direction, mb, chunk = task
        dur = (fwd_s if direction == FWD else bwd_s)[stage][chunk]
        end = start + dur
        running[stage] = True
        busy[stage] += dur
        if direction == BWD and mb == m - 1:
            last_bwd[stage] = start if last_bwd[stage] == 0.0 else min(last_bwd[stage], start)
        if record:
            label = f"{'F' if direction == FWD else 'B'}{mb}" + (f".c{chunk}" if vpp > 1 else "")
            records.append(TaskRecord(stage=stage, stream="compute", name=label,
                                      start_s=start, end_s=end))
        seq += 1
        heapq.heappush(heap, (end, seq, stage, 0))

    def send(stage: int, task: tuple[int, int, int], now: float) -> None:
        direction, mb, chunk = task
        v = chunk * pp + stage
        target_v = v + 1 if direction == FWD else v - 1
        if target_v < 0 or target_v >= n_virtual:
            return
        target = target_v % pp
        if target == stage:
            arrived[(direction, mb, target_v)] = now
            return
        start = max(now, comm_free[stage])
        comm_free[stage] = start + p2p_s
        arrived[(direction, mb, target_v)] = start + p2p_s
        if record and p2p_s > 0:
            records.append(TaskRecord(stage=stage, stream="p2p",
                                      name=f"{'send_act' if direction == FWD else 'send_grad'}"
                                           f"{mb}", start_s=start, end_s=start + p2p_s))
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (start + p2p_s, seq, target, 1))

    for s in range(pp):
        try_start(s, 0.0)
    while heap:
        now, _, stage, kind = heapq.heappop(heap)
        if kind == 0:  # compute task ended
            task = orders[stage][pos[stage]]
            pos[stage] += 1
            running[stage] = False
            stage_free[stage] = now
            send(stage, task, now)
            try_start(stage, now)
        else:  # an input arrived at `stage`
            try_start(stage, now)
    if any(pos[s] < len(orders[s]) for s in range(pp)):
        raise RuntimeError("pipeline schedule deadlocked")  # a bug in stage_order, not input
    return PipelineResult(span_s=max(stage_free), stage_end_s=tuple(stage_free),
                          stage_busy_s=tuple(busy), last_bwd_start_s=tuple(last_bwd),
                          records=tuple(records))
