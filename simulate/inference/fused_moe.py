# SPDX-License-Identifier: Apache-2.0
"""An engine's fused MoE kernel priced from a measured per-layer table.

SGLang runs a block-scaled fp8 MoE layer on Blackwell as one FlashInfer call
(``trtllm_fp8_block_scale_moe``: routing, permutation, both expert GEMMs, the activation and the
finalize inside; the input's per-token-group quantization just before it, in Python:
``python/sglang/srt/layers/quantization/fp8.py`` ``apply_with_router_logits`` @ v0.5.6.post1).
NVIDIA AIConfigurator times exactly that layer (router logits given, so the router GEMM, the
shared expert and the all-reduce are outside it). `FusedMoeTable` holds those times per MoE shape
and (expert TP, EP) layout; `DenseCost` drops the routed-expert ops the kernel replaces
(`layer_ops.MOE_FUSED_NODES`) and prices one `FusedMoeOp` per MoE layer instead, where the
table has the model's shape and layout and the token count lies inside its measured range.
"""

from __future__ import annotations

import csv
import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.layer_spec import Sharding
from analytical.model import ModelSpec
from simulate.inference.fp8_gemm import file_fingerprint

__all__ = ["FusedMoeOp", "FusedMoeTable", "load_fused_moe_table"]

Shape = tuple[int, int, int, int, int, int]  # hidden, inter, top_k, experts, expert tp, ep
Curve = tuple[tuple[int, float], ...]  # (tokens, seconds), tokens ascending


@dataclass(frozen=True, slots=True, kw_only=True)
class FusedMoeOp:
    """One MoE layer's fused routed-expert kernel on one rank (what `DenseCost` reports)."""

    tokens: int
    hidden: int
    inter: int
    experts: int
    top_k: int
    family = "fused_moe"


@dataclass(frozen=True, slots=True, kw_only=True)
class FusedMoeTable:
    """Measured seconds of one fused MoE layer per shape, for models whose weights are
    ``dtype``; empty: no table (today's per-op pricing)."""

    dtype: DType = DType.FP8
    curves: tuple[tuple[Shape, Curve], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.curves)

    def curve(self, model: ModelSpec, shard: Sharding, weight_dtype: DType) -> Curve | None:
        """The measured curve of this model's MoE layer on this layout, or None."""
        if not self.curves or not model.is_moe or weight_dtype != self.dtype:
            return None
        key = (model.hidden, model.moe_ffn_hidden, model.top_k, model.num_experts,
               shard.expert_tp, shard.ep)
        return dict(self.curves).get(key)

    def seconds(self, model: ModelSpec, shard: Sharding, weight_dtype: DType,
                tokens: int) -> float | None:
        """One layer's time at ``tokens`` (linear between measured token counts), or None
        where the shape, layout or token count is outside the table."""
        curve = self.curve(model, shard, weight_dtype)
        if curve is None or not curve[0][0] <= tokens <= curve[-1][0]:
            return None
        return float(np.interp(tokens, [t for t, _ in curve], [s for _, s in curve]))


@functools.cache
def load_fused_moe_table(path: Path, *, fingerprint: str, kernel: str, distribution: str,
                         dtype: str = "fp8") -> FusedMoeTable:
    """The ``kernel`` rows of one routing ``distribution`` from a CSV with columns kernel,
    hidden, inter, topk, experts, tp, ep, distribution, tokens, seconds. The file must match
    ``fingerprint`` (a changed measurement is a changed preset)."""
    if not path.is_file():
        raise SpecError("fused_moe_table.file", f"{path} not found")
    if (got := file_fingerprint(path)) != fingerprint:
        raise SpecError("fused_moe_table.file",
                        f"{path.name} has fingerprint {got}, the preset pins {fingerprint}")
    curves: dict[Shape, list[tuple[int, float]]] = defaultdict(list)
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["kernel"] == kernel and row["distribution"] == distribution:
                key = tuple(int(row[c]) for c in ("hidden", "inter", "topk", "experts", "tp",
                                                  "ep"))
                curves[key].append((int(row["tokens"]), float(row["seconds"])))  # type: ignore[index]
    if not curves:
        raise SpecError("fused_moe_table.kernel",
                        f"{path.name} has no {kernel} rows for distribution {distribution}")
    return FusedMoeTable(dtype=DType(dtype),
                         curves=tuple((k, tuple(sorted(v))) for k, v in sorted(curves.items())))
