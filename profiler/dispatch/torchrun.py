# SPDX-License-Identifier: Apache-2.0
"""Collectives under torchrun: the profiler launches ``python -m torch.distributed.run`` itself.

One process per device (``--nproc``) runs `profiler.dispatch.collective_worker`; every rank
measures, rank 0 alone opens the store and writes. Multi-node runs pass ``--nnodes``,
``--node-rank``, ``--master-addr`` and ``--master-port`` through; the store is written on the
node of rank 0. A single node without a master address uses ``--standalone`` (a free port).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from analytical.errors import LlmsimError, SpecError

__all__ = ["launch_collectives", "torchrun_command"]


def torchrun_command(sweep_path: str | Path, db: str | Path | None, *, nproc: int,
                     nnodes: int = 1, node_rank: int = 0, master_addr: str | None = None,
                     master_port: int | None = None, device: str = "auto",
                     python: str = sys.executable) -> list[str]:
    """The argv that launches the collective worker on this node."""
    for name, value, low in (("nproc", nproc, 1), ("nnodes", nnodes, 1),
                             ("node_rank", node_rank, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise SpecError(name, f"must be an integer >= {low}, got {value!r}")
    if node_rank >= nnodes:
        raise SpecError("node_rank", f"{node_rank} must be below nnodes={nnodes}")
    cmd = [python, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    if nnodes == 1 and master_addr is None and master_port is None:
        cmd.append("--standalone")
    else:
        if master_addr is None:
            raise SpecError("master_addr", "needed with more than one node")
        cmd += [f"--nnodes={nnodes}", f"--node-rank={node_rank}",
                f"--master-addr={master_addr}", f"--master-port={master_port or 29500}"]
    cmd += ["-m", "profiler.dispatch.collective_worker", str(sweep_path), "--device", device]
    if db is not None:
        cmd += ["--db", str(db)]
    return cmd


def launch_collectives(sweep_path: str | Path, db: str | Path | None, *, nproc: int,
                       nnodes: int = 1, node_rank: int = 0, master_addr: str | None = None,
                       master_port: int | None = None, device: str = "auto",
                       timeout_s: float | None = None) -> dict[str, object]:
    """Run the worker under torchrun and return rank 0's summary (empty on other nodes)."""
    cmd = torchrun_command(sweep_path, db, nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                           master_addr=master_addr, master_port=master_port, device=device)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        raise LlmsimError(f"torchrun did not finish within {timeout_s} s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise LlmsimError(f"torchrun exited with {done.returncode}:\n{tail}")
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}
