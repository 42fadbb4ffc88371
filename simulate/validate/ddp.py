# SPDX-License-Identifier: Apache-2.0
"""DDP check on CPU (``llmsim validate ddp``): two gloo processes, predicted vs measured.

Measured: ``python -m torch.distributed.run --standalone --nproc-per-node=2`` runs `main` in
this module; each rank wraps a small MLP in `DistributedDataParallel` (gloo), and times
forward + loss + backward (DDP's bucketed gradient all-reduce included; gradients dropped
untimed before each step, no optimizer step), after a barrier, per repetition; the step time
of a repetition is the MAX over ranks, the result their median. Each rank uses one intra-op
thread (two processes on two cores).

Predicted: the same step traced weights-free (`trace_module`), `passes.data_parallel(dp=2)`
adds the DDP bucket all-reduces where their gradients are ready; compute shapes are profiled
with one thread and the all-reduce sizes with the profiler's collective path (gloo under
torchrun) into the store; the engine chain prices every op. Two timelines: ``serial`` (every
op one after the other) and ``overlap`` (one compute stream and one communication stream: a
bucket's all-reduce starts when its gradients are ready and the communication stream is free;
the step ends when both are done). ``overlap`` is the prediction; ``serial`` its upper bound.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from analytical.errors import LlmsimError, SpecError
from analytical.hardware import get_hardware
from analytical.ops import CollectiveSpec, op_to_dict
from profiler.timers import Budget

__all__ = ["DdpCheck", "DdpConfig", "build_mlp", "run_ddp_check"]

DP = 2  # two gloo processes


@dataclass(frozen=True, slots=True, kw_only=True)
class DdpConfig:
    """The model, the workload and the measuring effort of the check."""

    width: int = 512  # hidden size of the MLP
    depth: int = 4  # Linear(w, 4w) -> GELU(tanh) -> Linear(4w, w) blocks
    batch: int = 64  # rows per rank per step
    warmup: int = 3
    repeats: int = 10
    budget: Budget = Budget()  # per profiled shape
    store_path: Path | None = None  # None: `validation_db_path(1)` (one thread per rank)
    hardware: str = "cpu"
    timeout_s: float = 300.0  # per torchrun launch

    def __post_init__(self) -> None:
        for name in ("width", "depth", "batch", "warmup", "repeats"):
            if getattr(self, name) < 1:
                raise SpecError(name, f"must be at least 1, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class DdpCheck:
    measured_s: float  # median over repetitions of the max over ranks
    measured_spread: float  # (p90 - p10) / median
    predicted_s: float  # overlap timeline
    serial_s: float  # no overlap
    compute_s: float
    comm_s: float  # summed all-reduce time
    buckets: int
    grad_bytes: int
    engine_share: dict[str, float]  # of the serial sum
    profile: dict[str, Any]

    @property
    def error_pct(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s * 100.0

    @property
    def serial_error_pct(self) -> float:
        return (self.serial_s - self.measured_s) / self.measured_s * 100.0

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__}
        out["error_pct"] = self.error_pct
        out["serial_error_pct"] = self.serial_error_pct
        return out


def build_mlp(width: int, depth: int) -> Any:
    """The checked model: residual-free MLP blocks (GELU tanh, as the memory benchmark)."""
    import torch  # noqa: PLC0415

    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, 4 * width), torch.nn.GELU(approximate="tanh"),
                   torch.nn.Linear(4 * width, width)]
    return torch.nn.Sequential(*layers)


def _trace(config: DdpConfig) -> Any:
    import torch  # noqa: PLC0415

    from simulate.frontend.passes import data_parallel  # noqa: PLC0415
    from simulate.frontend.trace import trace_module  # noqa: PLC0415

    traced = trace_module(lambda: build_mlp(config.width, config.depth),
                          lambda: (torch.randn(config.batch, config.width),), backward=True)
    return data_parallel(traced, dp=DP)


def _profile_collectives(specs: list[CollectiveSpec], config: DdpConfig) -> dict[str, Any]:
    from profiler.dispatch.torchrun import launch_collectives  # noqa: PLC0415

    shapes = [{k: v for k, v in op_to_dict(s).items() if k != "dtype"} for s in specs]
    sweep = {"name": "validate-ddp-collectives", "device": "cpu",
             "budget": {"warmup_ms": config.budget.warmup_s * 1e3,
                        "measure_ms": config.budget.measure_s * 1e3,
                        "min_reps": config.budget.min_reps, "max_reps": config.budget.max_reps},
             "families": [{"family": "collective", "dtypes": [str(specs[0].dtype)],
                           "backends": ["gloo"], "shapes": {"list": shapes}}]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "collectives.yaml"
        path.write_text(yaml.safe_dump(sweep), encoding="utf-8")
        return launch_collectives(path, config.store_path, nproc=DP, device="cpu",
                                  timeout_s=config.timeout_s)


def _measure(config: DdpConfig, attempts: int = 2) -> dict[str, Any]:
    """Run the measured step under torchrun; a crashed launch is retried once, then reported."""
    failures: list[str] = []
    for _ in range(attempts):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "ddp.json"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={DP}", "-m", "simulate.validate.ddp", "--out", str(out),
                   "--width", str(config.width), "--depth", str(config.depth),
                   "--batch", str(config.batch), "--warmup", str(config.warmup),
                   "--repeats", str(config.repeats)]
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                      check=False, timeout=config.timeout_s)
            except subprocess.TimeoutExpired:
                raise LlmsimError(f"ddp: torchrun did not finish in {config.timeout_s} s") from None
            if done.returncode == 0 and out.is_file():
                return json.loads(out.read_text(encoding="utf-8"))
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-10:])
            failures.append(f"torchrun exited with {done.returncode}:\n{tail}")
    raise LlmsimError(f"ddp: {len(failures)} launches failed; last: {failures[-1]}")


def run_ddp_check(config: DdpConfig) -> DdpCheck:
    """Profile what the step needs, predict it, measure it under torchrun (see module doc)."""
    from profiler.runner import run_sweep  # noqa: PLC0415
    from simulate.engines import EngineChain  # noqa: PLC0415
    from simulate.frontend.aten_map import Category  # noqa: PLC0415
    from simulate.frontend.price import price_traced  # noqa: PLC0415
    from simulate.validate.loop import needed_sweep, validation_db_path  # noqa: PLC0415

    if config.store_path is None:
        config = replace(config, store_path=validation_db_path(1))
    graph = _trace(config)
    compute = {op.spec.key: op.spec for op in graph.ops if op.spec is not None
               and op.category not in (Category.COLLECTIVE, Category.UNKNOWN)}
    comms = {op.spec.key: op.spec for op in graph.ops if op.category == Category.COLLECTIVE}
    summary = run_sweep(needed_sweep(list(compute.values()), budget=config.budget,
                                     name="validate-ddp"), config.store_path, device="cpu",
                        threads=1, progress=False, command="validate ddp")
    collective = _profile_collectives(list(comms.values()), config) if comms else {}
    profile = {"compute_shapes": len(compute), "compute_measured": summary.measured,
               "collective_shapes": len(comms),
               "collective_measured": collective.get("measured", 0)}
    measured = _measure(config)
    hw = get_hardware(config.hardware)
    chain = EngineChain(hw, store_path=config.store_path, use_predictors=False)
    pred = price_traced(graph, chain, hw)
    comm_s = pred.per_category_s.get(str(Category.COLLECTIVE), 0.0)
    return DdpCheck(measured_s=measured["median_s"], measured_spread=measured["spread"],
                    predicted_s=pred.overlap_s if pred.overlap_s is not None else pred.serial_s,
                    serial_s=pred.serial_s, compute_s=pred.serial_s - comm_s, comm_s=comm_s,
                    buckets=sum(1 for op in graph.ops if op.category == Category.COLLECTIVE),
                    grad_bytes=sum(op.bytes for op in graph.ops
                                   if op.category == Category.COLLECTIVE),
                    engine_share=pred.engine_share, profile=profile)


def main(argv: list[str] | None = None) -> int:
    """One rank of the measured DDP run (started by torchrun; rank 0 writes ``--out``)."""
    parser = argparse.ArgumentParser(prog="simulate.validate.ddp")
    parser.add_argument("--out", required=True)
    for name, default in (("width", 512), ("depth", 4), ("batch", 64), ("warmup", 3),
                          ("repeats", 10)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args(argv)
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415
    from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415

    from profiler.dispatch.group_exit import leave_process_group  # noqa: PLC0415
    from profiler.timing import summarize  # noqa: PLC0415

    torch.set_num_threads(1)
    dist.init_process_group(backend="gloo")
    clean = False
    try:
        rank = dist.get_rank()
        torch.manual_seed(0)
        model = DistributedDataParallel(build_mlp(args.width, args.depth))
        x = torch.randn(args.batch, args.width, generator=torch.Generator().manual_seed(rank))
        samples: list[float] = []
        for step in range(args.warmup + args.repeats):
            model.zero_grad(set_to_none=True)
            dist.barrier()
            start = time.perf_counter_ns()
            model(x).sum().backward()
            elapsed = torch.tensor([(time.perf_counter_ns() - start) * 1e-9],
                                   dtype=torch.float64)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            if step >= args.warmup:
                samples.append(float(elapsed.item()))
        if rank == 0:
            timing = summarize(samples)
            partial = Path(args.out).with_suffix(".partial")
            partial.write_text(json.dumps({
                "median_s": timing.median_s,
                "spread": (timing.p90_s - timing.p10_s) / timing.median_s,
                "samples_s": samples}), encoding="utf-8")
            partial.replace(args.out)  # the parent never reads a half-written file
        clean = True
    finally:
        leave_process_group(dist, clean=clean)
    return 0


if __name__ == "__main__":
    sys.exit(main())
