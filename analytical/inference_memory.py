# SPDX-License-Identifier: Apache-2.0
"""Inference memory per GPU: weight bytes (with quantisation scales), KV-cache bytes and how
many KV tokens fit after weights and reserves. Training memory lives in `analytical.memory`."""

from __future__ import annotations

import math

from analytical.activations import check_tensor_parallel, local_kv_heads
from analytical.dtypes import DType
from analytical.errors import InfeasibleError, SpecError
from analytical.hardware import HardwareSpec
from analytical.model_spec import ModelSpec
from analytical.stage import stage_params

__all__ = ["QUANT_SCALE_BYTES_PER_PARAM", "kv_cache_bytes", "kv_cache_bytes_per_token",
           "kv_cache_capacity_tokens", "weight_bytes"]

# Extra bytes per quantised weight for scales/zero points. int4: group size 128 with an fp16 scale
# and a packed 4-bit zero point per group (AutoGPTQ/AutoAWQ layout) = 2.5 B / 128 weights.
# fp4: NVFP4, one fp8 (e4m3) scale per 16 elements (NVIDIA Blackwell NVFP4). int8/fp8 use
# per-channel or per-tensor scales, negligible.
INT4_GROUP_SIZE = 128
QUANT_SCALE_BYTES_PER_PARAM: dict[DType, float] = {
    DType.INT4: 2.5 / INT4_GROUP_SIZE,
    DType.FP4: 1.0 / 16,
}


def _high_precision(dtype: DType) -> DType:
    """Embeddings, LM head, norms and routers stay in bf16 under weight quantisation."""
    return dtype if dtype.bytes >= 2 else DType.BF16


def weight_bytes(model: ModelSpec, *, dtype: DType, tp: int = 1, pp: int = 1, ep: int = 1,
                 etp: int = 0) -> float:
    """Inference weight bytes on the most-loaded GPU (first or last pipeline stage).

    Transformer-block linear weights take ``dtype`` plus its scale overhead
    (`QUANT_SCALE_BYTES_PER_PARAM`; int4 = 0.5 B + group-128 scales); embeddings, LM head, norms
    and routers stay in bf16 when ``dtype`` is narrower than 2 bytes.
    """
    linear_bytes = dtype.bytes + QUANT_SCALE_BYTES_PER_PARAM.get(dtype, 0.0)
    other_bytes = _high_precision(dtype).bytes
    best = 0.0
    for stage_index in {0, pp - 1}:
        stage = stage_params(model, tp=tp, pp=pp, ep=ep, stage=stage_index, etp=etp)
        total = stage.linear * linear_bytes + (stage.total - stage.linear) * other_bytes
        best = max(best, total)
    return best


def kv_cache_bytes(model: ModelSpec, *, tokens: int, kv_dtype: DType, tp: int = 1, pp: int = 1) -> float:
    """KV-cache bytes per GPU for ``tokens`` cached tokens (all sequences together).

    Per layer and token: 2 * kv_heads * head_dim elements, kv heads split over tp (one per rank,
    replicated, when tp > kv_heads); MLA caches the compressed latent (kv_lora_rank +
    qk_rope_head_dim), replicated on every TP rank. Layers of the most-loaded stage:
    ceil(layers / pp).
    """
    if tokens < 0:
        raise SpecError("tokens", f"must be >= 0, got {tokens}")
    return tokens * kv_cache_bytes_per_token(model, kv_dtype=kv_dtype, tp=tp, pp=pp)


def kv_cache_bytes_per_token(model: ModelSpec, *, kv_dtype: DType, tp: int = 1, pp: int = 1) -> float:
    """KV-cache bytes per token per GPU (see `kv_cache_bytes`)."""
    check_tensor_parallel(model, tp)
    if isinstance(pp, bool) or not isinstance(pp, int) or pp < 1:
        raise SpecError("parallel.pp", f"must be an integer >= 1, got {pp!r}")
    if model.is_mla:
        per_layer = model.kv_lora_rank + model.qk_rope_head_dim
    else:
        per_layer = 2 * local_kv_heads(model.kv_heads, tp) * model.head_dim
    return per_layer * kv_dtype.bytes * math.ceil(model.layers / pp)


def kv_cache_capacity_tokens(model: ModelSpec, hw: HardwareSpec, *, weight_dtype: DType, kv_dtype: DType,
                             tp: int = 1, pp: int = 1, ep: int = 1,
                             activation_reserve_bytes: float = 0.0,
                             runtime_reserve_fraction: float = 0.1) -> int:
    """KV tokens that fit on the most-loaded GPU after weights and reserves.

    ``runtime_reserve_fraction`` of HBM is left to the runtime (vLLM's default
    gpu_memory_utilization 0.9 leaves 0.1); ``activation_reserve_bytes`` is the forward pass's
    peak workspace. Raises InfeasibleError, with the numbers, when nothing is left.
    """
    if not 0.0 <= runtime_reserve_fraction < 1.0:
        raise SpecError("runtime_reserve_fraction",
                        f"must be in [0, 1), got {runtime_reserve_fraction}")
    if activation_reserve_bytes < 0:
        raise SpecError("activation_reserve_bytes", f"must be >= 0, got {activation_reserve_bytes}")
    usable = hw.memory_bytes * (1.0 - runtime_reserve_fraction)
    weights = weight_bytes(model, dtype=weight_dtype, tp=tp, pp=pp, ep=ep)
    free = usable - weights - activation_reserve_bytes
    if free <= 0:
        raise InfeasibleError(
            f"{model.name} does not fit on {hw.name} with tp={tp}, pp={pp}, ep={ep}: weights "
            f"{weights / 2**30:.1f} GiB + reserve {activation_reserve_bytes / 2**30:.1f} GiB > "
            f"usable {usable / 2**30:.1f} GiB",
            details={"weights_bytes": weights, "usable_bytes": usable,
                     "activation_reserve_bytes": activation_reserve_bytes})
    return int(free // kv_cache_bytes_per_token(model, kv_dtype=kv_dtype, tp=tp, pp=pp))
