# SPDX-License-Identifier: Apache-2.0
"""``llmsim models``: list the model catalog and show one model's architecture and counts."""

from __future__ import annotations

import click

from analytical.model import load_model, model_details, model_names, model_summary
from simulate.cli.output import print_json, print_mapping, print_table

_LIST_COLUMNS = {
    "name": "name",
    "family": "family",
    "params_b": "total B",
    "active_b": "active B",
    "layers": "layers",
    "hidden": "hidden",
    "heads": "heads/kv",
    "experts": "experts/k",
    "max_seq_len": "max seq",
}


@click.group()
def group() -> None:
    """Model catalog: list, show."""


@group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_models(as_json: bool) -> None:
    """Every model in datasets/models/ with its size and shape."""
    rows = [model_summary(load_model(name)) for name in model_names()]
    if as_json:
        print_json(rows)
        return
    table = [{
        **row,
        "params_b": f"{row['params_b']:.2f}",
        "active_b": f"{row['active_b']:.2f}",
        "heads": f"{row['heads']}/{row['kv_heads']}",
        "experts": f"{row['experts']}/{row['top_k']}" if row["experts"] else "-",
    } for row in rows]
    renamed = [{_LIST_COLUMNS[k]: row[k] for k in _LIST_COLUMNS} for row in table]
    print_table(renamed, list(_LIST_COLUMNS.values()), title="models")


@group.command()
@click.argument("name_or_path")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show(name_or_path: str, as_json: bool) -> None:
    """All fields, the parameter breakdown, FLOPs/token and KV-cache bytes/token of a model."""
    details = model_details(load_model(name_or_path))
    if as_json:
        print_json(details)
        return
    print_mapping(details["spec"], title=details["spec"]["name"])
    print_mapping(details["params"], title="parameters")
    seq = details["seq_len"]
    print_mapping({
        f"training FLOPs/token (seq {seq})": details["training_flops_per_token"],
        f"forward FLOPs/token (seq {seq})": details["forward_flops_per_token"],
        "KV-cache bytes/token (bf16)": details["kv_cache_bytes_per_token_bf16"],
    }, title="per token")
