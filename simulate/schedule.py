# SPDX-License-Identifier: Apache-2.0
"""Event-level simulation of a pipeline schedule (GPipe, 1F1B, interleaved 1F1B).

Each stage has a compute stream that runs its forward/backward tasks in the order the schedule
fixes (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", sec. 2.2; the interleaved order follows Megatron-Core's
``forward_backward_pipelining_with_interleaving``) and a communication stream that sends
activations (forward) and gradients (backward) to the neighbouring stage. A task starts when its
stage is free and its input has arrived. Events are popped from a heap ordered by (time, seq)
so ties break the same way every run. One task per (stage, micro-batch, chunk, fwd/bwd).

``combined`` is Megatron-Core's combined 1F1B (``overlap_moe_expert_parallel_comm``, Megatron-
Bridge ``moe_a2a_overlap``; megatron/core/pipeline_parallel/schedules.py and combined_1f1b.py at
NVIDIA/Megatron-LM b0cc2706, the commit Megatron-Bridge v0.3.0 / NeMo 26.02 pins): with
interleaving it runs one more warm-up forward (``get_pp_rank_microbatches``), then each steady
step's forward and backward as one merged pass, layer by layer
(``TransformerModelChunkSchedulePlan.run``): it waits for both inputs (``pre_forward`` and
``pre_backward`` before the first layer) and sends both outputs after the last layer
(``post_forward`` / ``post_backward``), so each stage waits for its neighbours' whole merged
steps where the plain order lets a forward start while the backward's gradient is in flight.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from analytical.layer_spec import Stream
from analytical.parallel import Schedule

FWD, BWD = 0, 1


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """One executed task, for the trace: stage, stream, label, times."""

    stage: int
    stream: Stream
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


def stage_order(schedule: Schedule, stage: int, pp: int, vpp: int, m: int, *,
                combined: bool = False) -> list[tuple[int, int, int]]:
    """The task order (direction, micro-batch, chunk) of one stage's compute stream; with
    ``combined`` (interleaved only) one more warm-up forward (module docstring)."""
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
    warmup = min((pp - stage - 1) * 2 + (vpp - 1) * pp + int(combined), total)
    order = [unit(k, FWD) for k in range(warmup)]
    for i in range(total - warmup):
        order += [unit(warmup + i, FWD), unit(i, BWD)]
    return order + [unit(i, BWD) for i in range(total - warmup, total)]


def simulate_pipeline(*, schedule: Schedule, pp: int, vpp: int, num_microbatches: int,
                      fwd_s: Sequence[Sequence[float]], bwd_s: Sequence[Sequence[float]],
                      p2p_s: float, record: bool = False, combined: bool = False
                      ) -> PipelineResult:
    """Run the schedule; ``fwd_s[stage][chunk]`` / ``bwd_s`` are one micro-batch's times and
    ``p2p_s`` one activation (or gradient) transfer between neighbouring stages; ``combined``:
    the combined 1F1B of the a2a overlap (module docstring; interleaved schedules only)."""
    return _PipelineRun(schedule=schedule, pp=pp, vpp=vpp, m=num_microbatches, fwd_s=fwd_s,
                        bwd_s=bwd_s, p2p_s=p2p_s, record=record,
                        combined=combined and schedule != Schedule.GPIPE and vpp > 1).run()


class _PipelineRun:
    """The event loop's state: per stage its task order, position, compute and send streams."""

    def __init__(self, *, schedule: Schedule, pp: int, vpp: int, m: int,
                 fwd_s: Sequence[Sequence[float]], bwd_s: Sequence[Sequence[float]],
                 p2p_s: float, record: bool, combined: bool) -> None:
        self.pp, self.vpp, self.m, self.n_virtual = pp, vpp, m, pp * vpp
        self.fwd_s, self.bwd_s, self.p2p_s, self.record = fwd_s, bwd_s, p2p_s, record
        self.orders = [stage_order(schedule, s, pp, vpp, m, combined=combined)
                       for s in range(pp)]
        # combined 1F1B: the steady state's (forward, backward) pairs run as one merged pass
        self.paired = [_steady_forwards(o) if combined else frozenset() for o in self.orders]
        self.pos = [0] * pp
        self.stage_free = [0.0] * pp
        self.comm_free = [0.0] * pp
        self.busy = [0.0] * pp
        self.running = [False] * pp
        self.last_bwd = [0.0] * pp
        self.arrived: dict[tuple[int, int, int], float] = {}  # (dir, mb, virtual) -> ready
        self.records: list[TaskRecord] = []
        self.heap: list[tuple[float, int, int, int]] = []  # (time, seq, stage, kind 0=end)
        self.seq = 0

    def run(self) -> PipelineResult:
        for s in range(self.pp):
            self._try_start(s, 0.0)
        while self.heap:
            now, _, stage, kind = heapq.heappop(self.heap)
            if kind == 0:  # compute task ended
                n = 2 if self.pos[stage] in self.paired[stage] else 1
                tasks = self.orders[stage][self.pos[stage]:self.pos[stage] + n]
                self.pos[stage] += n
                self.running[stage] = False
                self.stage_free[stage] = now
                for task in tasks:
                    self._send(stage, task, now)
                self._try_start(stage, now)
            else:  # an input arrived at `stage`
                self._try_start(stage, now)
        if any(self.pos[s] < len(self.orders[s]) for s in range(self.pp)):
            raise RuntimeError("pipeline schedule deadlocked")  # a bug in stage_order, not input
        return PipelineResult(span_s=max(self.stage_free), stage_end_s=tuple(self.stage_free),
                              stage_busy_s=tuple(self.busy), last_bwd_start_s=tuple(self.last_bwd),
                              records=tuple(self.records))

    def _push(self, time: float, stage: int, kind: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, stage, kind))

    def _needs(self, stage: int, task: tuple[int, int, int]) -> tuple[int, int, int] | None:
        """The (dir, mb, virtual stage) input a task waits for; None for the pipeline's ends."""
        direction, mb, chunk = task
        v = chunk * self.pp + stage
        if direction == FWD:
            return None if v == 0 else (FWD, mb, v)
        return None if v == self.n_virtual - 1 else (BWD, mb, v)

    def _try_start(self, stage: int, now: float) -> None:
        if self.running[stage] or self.pos[stage] >= len(self.orders[stage]):
            return
        pos = self.pos[stage]
        n = 2 if pos in self.paired[stage] else 1
        tasks = self.orders[stage][pos:pos + n]
        ready = now
        for task in tasks:
            dep = self._needs(stage, task)
            arrived = now if dep is None else self.arrived.get(dep)
            if arrived is None:
                return
            ready = max(ready, arrived)
        start = max(now, ready, self.stage_free[stage])
        end = start
        for direction, mb, chunk in tasks:
            dur = (self.fwd_s if direction == FWD else self.bwd_s)[stage][chunk]
            if direction == BWD and mb == self.m - 1:
                last = self.last_bwd[stage]
                self.last_bwd[stage] = end if last == 0.0 else min(last, end)
            if self.record:
                label = (f"{'F' if direction == FWD else 'B'}{mb}"
                         + (f".c{chunk}" if self.vpp > 1 else ""))
                self.records.append(TaskRecord(stage=stage, stream=Stream.COMPUTE, name=label,
                                               start_s=end, end_s=end + dur))
            end += dur
            self.busy[stage] += dur
        self.running[stage] = True
        self._push(end, stage, 0)

    def _send(self, stage: int, task: tuple[int, int, int], now: float) -> None:
        direction, mb, chunk = task
        v = chunk * self.pp + stage
        target_v = v + 1 if direction == FWD else v - 1
        if target_v < 0 or target_v >= self.n_virtual:
            return
        target = target_v % self.pp
        if target == stage:
            self.arrived[(direction, mb, target_v)] = now
            return
        p2p_s = self.p2p_s
        start = max(now, self.comm_free[stage])
        self.comm_free[stage] = start + p2p_s
        self.arrived[(direction, mb, target_v)] = start + p2p_s
        if self.record and p2p_s > 0:
            name = f"{'send_act' if direction == FWD else 'send_grad'}{mb}"
            self.records.append(TaskRecord(stage=stage, stream=Stream.P2P, name=name,
                                           start_s=start, end_s=start + p2p_s))
        self._push(start + p2p_s, target, 1)


def _steady_forwards(order: Sequence[tuple[int, int, int]]) -> frozenset[int]:
    """Positions of the steady state's forwards, each followed by the backward it runs with:
    the forwards after the first backward, and the one right before it (``stage_order``); none
    when every forward is in the warm-up (Megatron-Core's ``are_all_microbatches_in_warmup``:
    its steady loop runs no step, so the last forward and the first backward run apart)."""
    first_bwd = next((i for i, task in enumerate(order) if task[0] == BWD), len(order))
    if first_bwd == sum(task[0] == FWD for task in order):
        return frozenset()
    return frozenset(i for i in range(max(first_bwd - 1, 0), len(order) - 1)
                     if order[i][0] == FWD and order[i + 1][0] == BWD)
