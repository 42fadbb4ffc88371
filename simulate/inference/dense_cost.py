# SPDX-License-Identifier: Apache-2.0
"""A serving step's dense part and LM head, priced per token count (`DenseCost`), for
`simulate.inference.step_cost`'s tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from analytical.dtypes import DType
from analytical.hardware import HardwareSpec
from analytical.model import ModelSpec
from analytical.ops import GemmSpec, OpSpec
from simulate.costs import add_engine_time
from simulate.engines import Estimator
from simulate.inference.fp8_gemm import Fp8GemmRatios
from simulate.inference.fused_moe import FusedMoeOp, FusedMoeTable
from simulate.inference.graph_replay import EngineKernels
from simulate.inference.layer_ops import Fusions, LoraSpec, Sharding, lm_head_ops, step_ops
from simulate.sustained import sustained_floor_s

__all__ = ["DenseCost"]


class DenseCost:
    """Exact time of a step's dense part and LM head per token count, memoised, with the
    seconds each engine answered. With ``kernels`` (a serving engine) each op is priced as the
    engine runs it (`simulate.inference.graph_replay`); None: as measured.

    With ``hw``, GEMMs get training's power-limit ceiling (`simulate.sustained`), as a long
    prefill runs them back to back; an fp8 GEMM priced as bf16 x `Fp8GemmRatios` takes the
    capped bf16 x the ratio, one priced as fp8 (a TensorRT-LLM store row) the fp8 ceiling.

    With ``fused_moe`` covering the model's MoE shape, layout and the token count, each MoE
    layer's routed experts are one `FusedMoeOp` at the table's measured time (counted as the
    measurement, "store"), in place of the ops that kernel replaces."""

    def __init__(self, model: ModelSpec, shard: Sharding, weight_dtype: DType,
                 estimator: Estimator, lora: LoraSpec | None, *, fusions: Fusions | None = None,
                 kernels: EngineKernels | None = None,
                 fp8_vs_bf16: Fp8GemmRatios = Fp8GemmRatios(), hw: HardwareSpec | None = None,
                 fused_moe: FusedMoeTable = FusedMoeTable()) -> None:
        self._args = (model, shard, weight_dtype, lora)
        self._fusions = fusions
        self._estimator = estimator
        self._kernels = kernels
        self._fp8_vs_bf16 = fp8_vs_bf16
        self._hw = hw
        self._fused_moe = fused_moe
        self._memo: dict[tuple[str, int], tuple[float, dict[str, float]]] = {}

    def _moe_seconds(self, tokens: int) -> float | None:
        """One MoE layer's fused routed-expert time at ``tokens`` (None: priced per op)."""
        model, shard, wdtype, _ = self._args
        return self._fused_moe.seconds(model, shard, wdtype, tokens)

    def _ops(self, part: str, tokens: int, *, fused: bool = True
             ) -> list[tuple[OpSpec, float]]:
        model, shard, wdtype, lora = self._args
        if part == "dense":
            fusions = self._fusions
            if fused and self._moe_seconds(tokens) is not None:
                fusions = replace(fusions or Fusions(), fused_moe=True)
            return step_ops(model, tokens=tokens, shard=shard, weight_dtype=wdtype, lora=lora,
                            fusions=fusions)
        return [(op, 1) for op in lm_head_ops(model, tokens, shard, wdtype)]

    def kernels(self) -> float:
        """Kernels of one step's dense part and LM head (their count does not depend on the
        token count), with the input quantization each fp8 GEMM launches where its time is
        inside the GEMM's price (`Fusions.act_quant_launches`). A fused MoE layer
        (`FusedMoeTable`) counts as the ops it replaces (FlashInfer's runner launches routing,
        the expert GEMMs, the activation and the finalize as kernels of their own:
        flashinfer-ai/flashinfer csrc/trtllm_fused_moe_kernel_launcher.cu, MoE::Runner) plus
        the input quantization SGLang launches before it (fp8.py apply_with_router_logits)."""
        ops = [(op, n) for part in ("dense", "lm") for op, n in self._ops(part, 1, fused=False)]
        quant = sum(n for op, n in ops if isinstance(op, GemmSpec) and op.dtype == DType.FP8
                    and op.batch == 1) if self._fusions and self._fusions.act_quant_launches \
            else 0.0
        model, shard, wdtype, _ = self._args
        moe_quant = model.moe_layers if self._fused_moe.curve(model, shard, wdtype) else 0
        return sum(n for _, n in ops) + quant + moe_quant

    def priced_ops(self, part: str, counts: Sequence[int]
                   ) -> list[tuple[int, OpSpec | FusedMoeOp, float, float, str]]:
        """(token count, operator, count, seconds each, engine) of ``part`` at each of
        ``counts``, in one batched engine call: an fp8 GEMM with a measured fp8/bf16 ratio is
        asked as bf16, floored at the sustained rate, then scaled by the ratio; a fused MoE
        layer at its table's time."""
        ops = [(c, op, n) for c in counts for op, n in self._ops(part, c)]
        asked = [(op, 1.0) if (ratio := self._fp8_vs_bf16.ratio(op)) is None
                 else (replace(op, dtype=DType.BF16), ratio) for _, op, _ in ops]
        answers = self._estimator.estimate_many([op for op, _ in asked])
        out: list[tuple[int, OpSpec | FusedMoeOp, float, float, str]] = []
        model = self._args[0]
        if part == "dense":
            for c in counts:
                if (moe_s := self._moe_seconds(c)) is not None:
                    fused = FusedMoeOp(tokens=c, hidden=model.hidden, inter=model.moe_ffn_hidden,
                                       experts=model.num_experts, top_k=model.top_k)
                    out.append((c, fused, model.moe_layers, moe_s, "store"))
        for (c, original, n), (op, ratio), est in zip(ops, asked, answers, strict=True):
            seconds, engine = (est.latency_s, est.engine) if self._kernels is None \
                else self._kernels.seconds(est, op, c)
            seconds = max(seconds, sustained_floor_s(op, self._hw) if self._hw else 0.0)
            out.append((c, original, n, seconds * ratio, engine))
        return out

    def prewarm(self, part: str, counts: Sequence[int]) -> None:
        """Evaluate many token counts in one batched engine call."""
        todo = [c for c in dict.fromkeys(counts) if c > 0 and (part, c) not in self._memo]
        acc: dict[int, dict[str, float]] = {c: {} for c in todo}
        for c, _, n, seconds, engine in self.priced_ops(part, todo):
            add_engine_time(acc[c], {engine: seconds}, n)
        for c, engines in acc.items():
            self._memo[(part, c)] = (sum(engines.values()), engines)

    def get(self, part: str, tokens: int) -> tuple[float, dict[str, float]]:
        if tokens <= 0:
            return 0.0, {}
        key = (part, tokens)
        if key not in self._memo:
            self.prewarm(part, [tokens])
        return self._memo[key]
