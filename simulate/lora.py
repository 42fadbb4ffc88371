# SPDX-License-Identifier: Apache-2.0
"""LoRA fine-tuning (survey T4.2): adapter parameter counts and training memory.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", sec. 4.1) adds to a
frozen weight W [in, out] the product A [in, r] @ B [r, out]; only A and B train. So the base
weights need no gradients or optimizer states, activations are still stored (backward flows
through the frozen weights to reach earlier adapters), the base weight-gradient GEMMs disappear
and the adapter GEMMs (x@A, (x@A)@B and their backward) appear. The adapter GEMMs are nodes of
the one layer builder (`analytical.layers`, given a `LoraSpec`); the training graph drops the
base weights' wgrad (`analytical.layer_backward`). This module counts parameters and memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.layer_spec import LORA_ALIASES, LORA_TARGETS, LoraSpec, lora_params_per_layer
from analytical.memory import TrainingMemory, training_memory
from analytical.parallel import ParallelConfig, Recompute, Schedule
from simulate.fields import check_keys, dtype_field, int_field

# Storage of the frozen base's linear weights: bf16, or fp8 where the recipe builds the model
# under Transformer Engine's ``fp8_model_init`` (NeMo ``fp8_params``; the MLPerf llama2_70b_lora
# implementations' custom_llama.py): the frozen weights never need a higher-precision copy.
LORA_BASE_DTYPES = (DType.BF16, DType.FP8)

__all__ = ["LORA_ALIASES", "LORA_TARGETS", "LORA_BASE_DTYPES", "LoraBlock", "LoraConfig", "LoraSpec", "lora_state_bytes",
           "lora_trainable_params", "lora_training_memory"]


class LoraConfig(LoraSpec):
    """`LoraSpec` whose errors name the training scenario's field (``training.lora.*``)."""

    __slots__ = ()
    FIELD: ClassVar[str] = "training.lora"


@dataclass(frozen=True, slots=True)
class LoraBlock:
    """A scenario's ``training.lora``: adapters and the frozen base's weight storage."""

    rank: int
    targets: tuple[str, ...]
    base_dtype: DType = DType.BF16


def parse_lora(block: Any, path: str, source: str | None = None) -> LoraBlock:
    """``training.lora: {rank, targets, base_dtype}``; targets default to PEFT's q and v."""
    lora = check_keys(block, path, {"rank", "targets", "base_dtype"}, source=source)
    rank = int_field(lora, "rank", path, source=source)
    targets = lora.get("targets", ["q", "v"])
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise SpecError(f"{path}.targets", f"must be a list of names, got {targets!r}",
                        source=source)
    cfg = LoraConfig(rank=rank, targets=tuple(targets))
    base = dtype_field(lora, "base_dtype", path, LORA_BASE_DTYPES, source=source)
    return LoraBlock(cfg.rank, cfg.targets, base or DType.BF16)


def lora_trainable_params(model, rank: int, targets: Sequence[str]) -> int:
    """Adapter parameters of the whole model: layers * sum over targets of rank * (in + out).

    Llama-2-7B, r=8 on q and v: 32 * 2 * 8 * (4096 + 4096) = 4,194,304 (what PEFT prints).
    """
    return model.layers * lora_params_per_layer(model, LoraConfig(rank=rank,
                                                                  targets=tuple(targets)))


def lora_state_bytes(params: int) -> dict[str, float]:
    """Closed form for the adapters alone with mixed-precision Adam (ZeRO paper sec. 3.1):
    bf16 weights 2 B, bf16 gradients 2 B, fp32 master + two moments 12 B per parameter."""
    return {"weights_bytes": 2.0 * params, "gradients_bytes": 2.0 * params,
            "optimizer_bytes": 12.0 * params}


def lora_training_memory(model, parallel: ParallelConfig, *, rank: int, targets: Sequence[str],
                         micro_batch: int, seq_len: int, num_microbatches: int,
                         recompute: Recompute = Recompute.NONE,
                         schedule: Schedule = Schedule.ONE_F_ONE_B) -> TrainingMemory:
    """Training memory per GPU with frozen base weights and trainable adapters."""
    return training_memory(model, parallel, micro_batch=micro_batch, seq_len=seq_len,
                           recompute=recompute, schedule=schedule,
                           num_microbatches=num_microbatches,
                           lora_params=lora_trainable_params(model, rank, targets),
                           lora_targets=LoraConfig(rank=rank, targets=tuple(targets)).targets,
                           dropout=model.norm == "layernorm")
