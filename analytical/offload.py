# SPDX-License-Identifier: Apache-2.0
"""Offload of weights, activations and optimizer state to host memory during training: what
stays on the GPU, and what crosses the host link per layer and micro-batch.

The model is Calculon's (Isaev et al., SC'23; calculon/llm/llm.py at the snapshot in
``../shared/peers/calculon``: ``_get_mem_cap_reqs``, ``_get_fw_offload_size``,
``_get_bw_offload_size`` and the per-block offload overhead in ``_compute_batch_stats``),
itself after ZeRO-Offload (Ren et al., USENIX ATC'21: optimizer state and gradients on the
host) and ZeRO-Infinity (Rajbhandari et al., SC'21: parameters streamed layer by layer and
prefetched while the previous layer computes):
- layers stream through the GPU, so each offloaded state keeps `RESIDENT_LAYERS` layers' worth
  on the GPU (the layer computing and the one in flight); offloaded activations keep the
  working set of the layer in backward (what recompute re-creates) plus that many layers'
  stored activations;
- optimizer offload moves the optimizer state and the weight gradients (Calculon: one
  unsharded and one sharded layer of gradients stay);
- per layer and micro-batch the forward moves max(weights, stored activations) (prefetch in,
  activations out: the link's two directions) and the backward weights + activations +
  optimizer state; the transfer hides behind the layer's own pass and only its excess is
  exposed (`exposed_s`);
- activation offload may cover only some of a stage's layers (``activation_layers``):
  Megatron-Core's ``cpu_offloading_num_layers``, which Megatron-Bridge's performance presets set
  with ``cpu_offloading_weights = False`` and no recompute (Llama 3 70B on GB200 / GB300:
  40 / 20 of 80 layers, scripts/performance/configs/llama/llama3_workload_base_configs.py and
  utils/overrides.py `_set_recompute_overrides` at 00b7660): the other layers keep their
  activations on the GPU and move nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from analytical.errors import SpecError
from analytical.memory import TrainingMemory

__all__ = ["Offload", "RESIDENT_LAYERS", "LayerBytes", "offloaded_memory", "transfer_bytes",
           "activation_share", "exposed_s"]

RESIDENT_LAYERS = 2  # the layer computing and the one being prefetched / written back


@dataclass(frozen=True, slots=True, kw_only=True)
class Offload:
    """Which training states live in host memory (`training.offload` in a scenario)."""

    weights: bool = False
    activations: bool = False
    optimizer: bool = False
    activation_layers: int = 0  # layers whose activations go to the host; 0: every layer

    def __post_init__(self) -> None:
        if self.activation_layers < 0:
            raise SpecError("training.offload.activation_layers",
                            f"must be >= 0, got {self.activation_layers}")
        if self.activation_layers and not self.activations:
            raise SpecError("training.offload.activation_layers", "needs activations: true")

    @property
    def any(self) -> bool:
        return self.weights or self.activations or self.optimizer

    def activation_layers_of(self, layers: int) -> int:
        """How many of a stage's ``layers`` offload their activations."""
        if not self.activations:
            return 0
        return min(layers, self.activation_layers) if self.activation_layers else layers


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerBytes:
    """One layer on one GPU: its weights, weight gradients and optimizer state as stored
    (after ZeRO sharding), and what one micro-batch stores for backward (``activations``)
    and re-creates under recompute (``working``)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    working: float


def offloaded_memory(mem: TrainingMemory, layer: LayerBytes, layers: int,
                     offload: Offload) -> TrainingMemory:
    """The GPU-resident part of ``mem`` (a stage of ``layers`` layers) under ``offload``: an
    offloaded state keeps `RESIDENT_LAYERS` layers, never more than it had."""
    keep = min(1.0, RESIDENT_LAYERS / max(1, layers))
    act = mem.activations_bytes
    if offload.activations:
        floor = min(act, RESIDENT_LAYERS * layer.activations + layer.working)
        moved = offload.activation_layers_of(layers)  # RESIDENT_LAYERS of them stay in flight
        act = floor if moved >= layers else max(
            floor, act - max(0, moved - RESIDENT_LAYERS) * layer.activations)
    states = keep if offload.optimizer else 1.0  # gradients, states and the step's temporaries
    return replace(
        mem, weights_bytes=mem.weights_bytes * keep if offload.weights else mem.weights_bytes,
        gradients_bytes=mem.gradients_bytes * states, optimizer_bytes=mem.optimizer_bytes * states,
        gradients_freed_bytes=mem.gradients_freed_bytes * states,
        optimizer_step_bytes=mem.optimizer_step_bytes * states, activations_bytes=act)


def transfer_bytes(layer: LayerBytes, offload: Offload) -> tuple[float, float]:
    """Bytes one layer moves over the host link in its forward and in its backward pass of
    one micro-batch (Calculon's ``_get_fw_offload_size`` / ``_get_bw_offload_size``)."""
    w = layer.weights if offload.weights else 0.0
    a = layer.activations if offload.activations else 0.0
    o = layer.optimizer if offload.optimizer else 0.0
    return max(w, a), w + a + o


def activation_share(offload: Offload, layers: int) -> float:
    """The fraction of a stage's layers whose activations cross the host link."""
    return offload.activation_layers_of(layers) / max(1, layers)


def exposed_s(transfer_s: float, pass_s: float) -> float:
    """What a transfer adds to the pass it overlaps: its excess over the pass."""
    return max(0.0, transfer_s - pass_s)
