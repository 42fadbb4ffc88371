# SPDX-License-Identifier: Apache-2.0
"""``llmsim hardware``: list and show catalog entries, calibrate this machine into a new one.

Files use human units; `HardwareSpec` holds SI floats, so this module converts back for display
(TFLOP/s, GiB, GB/s per direction, microseconds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from analytical.dtypes import DType
from analytical.hardware import (
    GB,
    GIB,
    MB,
    HardwareSpec,
    LinkFabric,
    get_hardware,
    hardware_file,
    hardware_names,
)
from analytical.inputs import check_output_path, output_errors
from simulate.cli.output import FiniteFloat, OutputPath, print_json, print_mapping, print_table

_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
# JSON key -> table header
_LIST_COLUMNS = {"name": "name", "vendor": "vendor", "bf16_tflops": "bf16 TFLOP/s",
                 "fp8_tflops": "fp8", "hbm_gib": "HBM GiB", "hbm_tb_per_s": "HBM TB/s",
                 "nvlink_gb_per_s": "NVLink GB/s", "net_gb_per_s": "net GB/s",
                 "gpus_per_node": "GPUs/node"}


def _r(value: float) -> float:
    """Six significant figures: undoes unit-conversion noise (50.00000000001 -> 50)."""
    return float(f"{value:.6g}")


def _row(hw: HardwareSpec) -> dict[str, Any]:
    return {
        "name": hw.name,
        "vendor": hw.vendor,
        "bf16_tflops": _r(hw.peak_flops_bf16 / 1e12),
        "fp8_tflops": _r(hw.peak_flops_fp8 / 1e12),
        "hbm_gib": _r(hw.memory_bytes / GIB),
        "hbm_tb_per_s": _r(hw.memory_bw_bytes_per_s / 1e12),
        "nvlink_gb_per_s": _r(hw.intra_node.bandwidth_bytes_per_s / GB),
        "net_gb_per_s": _r(hw.inter_node.bandwidth_bytes_per_s / GB),
        "gpus_per_node": hw.gpus_per_node,
    }


def _details(hw: HardwareSpec) -> dict[str, Any]:
    """Every field of a spec in human units, flat keys, for `show`."""
    path = hardware_file(hw.name)
    out: dict[str, Any] = {"name": hw.name, "vendor": hw.vendor, "kind": hw.kind,
                           "architecture": str(hw.architecture), "file": str(path or "")}
    for dtype in DType:
        unit = "tops" if dtype.is_integer else "tflops"
        out[f"peak_{dtype.value}_{unit}"] = _r(hw.peak_flops(dtype) / 1e12)
    out["memory_gib"] = _r(hw.memory_bytes / GIB)
    out["memory_bw_tb_per_s"] = _r(hw.memory_bw_bytes_per_s / 1e12)
    out["memory_type"] = hw.memory_type
    out["compute_units"] = hw.compute_units
    out["l2_mb"] = _r(hw.l2_bytes / MB)
    for label in ("intra_node", "pcie", "inter_node"):
        link = getattr(hw, label)
        out[f"{label}_link"] = link.name
        out[f"{label}_gb_per_s_per_direction"] = _r(link.bandwidth_bytes_per_s / GB)
        out[f"{label}_latency_us"] = _r(link.latency_s * 1e6)
        if link.fabric != LinkFabric.UNKNOWN:
            out[f"{label}_fabric"] = str(link.fabric)
    if hw.pair_bridge is not None:
        out["pair_bridge_link"] = hw.pair_bridge.name
        out["pair_bridge_gb_per_s_per_direction"] = _r(
            hw.pair_bridge.bandwidth_bytes_per_s / GB)
    out["gpus_per_node"] = hw.gpus_per_node
    out["network"] = hw.network
    for label in ("gemm", "attention", "memory", "intra_node", "inter_node"):
        out[f"efficiency_{label}"] = getattr(hw.efficiency, label)
    out["notes"] = hw.notes
    out["sources"] = list(hw.sources)
    return out


@click.group()
def group() -> None:
    """Hardware catalog: list, show, calibrate."""


@group.command("list")
@_JSON
def list_cmd(as_json: bool) -> None:
    """One row per catalog entry (shipped, $LLMSIM_HOME/hardware, $LLMSIM_HARDWARE_PATH)."""
    rows = [_row(get_hardware(name)) for name in hardware_names()]
    if as_json:
        print_json(rows)
    else:
        table = [{_LIST_COLUMNS[k]: (v if v or k != "fp8_tflops" else "-") for k, v in row.items()}
                 for row in rows]
        print_table(table, list(_LIST_COLUMNS.values()),
                    title="Hardware catalog (dense peaks; links per GPU, per direction)")


@group.command("show")
@click.argument("name")
@_JSON
def show_cmd(name: str, as_json: bool) -> None:
    """Every field of one entry, in human units, with its sources."""
    details = _details(get_hardware(name))
    if as_json:
        print_json(details)
        return
    sources = details.pop("sources")
    details["sources"] = "\n".join(sources)
    print_mapping(details, title=name)


@group.command("calibrate")
@click.option("--out", type=OutputPath((".yaml", ".yml")), default=None,
              help="File to write (default: $LLMSIM_HOME/hardware/<name>.yaml).")
@click.option("--name", default=None,
              help="Catalog name (default: cpu, or <gpu>-calibrated on a GPU).")
@click.option("--budget-s", type=FiniteFloat(min=0, min_open=True, max=86400), default=30.0, show_default=True,
              help="Rough wall-clock budget for all measurements, seconds.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--reference", default=None,
              help="Catalog entry whose vendor peaks to keep; efficiency = measured / peak "
                   "(default on a known GPU: its catalog entry).")
@_JSON
def calibrate_cmd(out: Path | None, name: str | None, budget_s: float, device: str,
                  reference: str | None, as_json: bool) -> None:
    """Measure GEMM FLOP/s and memory bandwidth here and write a hardware file."""
    from analytical.calibrate import write_hardware_file  # noqa: PLC0415
    from analytical.paths import user_hardware_dir  # noqa: PLC0415
    from profiler.calibrate import calibrate, default_name  # noqa: PLC0415 - imports torch

    default, default_reference = default_name(device)
    name = name or default
    reference = reference if reference is not None else default_reference
    target = out or user_hardware_dir() / f"{name}.yaml"
    check_output_path(target, "--out", suffixes=(".yaml", ".yml"), create_parents=True)
    data = calibrate(device, name=name, budget_s=budget_s, reference=reference)
    with output_errors(target, "--out"):
        path = write_hardware_file(data, target)
    summary: dict[str, Any] = {"written": str(path), "name": name, "reference": reference}
    summary.update({f"peak_{k}_tflops": v for k, v in data["peak_dense_tflops"].items()})
    summary["memory_bw_gb_per_s"] = data["memory"]["bandwidth_gb_per_s"]
    summary["intra_node_gb_per_s"] = data["interconnect"]["intra_node"]["bandwidth_gb_per_s"]
    summary.update({f"efficiency_{k}": v for k, v in data["efficiency"].items()})
    summary["notes"] = data["notes"]
    if as_json:
        print_json(summary)
    else:
        print_mapping(summary, title=f"calibrated {name}")
