# SPDX-License-Identifier: Apache-2.0
"""What the optimizer keeps per trainable parameter, and how ZeRO shards it.

One place for the bytes of model states (weights, gradients, optimizer moments, master copy),
read by the training memory model (`analytical.memory`, which re-exports `model_states_bytes`)
for its totals and for the second moment torchtitan's optimizer step copies.

The state dtype (``state_dtype_bytes``) is apex DistributedFusedAdam's ``dtype``, "datatype for
optimizer state (default: torch.float32)", which NeMo's ``optim.dtype`` sets: the master copy
(``store_params``, default True: "a distributed copy of the parameters as optimizer state") and
both moments are allocated in it (``params_shard``, ``exp_avg_shard``, ``exp_avg_sq_shard``;
NVIDIA/apex apex/contrib/optimizers/distributed_fused_adam.py at f9f19d5c, 2024-07-23, unchanged
at 6424da3b), so bf16 keeps 2 + 2 + 2 = 6 bytes per parameter instead of 12.
"""

from __future__ import annotations

from analytical.errors import SpecError, UnknownNameError

__all__ = ["MASTER_WEIGHT_BYTES", "OPTIMIZER_STATE_BYTES", "SECOND_MOMENT_BYTES",
           "model_states_bytes", "second_moment_bytes"]

# fp32 optimizer state bytes per trainable parameter, without the master copy (scaled by
# state_dtype_bytes / 4 for a narrower state dtype).
OPTIMIZER_STATE_BYTES: dict[str, float] = {
    "adam": 8.0,  # momentum + variance (Kingma & Ba 2015), fp32
    "adamw": 8.0,
    "sgd": 4.0,  # momentum
}
# Of those, the fp32 second moment (``exp_avg_sq``), the operand of foreach AdamW's sqrt temporary.
SECOND_MOMENT_BYTES: dict[str, float] = {"adam": 4.0, "adamw": 4.0}
MASTER_WEIGHT_BYTES = 4.0  # fp32 master copy kept when weights are stored in fewer bytes


def _master_bytes(param_dtype_bytes: float, state_dtype_bytes: float) -> float:
    """The master copy per parameter, in the state dtype: kept only when weights are stored in
    fewer than 4 bytes (apex's ``store_params`` keeps it even when the state is as narrow)."""
    return state_dtype_bytes if param_dtype_bytes < MASTER_WEIGHT_BYTES else 0.0


def _state_bytes(optimizer: str, param_dtype_bytes: float, state_dtype_bytes: float) -> float:
    """Optimizer bytes per parameter: the moments and the master copy in the state dtype."""
    moments = OPTIMIZER_STATE_BYTES[optimizer] * state_dtype_bytes / MASTER_WEIGHT_BYTES
    return moments + _master_bytes(param_dtype_bytes, state_dtype_bytes)


def model_states_bytes(params: float, *, zero_stage: int, shard: int,
                       param_dtype_bytes: float = 2.0, grad_dtype_bytes: float = 2.0,
                       optimizer: str = "adam", state_dtype_bytes: float = 4.0
                       ) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU for ``params`` trainable parameters.

    Optimizer bytes are the moments plus an fp32 master copy when weights are stored in fewer
    than 4 bytes (mixed precision Adam: 12 per parameter; 6 with a bf16 ``state_dtype_bytes``
    of 2). ZeRO stage 1 divides the optimizer
    bytes by ``shard``, stage 2 also the gradients, stage 3 also the weights.
    """
    if optimizer not in OPTIMIZER_STATE_BYTES:
        raise UnknownNameError("optimizer", optimizer, list(OPTIMIZER_STATE_BYTES))
    if zero_stage not in (0, 1, 2, 3):
        raise SpecError("parallel.zero", f"must be 0, 1, 2 or 3, got {zero_stage!r}")
    weights = params * param_dtype_bytes
    grads = params * grad_dtype_bytes
    states = params * _state_bytes(optimizer, param_dtype_bytes, state_dtype_bytes)
    return (weights / shard if zero_stage >= 3 else weights,
            grads / shard if zero_stage >= 2 else grads,
            states / shard if zero_stage >= 1 else states)


def second_moment_bytes(optimizer_bytes: float, *, optimizer: str,
                        param_dtype_bytes: float, state_dtype_bytes: float = 4.0) -> float:
    """The second-moment share of ``optimizer_bytes`` (`model_states_bytes`'s third value, same
    sharding and state dtype): 0 for an optimizer without one."""
    per_param = _state_bytes(optimizer, param_dtype_bytes, state_dtype_bytes)
    moment = SECOND_MOMENT_BYTES.get(optimizer, 0.0) * state_dtype_bytes / MASTER_WEIGHT_BYTES
    return optimizer_bytes * moment / per_param
