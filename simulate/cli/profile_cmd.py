# SPDX-License-Identifier: Apache-2.0
"""``llmsim profile``: expand a sweep, run it here, under torchrun, or as a Slurm job array."""

from __future__ import annotations

from pathlib import Path

import click

from simulate.cli.output import FiniteFloat, InputPath, print_json, print_mapping, print_table

_DB = click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                   help="DuckDB store (default: $LLMSIM_DB or ~/.llmsim/llmsim.duckdb).")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
_DEVICE = click.option("--device", default=None,
                       help="cpu, cuda, cuda:<i> or auto (default: the sweep's device).")


def _show(summary: dict[str, object], as_json: bool, title: str) -> None:
    if as_json:
        print_json(summary)
    else:
        print_mapping(summary, title=title)


@click.group()
def group() -> None:
    """Run microbenchmark sweeps (local, torchrun, Slurm) into the measurement store."""


@group.command("expand")
@click.argument("sweep", type=InputPath(exists=True))
@click.option("--device", default="cpu", type=click.Choice(["cpu", "cuda"]),
              help="Device whose default backends to use.")
@click.option("--shard", default=None, help="Only share i of N (i/N).")
@_JSON
def expand_cmd(sweep: Path, device: str, shard: str | None, as_json: bool) -> None:
    """List the points a sweep file expands to, in run order."""
    from profiler.sweep import load_sweep, parse_shard, select_shard

    points = select_shard(load_sweep(sweep).points(device),
                          parse_shard(shard) if shard else None)
    rows = [{"family": p.op.family, "op_key": p.op.key, "backend": p.backend,
             "flops": p.op.flops, "bytes": p.op.bytes} for p in points]
    if as_json:
        print_json(rows)
    else:
        print_table(rows, title=f"{sweep.name}: {len(rows)} points")


@group.command("run")
@click.argument("sweep", type=InputPath(exists=True))
@_DB
@_DEVICE
@click.option("--shard", default=None, help="Measure only share i of N (i/N, i from 0).")
@click.option("--threads", type=click.IntRange(1, 4096), default=None, help="CPU: torch intra-op threads.")
@click.option("--progress/--no-progress", default=True, help="Progress bar on stderr.")
@_JSON
def run_cmd(sweep: Path, db: Path | None, device: str | None, shard: str | None,
            threads: int | None, progress: bool, as_json: bool) -> None:
    """Measure a sweep's GEMM/attention/memory/MoE points in this process (resumable)."""
    from profiler.dispatch.local import run_local
    from profiler.sweep import parse_shard

    summary = run_local(sweep, db, device=device, shard=parse_shard(shard) if shard else None,
                        progress=progress, threads=threads)
    _show(summary.to_dict(), as_json, f"profile run {sweep.name}")


@group.command("collectives")
@click.argument("sweep", type=InputPath(exists=True))
@click.option("--nproc", type=click.IntRange(1, 1024), required=True, help="Processes (devices) on this node.")
@click.option("--nnodes", type=click.IntRange(1, 100_000), default=1, show_default=True)
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--master-addr", default=None, help="Rendezvous host (needed with --nnodes > 1).")
@click.option("--master-port", type=click.IntRange(1, 65535), default=None)
@_DB
@click.option("--device", default="auto", show_default=True, help="cpu (gloo) or cuda (nccl).")
@_JSON
def collectives_cmd(sweep: Path, nproc: int, nnodes: int, node_rank: int,
                    master_addr: str | None, master_port: int | None, db: Path | None,
                    device: str, as_json: bool) -> None:
    """Measure a sweep's collectives under torchrun (launched here); rank 0 writes the store."""
    from profiler.dispatch.torchrun import launch_collectives

    summary = launch_collectives(sweep, db, nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                                 master_addr=master_addr, master_port=master_port,
                                 device=device)
    _show(summary, as_json, f"profile collectives {sweep.name}")


@group.command("submit")
@click.argument("sweep", type=InputPath(exists=True))
@click.option("--executor", type=click.Choice(["slurm", "local"]), default="slurm",
              show_default=True)
@click.option("--partition", default=None)
@click.option("--gpus-per-task", type=click.IntRange(1, 1024), default=None)
@click.option("--cpus-per-task", type=click.IntRange(1, 4096), default=None)
@click.option("--time", "time_limit", default="01:00:00", show_default=True,
              help="Time limit per task ([D-]HH:MM:SS).")
@click.option("--array-size", type=click.IntRange(1, 100_000), default=1, show_default=True,
              help="Tasks in the job array; task i measures shard i/N.")
@_DB
@_DEVICE
@click.option("--dry-run", is_flag=True, help="Print the sbatch script; submit nothing.")
@click.option("--test-only", is_flag=True, help="sbatch --test-only: validate, do not run.")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=0, min_open=True), default=None,
              help="Give up waiting after this many seconds.")
@_JSON
def submit_cmd(sweep: Path, executor: str, partition: str | None, gpus_per_task: int | None,
               cpus_per_task: int | None, time_limit: str, array_size: int, db: Path | None,
               device: str | None, dry_run: bool, test_only: bool, timeout_s: float | None,
               as_json: bool) -> None:
    """Submit a sweep as a Slurm job array, wait for it and merge the shards into --db."""
    from analytical.paths import default_db_path
    from profiler.dispatch import DISPATCHERS
    from profiler.dispatch.slurm import SlurmOptions, sbatch_script

    db = db or default_db_path()
    if executor == "local":
        summary = DISPATCHERS["local"](sweep, db, device=device, progress=not as_json)
        _show(summary.to_dict(), as_json, f"profile run {sweep.name}")
        return
    options = SlurmOptions(array_size=array_size, partition=partition,
                           gpus_per_task=gpus_per_task, cpus_per_task=cpus_per_task,
                           time=time_limit, device=device)
    if dry_run:
        click.echo(sbatch_script(sweep, db, options), nl=False)
        return
    result = DISPATCHERS["slurm"](sweep, db, options, test_only=test_only, timeout_s=timeout_s)
    _show(result.to_dict(), as_json, f"profile submit {sweep.name}")
