# SPDX-License-Identifier: Apache-2.0
"""``llmsim simulate SCENARIO``: predict one scenario (training or inference) end to end."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml

from analytical.inputs import output_errors, write_text
from profiler.progress import bar
from simulate.api import SimulationOutput, run
from simulate.cli.output import (
    PLOT_SUFFIXES,
    PROGRESS,
    InputPath,
    OutputPath,
    print_json,
    print_table,
)
from simulate.cli.quick_opts import quick_options
from simulate.inference.outputs import inference_rows, plot_latency_cdfs
from simulate.report import plot_breakdown, summary_rows


@click.command(name="simulate")
@click.argument("scenario", required=False, type=InputPath())
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--format", "fmt", type=click.Choice(["vllm-bench"]),
              help="Print a serving prediction as `vllm bench serve --save-result` JSON.")
@click.option("--trace", "trace_file", type=OutputPath(),
              help="Write a Chrome/Perfetto trace (training iteration, or serving steps).")
@click.option("--plot", "plot_file", type=OutputPath(PLOT_SUFFIXES),
              help="Write a breakdown chart (training) or latency CDFs (inference), PNG/SVG/PDF.")
@click.option("--emit-missing", "missing_file", type=OutputPath(),
              help="Write the operator shapes the store did not serve as a sweep YAML.")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
              help="Override a scenario field, e.g. --set training.parallel.tp=4 (repeatable).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Measurement store (default: $LLMSIM_DB or ~/.llmsim/llmsim.duckdb).")
@click.option("--tracking-uri", help="MLflow tracking URI for the predictors.")
@click.option("--no-store", is_flag=True, help="Do not use measured latencies.")
@click.option("--no-predictors", is_flag=True, help="Do not use learned predictors.")
@PROGRESS
@quick_options
def command(scenario: Path, as_json: bool, trace_file: Path | None, plot_file: Path | None,
            missing_file: Path | None, overrides: tuple[str, ...], db_path: Path | None,
            tracking_uri: str | None, no_store: bool, no_predictors: bool,
            fmt: str | None = None, progress: bool = True) -> None:
    """Predict SCENARIO (YAML/JSON): iteration time, MFU and memory, or serving latencies.

    Without a file: llmsim simulate --model llama-3-8b --gpu h100-sxm --gpus 8 [--train]
    builds the scenario from flags (--save writes it).

    A training layout that does not fit in memory prints its memory breakdown and
    ``fits: false`` (exit 0) and no latency.
    """
    with bar("simulate", unit="requests",  # serving runs count requests
             enabled=progress and not as_json and fmt is None):
        out = run(scenario, overrides=overrides, store_path=db_path, tracking_uri=tracking_uri,
                  use_store=not no_store, use_predictors=not no_predictors,
                  trace=trace_file is not None or fmt is not None)
    data = out.data
    if fmt == "vllm-bench":
        _print_vllm_bench(out)
        return
    if trace_file is not None and out.trace is not None:
        write_text(trace_file, json.dumps(out.trace), "--trace")
    if missing_file is not None and out.missing_sweep is not None:
        write_text(missing_file, yaml.safe_dump(out.missing_sweep, sort_keys=False),
                   "--emit-missing")
    with output_errors(plot_file or "", "--plot"):
        if plot_file is not None and out.training is not None and out.fits:
            plot_breakdown(data, plot_file)
        if plot_file is not None and out.latencies is not None:
            plot_latency_cdfs(out.latencies, plot_file, title=out.scenario.name)
    if as_json:
        print_json(data)
        return
    if out.training is None:
        print_table(inference_rows(data), ["field", "value"], title=out.scenario.name)
        if not data.get("fits", True):
            click.secho(f"DOES NOT FIT: {data.get('reason', '')}", fg="red", bold=True)
        return
    print_table(summary_rows(data), ["field", "value"], title=out.scenario.name)
    if not out.fits:
        mem = data["memory"]
        print_table([{"part": k.removesuffix("_gib"), "GiB": v} for k, v in mem.items()],
                    ["part", "GiB"], title="memory per GPU")
        click.secho(f"DOES NOT FIT: {mem['total_gib']:.1f} GiB needed, "
                    f"{mem['capacity_gib']:.1f} GiB available", fg="red", bold=True)
    for warning in data.get("warnings", []):
        click.secho(f"warning: {warning}", fg="yellow", err=True)


def _print_vllm_bench(out: SimulationOutput) -> None:
    from analytical.errors import SpecError
    from simulate.inference.result import InferenceMode
    from simulate.serving.bench_format import vllm_bench_result

    setup, result = out.scenario.inference, out.inference
    serving = setup.serving if setup is not None else None
    if result is not None and not result.fits:
        raise SpecError("--format", f"does not fit: {result.reason}")
    if serving is None or result is None or result.mode is not InferenceMode.SERVING:
        raise SpecError("--format", "vllm-bench needs a served inference scenario "
                        "(a serving block with an arrival process, one pool)")
    print_json(vllm_bench_result(result.to_dict(), model_id=out.scenario.model,
                                 arrival=serving.arrival, latencies=result.latencies))
