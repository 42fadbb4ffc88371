# SPDX-License-Identifier: Apache-2.0
"""Two-level overlap model (after Charon): compute beside communication, and collectives
sharing a link.

1. Ratio-based slowdown: while a collective runs beside compute, the compute proceeds at
   1/ratio of its speed (NCCL kernels occupy SMs and HBM bandwidth). The default ratio comes
   from the SMs NCCL takes: units / (units - comm_sms); NCCL runs one CTA per channel and uses
   16 channels on NVLink systems by default (NCCL_MAX_NCHANNELS tuning guide), so an H100
   (132 SMs) gives 1.14 and an A100 (108 SMs) 1.17. A measured ratio overrides it
   (``training.overlap.compute_slowdown``).
2. Link sharing: collectives that overlap on the same link split its bandwidth equally
   (processor sharing), so each runs slower while the other is active.
"""

from __future__ import annotations

from collections.abc import Sequence

from analytical.hardware import HardwareSpec


def default_compute_slowdown(hw: HardwareSpec, comm_sms: int) -> float:
    """units / (units - comm_sms), at least 1 (see module docstring)."""
    if comm_sms <= 0:
        return 1.0
    free = max(1, hw.compute_units - comm_sms)
    return hw.compute_units / free


def overlap_window(compute_s: float, comm_s: float, slowdown: float) -> tuple[float, float]:
    """Compute and a collective start together; returns (elapsed_s, exposed_comm_s).

    While both run, compute advances at 1/slowdown. If the collective is longer than the slowed
    compute, the rest of it is exposed; otherwise compute finishes its remainder at full speed.
    """
    if comm_s <= 0.0:
        return compute_s, 0.0
    if compute_s <= 0.0:
        return comm_s, comm_s
    slowed = compute_s * slowdown
    if comm_s >= slowed:
        return comm_s, comm_s - slowed
    done_during = comm_s / slowdown  # compute work finished while the collective ran
    return comm_s + (compute_s - done_during), 0.0


def share_link(jobs: Sequence[tuple[float, float, int]]) -> list[float]:
    """Finish times of transfers sharing one link with equal bandwidth shares.

    Each job is (release_s, alone_s, queue): ``alone_s`` is its time with the link to itself.
    Jobs of one queue run one after another in the given order (a stream); jobs of different
    queues that are active at once split the bandwidth equally.
    """
    n = len(jobs)
    finish = [0.0] * n
    queues: dict[int, list[int]] = {}
    for i, (_, _, q) in enumerate(jobs):
        queues.setdefault(q, []).append(i)
    heads = {q: 0 for q in queues}
    remaining = [alone for _, alone, _ in jobs]
    ready_at = {q: jobs[idx[0]][0] for q, idx in queues.items()}
    now = min((r for r, _, _ in jobs), default=0.0)
    while True:
        active = [queues[q][heads[q]] for q in queues
                  if heads[q] < len(queues[q]) and ready_at[q] <= now + 1e-15]
        pending = [ready_at[q] for q in queues if heads[q] < len(queues[q]) and ready_at[q] > now]
        if not active:
            if not pending:
                return finish
            now = min(pending)
            continue
        share = len(active)
        step = min(remaining[i] * share for i in active)
        if pending:
            step = min(step, min(pending) - now)
        now += step
        for i in active:
            remaining[i] -= step / share
            if remaining[i] <= 1e-15:
                finish[i] = now
                q = jobs[i][2]
                heads[q] += 1
                if heads[q] < len(queues[q]):
                    nxt = queues[q][heads[q]]
                    ready_at[q] = max(now, jobs[nxt][0])
