# SPDX-License-Identifier: Apache-2.0
"""Where a sweep runs: this process, torchrun (one process per device), or a Slurm job array.

`DISPATCHERS` maps an executor name to the function that runs a sweep file there.
"""

from __future__ import annotations

from collections.abc import Callable

from profiler.dispatch.local import run_local
from profiler.dispatch.slurm import SlurmOptions, run_slurm
from profiler.dispatch.torchrun import launch_collectives

__all__ = ["DISPATCHERS", "SlurmOptions", "launch_collectives", "run_local", "run_slurm"]

DISPATCHERS: dict[str, Callable[..., object]] = {
    "local": run_local,
    "torchrun": launch_collectives,
    "slurm": run_slurm,
}
