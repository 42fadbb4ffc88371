# SPDX-License-Identifier: Apache-2.0
"""One rank of a collective sweep, started by torchrun (see `profiler.dispatch.torchrun`).

Usage: ``python -m profiler.dispatch.collective_worker SWEEP [--db PATH] [--device auto]``.
Every rank measures each collective point whose group size equals the world size (and whose
ranks per node equal torchrun's local world size); rank 0 skips points already stored, tells
the others which remain, writes each measurement as it completes and prints a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import replace

from profiler.benchmarks.collective import measure_collective
from profiler.dispatch.group_exit import leave_process_group
from profiler.fingerprint import current_fingerprint
from profiler.measurement import Measurement
from profiler.runner import pending_points, resolve_device
from profiler.store import Store
from profiler.sweep import SweepPoint, load_sweep


def _points(sweep_path: str, kind: str, world: int, local_world: int,
            backend: str) -> list[SweepPoint]:
    return [p for p in load_sweep(sweep_path).points(kind)
            if p.op.family == "collective" and p.op.group_size == world
            and p.op.ranks_per_node == local_world and p.backend == backend]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="collective_worker")
    parser.add_argument("sweep")
    parser.add_argument("--db", default=None)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    device = resolve_device(args.device)
    if device.startswith("cuda"):
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(backend=backend)
    started = time.perf_counter()
    clean = False
    try:
        points = _points(args.sweep, device.split(":")[0], world, local_world, backend)
        store = None
        fingerprint = replace(current_fingerprint(device), device_count=world)
        todo_indices: list[object] = [None]
        if rank == 0:
            store = Store(args.db)
            todo = pending_points(points, store, fingerprint)
            run_id = store.start_run(command=f"llmsim profile collectives {args.sweep}",
                                     sweep=load_sweep(args.sweep).name, fingerprint=fingerprint)
            todo_indices = [[points.index(p) for p in todo]]
        dist.broadcast_object_list(todo_indices, src=0)
        statuses: Counter[str] = Counter()
        for index in todo_indices[0]:
            point = points[index]
            outcome = measure_collective(point.op, point.budget, device)
            statuses[str(outcome.status)] += 1
            if store is not None:
                store.insert([Measurement(op=point.op, fingerprint=fingerprint,
                                          backend=point.backend, status=outcome.status,
                                          timing=outcome.timing, error=outcome.error,
                                          run_id=run_id)])
        if store is not None:
            store.close()
            print(json.dumps({"run_id": run_id, "world_size": world, "backend": backend,
                              "points": len(points), "skipped": len(points) - len(todo),
                              "measured": len(todo), "statuses": dict(statuses),
                              "hardware": fingerprint.hardware,
                              "elapsed_s": round(time.perf_counter() - started, 3)}))
        clean = True
    finally:
        leave_process_group(dist, clean=clean)
    return 0


if __name__ == "__main__":
    sys.exit(main())
