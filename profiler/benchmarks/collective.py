# SPDX-License-Identifier: Apache-2.0
"""Collective benchmarks inside an initialised ``torch.distributed`` process group.

Every rank runs the same loop: a first untimed call (lazy communicator set-up), a cost estimate
agreed on by all ranks (MAX all-reduce), warm-up calls, then per repetition barrier, synchronise,
time the op, synchronise. Per-rank times are gathered and each repetition keeps the MAX over
ranks (a collective is as slow as its slowest rank). Buffers follow nccl-tests sizes (see
`analytical.ops.CollectiveSpec`). Ops a backend lacks (gloo) come back UNSUPPORTED with its text.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from analytical.ops import CollectiveKind, CollectiveSpec
from profiler.benchmarks.common import (
    Outcome,
    Unsupported,
    classify_error,
    device_kind,
    torch_dtype,
)
from profiler.measurement import Status
from profiler.timers import Budget, rep_count
from profiler.timing import summarize

__all__ = ["build_collective", "measure_collective"]

_UNSUPPORTED_WORDS = ("not supported", "unsupported", "not implemented", "no support",
                      "does not support", "only supports")


def build_collective(op: CollectiveSpec, device: str) -> Callable[[], object]:
    """The collective as a closure over buffers sized per nccl-tests conventions."""
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    world, rank = dist.get_world_size(), dist.get_rank()
    if world != op.group_size:
        raise Unsupported(f"group_size {op.group_size} needs {op.group_size} ranks, got {world}")
    dtype = torch_dtype(op.dtype, device)
    element = torch.empty((), dtype=dtype).element_size()
    count = max(world, op.size_bytes // element // world * world)  # divisible by the group
    buffer = torch.zeros(count, dtype=dtype, device=device)
    kind = op.kind
    if kind == CollectiveKind.ALL_REDUCE:
        return lambda: dist.all_reduce(buffer)
    if kind == CollectiveKind.BROADCAST:
        return lambda: dist.broadcast(buffer, src=0)
    if kind == CollectiveKind.ALL_GATHER:
        part = torch.zeros(count // world, dtype=dtype, device=device)
        return lambda: dist.all_gather_into_tensor(buffer, part)
    if kind == CollectiveKind.REDUCE_SCATTER:
        part = torch.zeros(count // world, dtype=dtype, device=device)
        return lambda: dist.reduce_scatter_tensor(part, buffer)
    if kind == CollectiveKind.ALL_TO_ALL:
        out = torch.empty_like(buffer)
        return lambda: dist.all_to_all_single(out, buffer)
    if kind == CollectiveKind.SEND_RECV:
        if rank == 0:
            return lambda: dist.send(buffer, dst=1)
        return lambda: dist.recv(buffer, src=0)
    raise Unsupported(f"no collective benchmark for {kind}")


def _sync(device: str) -> None:
    if device_kind(device) == "cuda":
        import torch  # noqa: PLC0415

        torch.cuda.synchronize(device)


def _barrier(device: str) -> None:
    import torch.distributed as dist  # noqa: PLC0415

    if device_kind(device) == "cuda":
        import torch  # noqa: PLC0415

        dist.barrier(device_ids=[torch.device(device).index or 0])
    else:
        dist.barrier()


def _timed(call: Callable[[], object], device: str) -> float:
    _barrier(device)
    _sync(device)
    start = time.perf_counter_ns()
    call()
    _sync(device)
    return (time.perf_counter_ns() - start) / 1e9


def _agreed_max(value: float, device: str) -> float:
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def measure_collective(op: CollectiveSpec, budget: Budget, device: str) -> Outcome:
    """Time ``op`` on every rank; every rank returns the same outcome (MAX over ranks)."""
    import torch.distributed as dist  # noqa: PLC0415

    try:
        call = build_collective(op, device)
        call()  # communicator set-up and first-touch stay outside timing
        _sync(device)
    except Unsupported as exc:
        return Outcome(status=Status.UNSUPPORTED, error=str(exc))
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
        text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
        lowered = text.lower()
        status = Status.UNSUPPORTED if any(w in lowered for w in _UNSUPPORTED_WORDS) \
            else classify_error(exc)
        return Outcome(status=status, error=text[:500])
    per_call_s = _agreed_max(_timed(call, device), device)
    warmup = max(1, int(budget.warmup_s / per_call_s)) if per_call_s > 0 else 1
    for _ in range(min(warmup, budget.max_reps)):
        call()
    _sync(device)
    samples = [_timed(call, device) for _ in range(rep_count(per_call_s, budget))]
    gathered: list[list[float] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, samples)
    slowest = [max(times) for times in zip(*gathered, strict=True)]
    return Outcome(status=Status.OK, timing=summarize(slowest))
