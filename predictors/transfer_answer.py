# SPDX-License-Identifier: Apache-2.0
"""What the engine chain asks of the transfer predictor: seconds for the ops it may answer,
and why it declines the others (a dtype, kind or phase none of its training rows held, a
vendor or device kind none of its GPUs had: `TransferModel.outside_domain`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from analytical.errors import LlmsimError
from analytical.hardware import HardwareSpec
from analytical.ops import OpSpec
from predictors.transfer_features import TRANSFER_FAMILIES

# The families whose transfer answers the engine chain takes. A GEMM is a cuBLAS/cuBLASLt kernel
# in every framework and every stack that timed the rows, so what the model learned from other
# GPUs is what the framework runs. Attention and memory-bound ops are not: their time is the
# kernel the framework picks (FlashAttention-2 in torchtitan and llm-foundry, cuDNN fused
# attention in Megatron-Core; fused or eager-composite norms), which `simulate.efficiency`
# models on the roofline per framework, while these models learned the kernels their stacks
# timed (TensorRT-LLM's FMHA for attention, asked as `trtllm`; eager PyTorch composites and
# Sarathi-Serve's kernels for memory). Collectives stay with the link model, which scored
# better leave-one-GPU-out. Measured in docs/validation/transfer-effects.md.
CHAIN_FAMILIES = frozenset({"gemm"}).intersection(TRANSFER_FAMILIES)


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferAnswer:
    loaded: bool  # a transfer model for the family exists
    stack: str = ""  # the stack it is asked as (`TransferModel.default_stack`): whose timing
    seconds: dict[str, float] = field(default_factory=dict)  # op key -> latency
    declined: dict[str, str] = field(default_factory=dict)  # op key -> why


def transfer_answers(family: str, ops: Sequence[OpSpec], hw: HardwareSpec, *,
                     tracking_uri: str | None = None) -> TransferAnswer:
    """Ask the champion transfer model of ``family``; no model, or a family the chain does not
    take (`CHAIN_FAMILIES`): an empty, unloaded answer."""
    if family not in CHAIN_FAMILIES:
        return TransferAnswer(loaded=False)
    from predictors.tracking import NoChampionError, say_unusable
    from predictors.transfer_tracking import load_transfer, registered_transfer_name

    try:
        model = load_transfer(family, tracking_uri=tracking_uri)
    except NoChampionError:  # none registered: the chain falls through, by design
        return TransferAnswer(loaded=False)
    except Exception as exc:  # noqa: BLE001 - registered but unusable: said, then skipped
        say_unusable(registered_transfer_name(family), exc)
        return TransferAnswer(loaded=False)
    asked, declined = [], {}
    for op in ops:
        why = model.outside_domain(op, hw)
        if why is None:
            asked.append(op)
        else:
            declined[op.key] = why
    try:
        values = model.predict(asked, hw)
    except (LlmsimError, ValueError):
        return TransferAnswer(loaded=True, declined=declined)
    seconds = {op.key: float(v) for op, v in zip(asked, np.asarray(values, dtype=float),
                                                  strict=True) if np.isfinite(v) and v > 0}
    return TransferAnswer(loaded=True, stack=model.default_stack, seconds=seconds,
                          declined=declined)
