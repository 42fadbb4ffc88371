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
from typing import ClassVar

from analytical.layer_spec import LORA_ALIASES, LORA_TARGETS, LoraSpec, lora_params_per_layer
from analytical.memory import TrainingMemory, training_memory
from analytical.parallel import ParallelConfig, Recompute, Schedule

__all__ = ["LORA_ALIASES", "LORA_TARGETS", "LoraConfig", "LoraSpec", "lora_state_bytes",
           "lora_trainable_params", "lora_training_memory"]


class LoraConfig(LoraSpec):
    """`LoraSpec` whose errors name the training scenario's field (``training.lora.*``)."""

    __slots__ = ()
    FIELD: ClassVar[str] = "training.lora"


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
                           dropout=model.norm == "layernorm")
