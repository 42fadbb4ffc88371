# SPDX-License-Identifier: Apache-2.0
"""One training corpus row as a scenario: what each column of ``published_runs.csv`` sets, and
what an empty cell assumes (`DEFAULTS`; datasets/validation/training/README.md). A cell that does
not parse is refused naming its column, so a bad edit of the corpus says where it is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.layer_spec import normalise_targets
from simulate.validate.corpus_versions import TE_VERSIONS

# Empty corpus fields and what the scorer assumes (datasets/validation/training/README.md).
DEFAULTS: dict[str, Any] = {"cp": 1, "ep": 1, "vpp": 1, "zero": 0, "micro_batch": 1,
                            "recompute": "none", "sp": False, "fsdp": False,
                            "attention": "flash", "framework": "megatron",
                            "tp_comm_overlap": False, "moe_a2a_overlap": False, "compile": True,
                            "fp8_recipe": "tensorwise", "cp_max_ctas": 0, "dp_grad_overlap": True}
INTERLEAVED_VPP = 2  # "interleaved" with no stated vpp: the smallest interleaving


def _get(row: Mapping[str, str], key: str) -> str:
    return (row.get(key) or "").strip()


def _parsed(row: Mapping[str, str], key: str, kind: type) -> Any:
    """The cell parsed as `kind`; a cell that does not parse names its column."""
    try:
        return kind(_get(row, key))
    except ValueError:
        cell = _get(row, key)
        raise SpecError(f"corpus.{key}", f"not a {kind.__name__}: {cell!r}" if cell
                        else "empty (this column is required)") from None


def _int(row: Mapping[str, str], key: str) -> int:
    return _parsed(row, key, int) if _get(row, key) else int(DEFAULTS[key])


_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _bool(row: Mapping[str, str], key: str) -> bool:
    """A yes/no cell; empty takes `DEFAULTS` (False for a column without one). Any other
    text is refused naming its column: a typo must not silently read as false."""
    value = _get(row, key).lower()
    if not value:
        return bool(DEFAULTS.get(key, False))
    if value not in _TRUE + _FALSE:
        raise SpecError(f"corpus.{key}", f"not true/false: {_get(row, key)!r}")
    return value in _TRUE


def _float(row: Mapping[str, str], key: str) -> float | None:
    return _parsed(row, key, float) if _get(row, key) else None


def _row_hardware(row: Mapping[str, str]) -> dict[str, Any]:
    """A row's ``hardware`` block; an unstated node size spreads evenly (`_even_domains`)."""
    hardware: dict[str, Any] = {"gpu": _get(row, "gpu"), "num_gpus": _parsed(row, "num_gpus", int)}
    if _get(row, "gpus_per_node"):
        hardware["gpus_per_node"] = _parsed(row, "gpus_per_node", int)
    elif (spread := _even_domains(hardware["gpu"], hardware["num_gpus"])) is not None:
        hardware["gpus_per_node"] = spread
    return hardware


def row_scenario(row: Mapping[str, str], name: str) -> dict[str, Any]:
    """The scenario mapping of one corpus row; empty fields take `DEFAULTS`."""
    schedule = _get(row, "schedule") or "1f1b"
    vpp = _int(row, "vpp")
    if vpp > 1:
        schedule = "interleaved"
    elif schedule == "interleaved":
        vpp = INTERLEAVED_VPP
    parallel = {k: _parsed(row, k, int) for k in ("tp", "pp", "dp")}
    parallel.update(cp=_int(row, "cp"), ep=_int(row, "ep"), vpp=vpp, sp=_bool(row, "sp"),
                    zero=_int(row, "zero"), fsdp=_bool(row, "fsdp"),
                    pipeline_split=_get(row, "pipeline_split") or "even")
    parallel["etp"] = _int(row, "etp") if _get(row, "etp") else _ran_etp(parallel)
    hardware = _row_hardware(row)
    framework = _get(row, "framework") or DEFAULTS["framework"]
    training = {"parallel": parallel, "global_batch": _parsed(row, "global_batch", int),
                "micro_batch": _micro_batch(row, parallel, framework),
                "seq_len": _parsed(row, "seq_len", int),
                "precision": _get(row, "precision") or "bf16",
                "recompute": _get(row, "recompute") or DEFAULTS["recompute"],
                "schedule": schedule, "attention": _get(row, "attention") or DEFAULTS["attention"]}
    training["framework"] = framework
    training["overlap"] = {"tp_comm": _bool(row, "tp_comm_overlap"),
                           "moe_a2a": _bool(row, "moe_a2a_overlap"),
                           "cp_max_ctas": _int(row, "cp_max_ctas"),  # `simulate.comm_ctas`
                           # false: the DP reduction waits for the backward (2021 Megatron local DDP)
                           "dp_grad": _bool(row, "dp_grad_overlap")}
    training["compile"] = _bool(row, "compile")
    training["fp8_recipe"] = _get(row, "fp8_recipe") or DEFAULTS["fp8_recipe"]
    training.update(_stated_options(row))
    if _get(row, "lora_targets") and "lora" not in training:
        raise SpecError("corpus.lora_rank", "empty (required with lora_targets)")
    return {"name": name, "model": _get(row, "model"), "hardware": hardware, "training": training}


def _stated_options(row: Mapping[str, str]) -> dict[str, Any]:
    """The training options a row states (or its framework's release implies), each only where
    its column is filled: an empty cell leaves the scenario's default."""
    training: dict[str, Any] = {}
    for key in ("grad_reduce_dtype", "optimizer_state_dtype"):  # as the recipe states them
        if _get(row, key):
            training[key] = _get(row, key)
    if _get(row, "framework_version") in TE_VERSIONS:
        training["transformer_engine"] = TE_VERSIONS[_get(row, "framework_version")]
    bridge = "megatron-bridge" in _get(row, "framework_version").lower()
    if _get(row, "cross_entropy_fusion"):  # Megatron-Core's fused loss, as the run set it
        training["cross_entropy_fusion"] = _bool(row, "cross_entropy_fusion")
    elif bridge:
        # unstated: Megatron-Bridge's GPTModelProvider fuses it (cross_entropy_loss_fusion=True)
        training["cross_entropy_fusion"] = True
    if _get(row, "moe_router_fusion"):  # Megatron-Core's --moe-router-fusion, as the run set it
        training["moe_router_fusion"] = _bool(row, "moe_router_fusion")
    elif bridge:
        # every Megatron-Bridge performance recipe of the corpus's releases (v0.2.0-v0.6.0)
        # sets `cfg.model.moe_router_fusion = True` (datasets/validation/training/README.md)
        training["moe_router_fusion"] = True
    if bridge:
        # the GPT-OSS bridge turns bias-dropout-add fusion off (`simulate.bias_kernels`)
        training["bias_dropout_fusion"] = not _get(row, "model").startswith("gpt-oss")
    if _get(row, "compile_loss"):  # torchtitan's loss compiled with the model (since 2025-04)
        training["compile_loss"] = _bool(row, "compile_loss")
    if _get(row, "recompute_modules"):  # Megatron-Core's selective modules, "+"-separated
        training["recompute_modules"] = _get(row, "recompute_modules").split("+")
    if _get(row, "cuda_graph"):  # the recipe's CUDA graph scopes, "+"-separated
        training["cuda_graph"] = _get(row, "cuda_graph").split("+")
    if _get(row, "moe_fused_mlp"):  # the recipe's fused grouped expert MLP (TE op fuser)
        training["moe_fused_mlp"] = _bool(row, "moe_fused_mlp")
    if _get(row, "dp_bucket_mb"):  # the run's DDP gradient bucket (MB of gradients)
        training["dp_bucket_mb"] = _parsed(row, "dp_bucket_mb", float)
    if _get(row, "activation_offload_layers"):  # Megatron-Core's cpu_offloading_num_layers
        training["offload"] = {"activations": True,
                               "activation_layers": _int(row, "activation_offload_layers")}
    if _get(row, "lora_rank"):  # LoRA fine-tuning: adapters on "+"-separated projections
        training["lora"] = _lora(row)
    return training


def _lora(row: Mapping[str, str]) -> dict[str, Any]:
    """The ``training.lora`` block of a LoRA row (rank > 0 on the stated projections, names
    of `analytical.layer_spec.LORA_TARGETS` or its merged aliases); a target list without a
    rank, or a rank that is not a positive integer, is refused naming its column."""
    rank = _parsed(row, "lora_rank", int)
    if rank <= 0:
        raise SpecError("corpus.lora_rank", f"must be a positive integer, got {rank}")
    if not _get(row, "lora_targets"):
        raise SpecError("corpus.lora_targets", "empty (required with lora_rank)")
    targets = normalise_targets(_get(row, "lora_targets").split("+"), "corpus.lora_targets")
    lora: dict[str, Any] = {"rank": rank, "targets": list(targets)}
    if _get(row, "lora_base_dtype"):  # the frozen base built under TE fp8_model_init
        lora["base_dtype"] = _get(row, "lora_base_dtype")
    return lora


def _even_domains(gpu: str, num_gpus: int) -> int | None:
    """Unstated placement of a run that does not fill whole NVLink domains (256 GPUs on
    72-GPU NVL72 racks): the GPUs spread evenly over the fewest domains that hold them, i.e. the
    largest divisor of num_gpus not above the domain size. None where the domains fill."""
    domain = get_hardware(gpu).gpus_per_node
    if num_gpus <= domain or num_gpus % domain == 0:
        return None
    return max(d for d in range(1, domain + 1) if num_gpus % d == 0)


def _ran_etp(parallel: Mapping[str, Any]) -> int:
    """Unstated expert TP of a run that ran: Megatron-Core's default (tp; 0 here) when the
    etp x ep grid then tiles a stage's tp*cp*dp ranks, else the largest divisor of tp that
    does (Megatron-Core refuses a grid that does not tile, so the run used such an etp)."""
    tp, ep = parallel["tp"], parallel["ep"]
    ranks = tp * parallel["cp"] * parallel["dp"]
    if ranks % (tp * ep) == 0:
        return 0
    return max((d for d in range(1, tp + 1) if tp % d == 0 and ranks % (d * ep) == 0),
               default=0)


def _micro_batch(row: Mapping[str, str], parallel: Mapping[str, Any], framework: str) -> int:
    """The stated micro-batch; unstated, the framework's default: torchtitan splits each DP
    rank's batch into pp micro-batches ("The default value will be the number of pipeline
    stages", --experimental.pipeline_parallel_microbatches, config_manager.py at 9dec370);
    otherwise `DEFAULTS`."""
    if _get(row, "micro_batch"):
        return _parsed(row, "micro_batch", int)
    local = _parsed(row, "global_batch", int) // (parallel["dp"])
    if framework == "torchtitan" and parallel["pp"] > 1 and local % parallel["pp"] == 0:
        return local // parallel["pp"]
    return int(DEFAULTS["micro_batch"])
