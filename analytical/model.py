# SPDX-License-Identifier: Apache-2.0
"""The model catalog: Hugging Face ``config.json`` files in ``datasets/models/``, stem = name.

`load_model` takes a catalog name or a path to any ``config.json`` (or a folder holding one).
The architecture itself and its counts live in `analytical.model_spec`; reading config keys in
`analytical.model_hf`. Both are re-exported here, the module other packages import.
"""

from __future__ import annotations

import functools
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from analytical.dtypes import DType
from analytical.errors import SpecError, UnknownNameError
from analytical.inputs import check_path, load_json, show_path
from analytical.model_hf import model_from_hf_config
from analytical.model_spec import FAMILIES, ModelSpec
from analytical.paths import DATASETS_DIR

__all__ = [
    "FAMILIES",
    "MODELS_DIR",
    "ModelSpec",
    "load_model",
    "load_model_file",
    "model_details",
    "model_from_hf_config",
    "model_names",
    "model_summary",
]

MODELS_DIR = DATASETS_DIR / "models"

SHOW_SEQ_LEN = 4096  # sequence length of the FLOPs/token figure `model_details` reports


def model_names() -> list[str]:
    """All catalog names, sorted."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def load_model_file(path: str | Path, *, name: str | None = None) -> ModelSpec:
    """Read one ``config.json``; the name defaults to the file stem (or its folder for
    ``.../<model>/config.json``). Errors name the file and the key."""
    path = check_path(path, "model")
    if path.is_dir():
        path = path / "config.json"
    data = load_json(path, "config.json")
    if not isinstance(data, dict):
        raise SpecError("config.json", "top level must be a JSON object", source=show_path(path))
    if name is None:
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return model_from_hf_config(data, name=name, source=str(path))


@functools.cache
def load_model(name_or_path: str) -> ModelSpec:
    """Catalog lookup by exact name, or a path to a config.json; raises UnknownNameError."""
    if not isinstance(name_or_path, str):
        raise SpecError("model", f"expected a name or a config.json path, got {name_or_path!r}")
    check_path(name_or_path, "model")
    if name_or_path.endswith(".json") or os.sep in name_or_path or "/" in name_or_path:
        return load_model_file(name_or_path)
    candidate = MODELS_DIR / f"{name_or_path}.json"
    if candidate.is_file():
        return load_model_file(candidate, name=name_or_path)
    if Path(name_or_path).is_dir():
        return load_model_file(name_or_path)
    raise UnknownNameError("model", name_or_path, model_names())


def model_summary(model: ModelSpec) -> dict[str, Any]:
    """One catalog row: the columns of ``llmsim models list``."""
    return {
        "name": model.name,
        "family": model.family,
        "params_b": model.params_total / 1e9,
        "active_b": model.params_active / 1e9,
        "layers": model.layers,
        "hidden": model.hidden,
        "heads": model.heads,
        "kv_heads": model.kv_heads,
        "experts": model.num_experts,
        "top_k": model.top_k,
        "max_seq_len": model.max_seq_len,
    }


def model_details(model: ModelSpec, *, seq_len: int = SHOW_SEQ_LEN) -> dict[str, Any]:
    """Every field, the parameter breakdown, FLOPs/token and bf16 KV bytes/token."""
    spec = {f.name: getattr(model, f.name) for f in fields(model)}
    params = {
        "attention_per_layer": model.attention_params_per_layer,
        "norm_per_layer": model.norm_params_per_layer,
        "dense_mlp": model.dense_mlp_params,
        "expert": model.expert_params,
        "shared_experts": model.shared_expert_params,
        "router_per_layer": model.router_params_per_layer,
        "embedding": model.embedding_params,
        "lm_head": model.lm_head_params,
        "final_norm": model.final_norm_params,
        "dense_layers": model.dense_layers,
        "moe_layers": model.moe_layers,
        "total": model.params_total,
        "active": model.params_active,
        "non_embedding": model.params_non_embedding,
        "matmul_active": model.matmul_params_active,
    }
    return {
        "spec": spec,
        "params": params,
        "seq_len": seq_len,
        "training_flops_per_token": model.flops_per_token(seq_len, training=True),
        "forward_flops_per_token": model.flops_per_token(seq_len, training=False),
        "kv_cache_bytes_per_token_bf16": model.kv_cache_bytes_per_token(DType.BF16.bytes),
    }
