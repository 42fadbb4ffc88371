# SPDX-License-Identifier: Apache-2.0
"""LoRA fine-tuning (survey T4.2): adapter parameter counts, memory and GEMMs.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", sec. 4.1) adds to a
frozen weight W [in, out] the product A [in, r] @ B [r, out]; only A and B train. So the base
weights need no gradients or optimizer states, activations are still stored (backward flows
through the frozen weights to reach earlier adapters), the base weight-gradient GEMMs disappear
and the adapter GEMMs (x@A, (x@A)@B and their backward) appear.

Wiring into `simulate.training` (the training simulator owns that file): with a scenario key
``training.lora: {rank, targets}`` the simulator should (1) drop the ``*.wgrad`` nodes of the
targeted (or all, since the base is frozen) base GEMMs, (2) add `lora_block_ops` per layer,
(3) use ``training_memory(..., lora_params=lora_trainable_params(...))`` and (4) reduce and step
only the adapter parameters (DP sync, optimizer). `lora_training_memory` does (3) here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.memory import TrainingMemory, training_memory
from analytical.ops import GemmSpec
from analytical.parallel import ParallelConfig, Recompute, Schedule

__all__ = ["LORA_TARGETS", "LoraConfig", "lora_trainable_params", "lora_training_memory",
           "lora_block_ops", "lora_state_bytes"]

# target -> (in features, out features, column-parallel under TP)
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraConfig:
    """Adapters of rank ``rank`` on the projections ``targets`` (names in `LORA_TARGETS`)."""

    rank: int
    targets: tuple[str, ...] = ("q", "v")  # the PEFT default for Llama

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise SpecError("training.lora.rank", f"must be an integer >= 1, got {self.rank!r}")
        if not self.targets:
            raise SpecError("training.lora.targets", "needs at least one projection")
        bad = [t for t in self.targets if t not in LORA_TARGETS]
        if bad:
            raise SpecError("training.lora.targets", f"unknown {bad[0]!r}; known: "
                            f"{', '.join(LORA_TARGETS)}")


def _dims(model, target: str) -> tuple[int, int, bool]:
    """(in, out, column_parallel) of one targeted projection of a dense layer."""
    h, d = model.hidden, model.head_dim
    table = {
        "q": (h, model.heads * d, True), "k": (h, model.kv_heads * d, True),
        "v": (h, model.kv_heads * d, True), "o": (model.heads * d, h, False),
        "gate": (h, model.ffn_hidden, True), "up": (h, model.ffn_hidden, True),
        "down": (model.ffn_hidden, h, False),
    }
    if model.is_moe and target in ("gate", "up", "down"):
        raise SpecError("training.lora.targets", f"{target!r} on MoE experts is not modelled; "
                        "target attention projections")
    return table[target]


def lora_trainable_params(model, rank: int, targets: Sequence[str]) -> int:
    """Adapter parameters of the whole model: layers * sum over targets of rank * (in + out).

    Llama-2-7B, r=8 on q and v: 32 * 2 * 8 * (4096 + 4096) = 4,194,304 (what PEFT prints).
    """
    cfg = LoraConfig(rank=rank, targets=tuple(targets))
    per_layer = sum(cfg.rank * (i + o) for i, o, _ in (_dims(model, t) for t in cfg.targets))
    return model.layers * per_layer


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


def lora_block_ops(model, *, rank: int, targets: Sequence[str], tokens: int, tp: int = 1,
                   dtype: DType = DType.BF16) -> tuple[list[GemmSpec], list[GemmSpec]]:
    """Adapter GEMMs of one layer on one rank for ``tokens`` tokens: (forward, backward).

    Forward per target: u = x @ A [T, in] @ [in, r], then u @ B [T, r] @ [r, out]. Backward:
    du = dy @ B^T, dB = u^T @ dy, dx = du @ A^T, dA = x^T @ du. Under TP the adapter follows its
    base weight: column-parallel targets split B's out over tp (A replicated), row-parallel ones
    split A's in over tp (B replicated), as PEFT on Megatron layers does.
    """
    cfg = LoraConfig(rank=rank, targets=tuple(targets))
    r, t = cfg.rank, tokens
    fwd: list[GemmSpec] = []
    bwd: list[GemmSpec] = []
    for target in cfg.targets:
        d_in, d_out, column = _dims(model, target)
        if column:
            d_out //= tp
        else:
            d_in //= tp
        fwd += [GemmSpec(m=t, n=r, k=d_in, dtype=dtype), GemmSpec(m=t, n=d_out, k=r, dtype=dtype)]
        bwd += [GemmSpec(m=t, n=r, k=d_out, dtype=dtype),  # du = dy @ B^T
                GemmSpec(m=r, n=d_out, k=t, dtype=dtype),  # dB = u^T @ dy
                GemmSpec(m=t, n=d_in, k=r, dtype=dtype),  # dx += du @ A^T
                GemmSpec(m=d_in, n=r, k=t, dtype=dtype)]  # dA = x^T @ du
    return fwd, bwd


def frozen_base_block(block, adapter_fwd: Sequence[GemmSpec], adapter_bwd: Sequence[GemmSpec]):
    """The hook: ``block`` (a `simulate.graph.Block`) with the base weight-gradient GEMMs
    (``*.wgrad``) removed and the adapter GEMMs appended to forward and backward."""
    from simulate.graph import Block, Node

    bwd = tuple(n for n in block.bwd if not n.name.endswith(".wgrad"))
    return Block(name=f"{block.name}+lora",
                 fwd=block.fwd + tuple(Node(name=f"lora.fwd{i}", op=op)
                                       for i, op in enumerate(adapter_fwd)),
                 bwd=bwd + tuple(Node(name=f"lora.bwd{i}", op=op)
                                 for i, op in enumerate(adapter_bwd)))
