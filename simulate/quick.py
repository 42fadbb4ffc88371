# SPDX-License-Identifier: Apache-2.0
"""A scenario from a handful of flags: ``llmsim simulate --model M --gpu G --gpus N``.

Every default a user did not choose is written here, with where it comes from, and ends up in
the scenario document (``--save`` writes it), so nothing is hidden:

- training: sequence length 4096 and a global batch of 1024 sequences (4M tokens per step, the
  Llama 2 pre-training batch, Touvron et al. 2023 sec. 2.2), micro-batch 1, bf16; data
  parallelism is FSDP (ZeRO-3) as in torchtitan's default (github.com/pytorch/torchtitan
  docs/fsdp.md) so a model too large for one GPU can still fit; ``tp`` and ``pp`` default to 1.
- serving: prompts of 1024 and outputs of 128 tokens, 1000 requests all sent at t=0: the
  defaults of ``vllm bench serve --dataset-name random`` (vllm/benchmarks/datasets.py
  random_input_len/random_output_len, num_prompts 1000, request_rate inf); one replica over all
  GPUs by tensor parallelism, up to a node (``vllm serve --tensor-parallel-size``), more GPUs
  become data-parallel replicas; continuous batching.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from analytical.errors import SpecError

TRAIN_SEQ_LEN = 4096
TRAIN_GLOBAL_BATCH = 1024
SERVE_INPUT_LEN = 1024
SERVE_OUTPUT_LEN = 128
SERVE_REQUESTS = 1000


class Mode(StrEnum):
    TRAIN = "train"
    SERVE = "serve"


@dataclass(frozen=True, slots=True, kw_only=True)
class QuickSpec:
    """What the flags say; None means "use the documented default"."""

    model: str
    gpu: str
    gpus: int
    mode: Mode = Mode.SERVE
    tp: int | None = None
    pp: int | None = None
    seq_len: int | None = None
    global_batch: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    qps: float | None = None
    requests: int | None = None


def _positive(value: int | None, name: str) -> None:
    if value is not None and (isinstance(value, bool) or value <= 0):
        raise SpecError(f"--{name.replace('_', '-')}", f"must be > 0, got {value!r}")


def _check(spec: QuickSpec) -> None:
    for name in ("gpus", "tp", "pp", "seq_len", "global_batch", "input_len", "output_len",
                 "requests"):
        _positive(getattr(spec, name), name)
    if spec.qps is not None and spec.qps <= 0:
        raise SpecError("--qps", f"must be > 0, got {spec.qps!r}")
    model_parallel = (spec.tp or 1) * (spec.pp or 1)
    if spec.gpus % model_parallel:
        raise SpecError("--gpus", f"{spec.gpus} GPUs are not a multiple of tp*pp = "
                        f"{model_parallel}")


def _gpus_per_node(gpu: str) -> int:
    from analytical.hardware import get_hardware  # noqa: PLC0415 - catalog lookup

    return int(get_hardware(gpu).gpus_per_node)


def quick_scenario(spec: QuickSpec) -> dict[str, Any]:
    """The scenario document the flags describe (what ``--save`` writes)."""
    _check(spec)
    per_node = _gpus_per_node(spec.gpu)
    model_name = Path(spec.model).parent.name if spec.model.endswith("config.json") else \
        Path(spec.model).stem if spec.model.endswith(".json") else spec.model
    doc: dict[str, Any] = {
        "name": f"{model_name}-{spec.mode}-{spec.gpus}x{spec.gpu}",
        "model": spec.model,
        "hardware": {"gpu": spec.gpu, "num_gpus": spec.gpus,
                     "gpus_per_node": min(per_node, spec.gpus)},
    }
    if spec.mode == Mode.TRAIN:
        doc["training"] = _training(spec)
    else:
        doc.update(_serving(spec, per_node))
    return doc


def _training(spec: QuickSpec) -> dict[str, Any]:
    tp, pp = spec.tp or 1, spec.pp or 1
    dp = spec.gpus // (tp * pp)
    batch = spec.global_batch or TRAIN_GLOBAL_BATCH
    if spec.global_batch is None and batch % dp:
        batch += dp - batch % dp  # the smallest batch >= the default that every rank shares
    parallel: dict[str, Any] = {"tp": tp, "pp": pp, "dp": dp}
    if dp > 1:
        parallel["fsdp"] = True
    return {"parallel": parallel, "global_batch": batch, "micro_batch": 1,
            "seq_len": spec.seq_len or TRAIN_SEQ_LEN, "precision": "bf16"}


def _serving(spec: QuickSpec, per_node: int) -> dict[str, Any]:
    tp = spec.tp or min(spec.gpus, per_node)
    pp = spec.pp or 1
    if spec.gpus % (tp * pp):
        raise SpecError("--gpus", f"{spec.gpus} GPUs are not a multiple of tp*pp = {tp * pp}")
    arrival: dict[str, Any] = {"num_requests": spec.requests or SERVE_REQUESTS, "seed": 0}
    if spec.qps is None:
        arrival["process"] = "burst"
    else:
        arrival.update({"process": "poisson", "qps": spec.qps})
    return {
        "inference": {"parallel": {"tp": tp, "pp": pp, "dp": spec.gpus // (tp * pp)},
                      "precision": "bf16", "input_len": spec.input_len or SERVE_INPUT_LEN,
                      "output_len": spec.output_len or SERVE_OUTPUT_LEN},
        "serving": {"scheduler": "continuous", "arrival": arrival},
    }
