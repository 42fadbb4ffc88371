# SPDX-License-Identifier: Apache-2.0
"""The phases of one training step and what PyTorch's caching allocator reserves beyond them.

A step's allocated peak is the larger of two phases (the backward lies between them: it frees a
layer's activations as it creates that layer's gradients, so it peaks at one of its ends):

- forward / loss: weights, optimizer states, the stored activations and the loss working set,
  plus the gradients only where they outlive the step (a framework that zeroes them in place,
  or gradient accumulation over micro-batches);
- optimizer step: weights, gradients, optimizer states and the step's temporaries; no
  activations.

Reserved memory is what the caching allocator holds from the driver (torch.cuda
``reserved_bytes``, the number torchtitan logs). Rules, from c10/cuda/CUDACachingAllocator.cpp:

- a free block is reused only by a request of the stream that allocated it (``get_free_block``
  returns false when ``(*it)->stream != p.stream()``), so memory a side stream allocated and freed
  stays reserved while the default stream peaks;
- a request takes the smallest free block that fits (best fit, ``BlockComparatorSize``) and a
  segment never merges with another, so a freed block smaller than every later request of its
  phase stays reserved and unused;
- before raising out-of-memory the allocator returns its unused cached segments to the driver
  and retries (``release_cached_blocks`` in ``malloc``), so what must fit is the allocated peak:
  reserved-but-free memory is not an OOM by itself.

Block rounding (512 B blocks, 2 MiB segments; 20 MiB segments for 1-10 MiB requests) costs
under 2 MiB per large tensor and is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analytical.parallel import ParallelConfig
    from analytical.stage import StageParams

__all__ = [
    "LOSS_FREE_BLOCK_BYTES",
    "TrainingMemory",
    "adam_step_temporary_bytes",
    "reserved_bytes",
    "torchtitan_phases",
]

# torchtitan's loss cross_entropy(pred.float(), labels) (train.py at 9dec370) allocates, per
# logit, the bf16 logits (2 B), their fp32 copy (4 B) and log_softmax's fp32 output (4 B) in the
# forward; in the backward nll_loss's fp32 gradient (4 B, best fit into the freed fp32 copy's
# block) and log_softmax's fp32 input gradient (4 B) while the saved output is live: the 12 B
# peak. The freed bf16 logits block is smaller than every request of that peak, so it stays
# reserved and unused: 2 B per logit over the allocated peak.
LOSS_FREE_BLOCK_BYTES = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingMemory:
    """Bytes on the most-loaded GPU (first pipeline stage) during training, by phase of the
    step (`analytical.step_peak`): ``allocated_bytes`` must fit; ``total_bytes`` adds what the
    caching allocator reserves beyond it (torch.cuda's reserved peak)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float  # master weights + optimizer moments
    activations_bytes: float  # all in-flight micro-batches, plus the recompute working set
    other_bytes: float  # ZeRO-3/FSDP gathered-weight buffers
    # gradients freed before the forward (zero_grad(set_to_none=True), no accumulation)
    gradients_freed_bytes: float = 0.0
    optimizer_step_bytes: float = 0.0  # temporaries of the optimizer step
    allocator_bytes: float = 0.0  # caching allocator: reserved over the allocated peak

    @property
    def forward_bytes(self) -> float:
        """The forward / loss phase: everything but the freed gradients."""
        return (self.weights_bytes + self.gradients_bytes - self.gradients_freed_bytes
                + self.optimizer_bytes + self.activations_bytes + self.other_bytes)

    @property
    def step_bytes(self) -> float:
        """The optimizer step: states, gradients and the step's temporaries."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.optimizer_step_bytes)

    @property
    def allocated_bytes(self) -> float:
        return max(self.forward_bytes, self.step_bytes)

    @property
    def total_bytes(self) -> float:
        return self.allocated_bytes + self.allocator_bytes


def adam_step_temporary_bytes(second_moment_bytes: float, *, foreach: bool) -> float:
    """Temporaries of one Adam/AdamW step beside its states.

    torch.optim's foreach implementation (``_multi_tensor_adam`` in torch/optim/adam.py, which
    AdamW runs since torch 2.6, and ``_multi_tensor_adamw`` before it) updates the moments and
    parameters in place but takes ``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)``: a
    full copy of the second moments. Fused kernels (``fused=True``; Apex/Transformer Engine
    FusedAdam in Megatron-LM, NeMo and DeepSpeed) compute it in registers: none.
    ``clip_grad_norm_`` (foreach) adds one scalar per tensor and scales the gradients in place.
    """
    return second_moment_bytes if foreach else 0.0


def reserved_bytes(*, forward_bytes: float, step_bytes: float, side_gradients_bytes: float = 0.0,
                   forward_side_gradients_bytes: float = 0.0, side_buffers_bytes: float = 0.0,
                   loss_free_bytes: float = 0.0) -> float:
    """Reserved peak of a PyTorch step whose phases allocate ``forward_bytes`` and
    ``step_bytes``.

    PyTorch FSDP2 allocates the reduce-scatter output, of which the sharded gradients are views,
    in its reduce-scatter stream (``foreach_reduce``, torch/distributed/fsdp/_fully_shard/
    _fsdp_collectives.py): ``side_gradients_bytes``, of which ``forward_side_gradients_bytes``
    are still live in the forward; at world size > 1 it allocates the all-gather buffers in its
    copy-in stream (``foreach_all_gather``): ``side_buffers_bytes``. The default stream's own
    segments cover the larger of its two phases (the forward's with the loss block it cannot
    reuse, ``loss_free_bytes``); the side streams' segments come on top, used or not.
    """
    forward_default = forward_bytes - forward_side_gradients_bytes + loss_free_bytes
    step_default = step_bytes - side_gradients_bytes
    return max(forward_default, step_default) + side_gradients_bytes + side_buffers_bytes


def torchtitan_phases(mem: TrainingMemory, parallel: ParallelConfig, stage: StageParams, *,
                      num_microbatches: int, second_moment_bytes: float,
                      param_dtype_bytes: float,
                      gathered_layers: int, loss_logits: float) -> TrainingMemory:
    """torchtitan's step phases and reserved memory (rules above); ``second_moment_bytes``: this
    GPU's AdamW ``exp_avg_sq`` (`analytical.optimizer_states.second_moment_bytes`, 0 for SGD);
    ``loss_logits``: logits this GPU's eager fp32 loss holds (0 with a compiled loss or no LM
    head).

    train.py at 9dec370 calls ``optimizers.zero_grad()`` (set_to_none) before the forward, so
    with one micro-batch and no pipeline no gradient exists in the forward; build_optimizers
    makes AdamW with ``foreach=not fused`` (``--optimizer.fused`` off by default).
    """
    freed = mem.gradients_bytes if parallel.pp == 1 and num_microbatches == 1 else 0.0
    mem = replace(mem, gradients_freed_bytes=freed,
                  optimizer_step_bytes=adam_step_temporary_bytes(second_moment_bytes,
                                                                 foreach=True))
    fsdp = parallel.zero_stage >= 3
    side = mem.gradients_bytes if fsdp else 0.0
    buffers = (gathered_layers * stage.largest_layer * param_dtype_bytes
               if fsdp and parallel.shard_group > 1 else 0.0)
    reserved = reserved_bytes(forward_bytes=mem.forward_bytes, step_bytes=mem.step_bytes,
                              side_gradients_bytes=side,
                              forward_side_gradients_bytes=side - freed if fsdp else 0.0,
                              side_buffers_bytes=buffers,
                              loss_free_bytes=LOSS_FREE_BLOCK_BYTES * loss_logits)
    return replace(mem, allocator_bytes=max(0.0, reserved - mem.allocated_bytes))
