# SPDX-License-Identifier: Apache-2.0
"""What the optimizer keeps per trainable parameter, and how ZeRO shards it.

One place for the bytes of model states (weights, gradients, optimizer moments, master copy),
read by the training memory model (`analytical.memory`, which re-exports `model_states_bytes`)
for its totals and for the second moment torchtitan's optimizer step copies.
"""

from __future__ import annotations

from analytical.errors import SpecError, UnknownNameError

__all__ = ["MASTER_WEIGHT_BYTES", "OPTIMIZER_STATE_BYTES", "SECOND_MOMENT_BYTES",
           "model_states_bytes", "second_moment_bytes"]

# fp32 optimizer state bytes per trainable parameter, without the master copy.
OPTIMIZER_STATE_BYTES: dict[str, float] = {
    "adam": 8.0,  # momentum + variance (Kingma & Ba 2015), fp32
    "adamw": 8.0,
    "sgd": 4.0,  # momentum
}
# Of those, the fp32 second moment (``exp_avg_sq``), the operand of foreach AdamW's sqrt temporary.
SECOND_MOMENT_BYTES: dict[str, float] = {"adam": 4.0, "adamw": 4.0}
MASTER_WEIGHT_BYTES = 4.0  # fp32 master copy kept when weights are stored in fewer bytes


def _master_bytes(param_dtype_bytes: float) -> float:
    """The fp32 master copy per parameter: kept only when weights are stored in fewer bytes."""
    return MASTER_WEIGHT_BYTES if param_dtype_bytes < MASTER_WEIGHT_BYTES else 0.0


def model_states_bytes(params: float, *, zero_stage: int, shard: int,
                       param_dtype_bytes: float = 2.0, grad_dtype_bytes: float = 2.0,
                       optimizer: str = "adam") -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU for ``params`` trainable parameters.

    Optimizer bytes are the moments plus an fp32 master copy when weights are stored in fewer
    than 4 bytes (mixed precision Adam: 12 per parameter). ZeRO stage 1 divides the optimizer
    bytes by ``shard``, stage 2 also the gradients, stage 3 also the weights.
    """
    if optimizer not in OPTIMIZER_STATE_BYTES:
        raise UnknownNameError("optimizer", optimizer, list(OPTIMIZER_STATE_BYTES))
    if zero_stage not in (0, 1, 2, 3):
        raise SpecError("parallel.zero", f"must be 0, 1, 2 or 3, got {zero_stage!r}")
    weights = params * param_dtype_bytes
    grads = params * grad_dtype_bytes
    states = params * (OPTIMIZER_STATE_BYTES[optimizer] + _master_bytes(param_dtype_bytes))
    return (weights / shard if zero_stage >= 3 else weights,
            grads / shard if zero_stage >= 2 else grads,
            states / shard if zero_stage >= 1 else states)


def second_moment_bytes(optimizer_bytes: float, *, optimizer: str,
                        param_dtype_bytes: float) -> float:
    """The second-moment share of ``optimizer_bytes`` (`model_states_bytes`'s third value, same
    sharding): 0 for an optimizer without one."""
    per_param = OPTIMIZER_STATE_BYTES[optimizer] + _master_bytes(param_dtype_bytes)
    return optimizer_bytes * SECOND_MOMENT_BYTES.get(optimizer, 0.0) / per_param
