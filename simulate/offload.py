# SPDX-License-Identifier: Apache-2.0
"""Training offload (`training.offload: {weights, activations, optimizer}`) applied to a
layout: the GPU-resident memory and the layer passes stretched by the host-link transfers
they cannot hide (model and sources: `analytical.offload`). The host link is the hardware
file's ``interconnect.pcie`` (PCIe, or NVLink-C2C on Grace parts). Shared by `run_training`
and the search's evaluator, so both give the same numbers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from analytical.activations import activation_bytes_per_layer
from analytical.hardware import HardwareSpec
from analytical.memory import TrainingMemory, model_states_bytes
from analytical.offload import (
    LayerBytes,
    activation_share,
    exposed_s,
    offloaded_memory,
    transfer_bytes,
)
from analytical.parallel import Recompute
from analytical.stage import stage_params
from simulate.costs import BlockCost, PassCost
from simulate.scenario import TrainingSpec

__all__ = ["layer_bytes", "offload_memory", "offload_costs"]

NOT_LAYERS = ("embedding", "head")  # `simulate.training._blocks` keys that are not layers


_LAYER_BYTES: dict[tuple[Any, ...], tuple[Any, tuple[LayerBytes, int]]] = {}
_LAYER_BYTES_MAX = 100_000  # entries kept (the search asks for each layout shape once)


def layer_bytes(model, t: TrainingSpec) -> tuple[LayerBytes, int]:
    """The largest layer of the first stage on one GPU (`analytical.offload.LayerBytes`) and
    the layers that stage holds (cached per model and layout shape)."""
    key = (id(model), t.parallel, t.micro_batch, t.seq_len, t.recompute, t.attention,
           t.framework)
    hit = _LAYER_BYTES.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    if len(_LAYER_BYTES) >= _LAYER_BYTES_MAX:
        _LAYER_BYTES.clear()
    out = _layer_bytes(model, t)
    _LAYER_BYTES[key] = (model, out)  # the model is kept so its id is not reused
    return out


def _layer_bytes(model, t: TrainingSpec) -> tuple[LayerBytes, int]:
    par = t.parallel
    stage = stage_params(model, tp=par.tp, pp=par.pp, vpp=par.vpp, ep=par.ep, stage=0,
                         etp=par.etp, split=par.pipeline_split)
    w, g, o = model_states_bytes(stage.largest_layer, zero_stage=par.zero_stage,
                                 shard=par.shard_group,
                                 grad_dtype_bytes=t.grad_buffer_bytes,
                                 state_dtype_bytes=float(t.optimizer_state_dtype.bytes))
    kw: dict[str, Any] = dict(micro_batch=t.micro_batch, seq_len=t.seq_len,
                              flash_attention=t.fused_attention,
                              dropout=model.norm == "layernorm")
    kinds = set(stage.layer_is_moe) or {False}
    stored = max(activation_bytes_per_layer(model, par, recompute=t.recompute, moe_layer=k, **kw)
                 for k in kinds)
    full = max(activation_bytes_per_layer(model, par, recompute=Recompute.NONE, moe_layer=k,
                                          **kw) for k in kinds)
    return LayerBytes(weights=w, gradients=g, optimizer=o, activations=stored,
                      working=full - stored), len(stage.layer_is_moe)


def offload_memory(model, t: TrainingSpec, mem: TrainingMemory) -> TrainingMemory:
    """``mem`` as the GPU holds it under ``t.offload`` (unchanged without offload)."""
    if not t.offload.any:
        return mem
    layer, layers = layer_bytes(model, t)
    return offloaded_memory(mem, layer, layers, t.offload)


def offload_costs(costs: dict[Any, BlockCost], model, t: TrainingSpec, hw: HardwareSpec
                  ) -> dict[Any, BlockCost]:
    """Layer block costs with each pass stretched by its host transfer's exposed part (the
    transfer counted as roofline engine time); embedding and head are not offloaded. Under a
    partial activation offload a layer block's pass is the mean over the stage's layers: the
    offloading share with its activations' transfer, the rest without."""
    if not t.offload.any:
        return costs
    layer, layers = layer_bytes(model, t)
    share = activation_share(t.offload, layers)
    moving = transfer_bytes(layer, t.offload)  # (forward, backward) bytes per layer
    staying = transfer_bytes(layer, replace(t.offload, activations=False, activation_layers=0))
    link = hw.pcie
    out = dict(costs)
    for key, c in costs.items():
        if key not in NOT_LAYERS:  # layer blocks: keyed by (MoE, attention kind)
            out[key] = BlockCost(fwd=_stretch(c.fwd, moving[0], staying[0], share, link),
                                 bwd=_stretch(c.bwd, moving[1], staying[1], share, link))
    return out


def _stretch(p: PassCost, moving: float, staying: float, share: float, link) -> PassCost:
    """``p`` with ``share`` of the layers moving ``moving`` bytes and the rest ``staying``."""
    if moving <= 0 and staying <= 0:
        return p
    elapsed, engine = 0.0, 0.0
    for size, weight in ((moving, share), (staying, 1.0 - share)):
        if size > 0 and weight > 0:
            transfer = link.latency_s + size / link.bandwidth_bytes_per_s
            elapsed += weight * exposed_s(transfer, p.elapsed_s)
            engine += weight * transfer
    engine_s = dict(p.engine_s)
    engine_s["roofline"] = engine_s.get("roofline", 0.0) + engine
    return PassCost(elapsed_s=p.elapsed_s + elapsed, compute_s=p.compute_s, engine_s=engine_s)
