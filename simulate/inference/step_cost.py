# SPDX-License-Identifier: Apache-2.0
"""Step-cost tables: how long one batched forward takes, built once from the engine chain.

A serving simulation runs ~10^5 steps, too many to ask the engine chain for every operator of
every step. The dense part of a step (every layer's projections, MLP, norms, TP collectives, LM
head) depends only on the token count, so it is asked from the chain (store -> XGBoost ->
roofline) once per distinct count and memoised: exact, not interpolated. The prefill
attention core of a chunk depends on its length and its cached prefix only, so it is memoised
the same way per (prefix, length) (`PrefillAttention`; a time per causal pair interpolated
between grid lengths was off by up to ~1% at a 1,024-token prompt, as the kernel's tile
efficiency, `analytical.attention_tiles`, varies between grid points). The decode core depends
on every sequence's context, so it is evaluated at a grid of (batch, context) points and fitted
as ``c + a * seqs + b * kv_tokens`` by non-negative least squares (its cost is streaming the KV cache); the
fit's worst relative error on its grid is kept in `fit_error` for the report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from analytical.attention_span import AttentionKind
from analytical.comm import p2p_time
from analytical.dtypes import DType
from analytical.hardware import HardwareSpec
from analytical.layer_spec import LayerPhase, TokenBatch
from analytical.model import ModelSpec
from analytical.ops import OpSpec
from analytical.roofline import roofline_time
from simulate.costs import add_engine_time
from simulate.engines import Estimate, Estimator
from simulate.inference.dense_cost import DenseCost
from simulate.inference.fp8_gemm import Fp8GemmRatios
from simulate.inference.fused_moe import FusedMoeTable
from simulate.inference.graph_replay import EngineKernels
from simulate.inference.layer_ops import (
    Fusions,
    LoraSpec,
    Sharding,
    attention_specs,
)
from simulate.serving.state import Span, StepShape

_DECODE_BATCHES = (1, 4, 16, 64, 256)
_DECODE_CONTEXTS = (128, 512, 2048, 8192, 32768)


def token_grid(max_tokens: int) -> list[int]:
    """1..max_tokens, dense at small counts, then ~1.25x steps (always including max)."""
    grid = {1, 2, 3, 4, 6, 8}
    t = 8.0
    while t < max_tokens:
        t *= 1.25
        grid.add(min(int(round(t)), max_tokens))
    grid.add(max_tokens)
    return sorted(g for g in grid if g <= max_tokens)


Chunk = tuple[int, int]  # (cached prefix, new tokens) of one prefill chunk


class PrefillAttention:
    """Exact all-layer attention core time of one prefill chunk, memoised per (cached prefix,
    new tokens) as `DenseCost` memoises the dense part: each layer kind's kernels for that chunk
    (`attention_specs`; a windowed kind runs its `windowed_blocks`), weighted by the kind's share
    of the layers, with the seconds each engine answered. ``batched``: the serving engine runs
    the step's chunks in one variable-length kernel per layer (`seconds`)."""

    def __init__(self, model: ModelSpec, shard: Sharding, estimator: Estimator,
                 dtype: DType, *, batched: bool = False) -> None:
        self._args = (model, shard, dtype)
        self._estimator = estimator
        self.batched = batched
        counts = Counter(model.layer_kinds)
        self._kinds = [(kind, counts[kind] / model.layers) for kind in counts]
        self._memo: dict[Chunk, tuple[float, dict[str, float]]] = {}

    def ops(self, chunk: Chunk) -> list[tuple[OpSpec, float]]:
        """(kernel, multiplicity) of the chunk's attention cores over all layers."""
        model, shard, dtype = self._args
        prefix, new = chunk
        batch = TokenBatch(seqs=1, q_len=new, kv_len=prefix + new)
        return [(op, model.layers * share * n) for kind, share in self._kinds
                for op, n in attention_specs(model, shard, batch, LayerPhase.PREFILL, dtype,
                                             kind)]

    def store(self, plan: Sequence[tuple[Chunk, float]], answers: Sequence[Estimate]) -> None:
        """Memoise the answers to the ops of ``plan`` ((chunk, multiplicity) per op)."""
        acc: dict[Chunk, dict[str, float]] = {}
        for (chunk, n), est in zip(plan, answers, strict=True):
            add_engine_time(acc.setdefault(chunk, {}), {est.engine: est.latency_s}, n)
        for chunk, engines in acc.items():
            self._memo[chunk] = (sum(engines.values()), engines)

    def prewarm(self, chunks: Sequence[Chunk]) -> None:
        """Evaluate the chunks not yet known in one batched engine call."""
        todo = [c for c in dict.fromkeys(chunks) if c[1] > 0 and c not in self._memo]
        if not todo:
            return
        plan = [(c, op, n) for c in todo for op, n in self.ops(c)]
        self.store([(c, n) for c, _, n in plan],
                   self._estimator.estimate_many([op for _, op, _ in plan]))

    def get(self, chunk: Chunk) -> tuple[float, dict[str, float]]:
        if chunk[1] <= 0:
            return 0.0, {}
        if chunk not in self._memo:
            self.prewarm([chunk])
        return self._memo[chunk]

    def seconds(self, chunks: Sequence[Chunk]) -> float:
        """A step's prefill attention. Chunks priced one kernel each pay a kernel's fixed time
        each; a batching engine (`EnginePreset.batched_prefill_attention`) runs them all in one
        variable-length launch per layer, so every chunk but the largest sheds that fixed time,
        taken as the price of a one-token chunk (no work to speak of)."""
        self.prewarm(chunks)
        times = sorted(self.get(c)[0] for c in chunks)
        if not self.batched or len(times) < 2:
            return sum(times)
        floor = self.get((0, 1))[0]
        return sum(times) - sum(min(floor, t) for t in times[:-1])


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowTable:
    """The sliding-window or chunked layers of a model: their share of its layers (decode
    reads their capped keys; `PrefillAttention` runs their `windowed_blocks` kernels)."""

    kind: AttentionKind
    span: int
    share: float  # fraction of the model's layers of this kind


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCostTables:
    """Step-cost model of one instance (a request crosses all its pipeline stages)."""

    dense: DenseCost  # exact dense part and LM head per token count
    prefill: PrefillAttention  # exact prefill attention core per chunk
    decode_per_seq_s: float  # decode attention: a (per sequence)
    decode_per_kv_s: float  # decode attention: b (per KV token read)
    decode_per_step_s: float = 0.0  # decode attention: c (per step with decodes: every layer's
    # kernel at its smallest)
    pp_hop_s_per_token: float  # activation send/recv between stages, per token
    pp: int
    fit_error: float  # worst relative error of the decode-attention fit on its grid
    attention_share: dict[str, dict[str, float]]  # prefill/decode -> engine -> fraction
    full_share: float = 1.0  # fraction of full-attention layers
    windowed: tuple[WindowTable, ...] = ()
    # host time of issuing one step's kernels when it runs eagerly (engine `eager_launch_us` x
    # kernels per step), and the largest step a CUDA graph replays (decode only)
    eager_step_s: float = 0.0
    graph_max_tokens: int = 0

    @property
    def spans(self) -> tuple[Span, ...]:
        """The windowed (kind, span)s whose pairs and keys `step_shape` must count."""
        return tuple((w.kind, w.span) for w in self.windowed)

    def attention_parts(self, shape: StepShape) -> tuple[float, float, float]:
        """Seconds of (prefill attention, decode attention, pipeline hops); each layer kind
        weighs its own pairs and keys (`StepShape.windowed`) by its share of the layers."""
        decode = hops = 0.0
        prefill = self.prefill.seconds(shape.chunks)
        if shape.decode_seqs:
            found = {(kind, span): keys for kind, span, _, keys in shape.windowed}
            keys = self.full_share * shape.decode_kv + sum(
                w.share * found[(w.kind, w.span)] for w in self.windowed)
            decode = (self.decode_per_step_s + shape.decode_seqs * self.decode_per_seq_s
                      + keys * self.decode_per_kv_s)
        if self.pp > 1:
            hops = (self.pp - 1) * self.pp_hop_s_per_token * shape.tokens
        return prefill, decode, hops

    def launch_s(self, shape: StepShape) -> float:
        """Host time an eager step adds: a step with a prefill chunk, or a decode step above
        the largest CUDA graph, issues its kernels from Python (`EnginePreset.eager_launch_s`)."""
        if self.eager_step_s and (shape.prefill_chunks or shape.dense_tokens > self.graph_max_tokens):
            return self.eager_step_s
        return 0.0

    def step_time(self, shape: StepShape) -> float:
        return self.time_of(shape, self.attention_parts(shape))

    def time_of(self, shape: StepShape, parts: tuple[float, float, float]) -> float:
        """A step's seconds from its `attention_parts` (prefill, decode, pipeline hops): the
        dense part, the LM head, those parts and the eager launch time (`launch_s`)."""
        prefill, decode, hops = parts
        return (self.dense.get("dense", shape.dense_tokens)[0]
                + self.dense.get("lm", shape.logits)[0] + prefill + decode + hops
                + self.launch_s(shape))


class MeteredCost:
    """Wraps tables and counts what the simulated steps used, for the engine coverage: token
    counts of the dense part and LM head, seconds of each attention part."""

    def __init__(self, tables: StepCostTables) -> None:
        self.tables = tables
        self.dense_counts: dict[int, int] = {}
        self.lm_counts: dict[int, int] = {}
        self.chunk_counts: dict[Chunk, int] = {}
        self.attention_s = {"decode": 0.0, "pp": 0.0}

    def step_time(self, shape: StepShape) -> float:
        tables = self.tables
        self.dense_counts[shape.dense_tokens] = self.dense_counts.get(shape.dense_tokens, 0) + 1
        self.lm_counts[shape.logits] = self.lm_counts.get(shape.logits, 0) + 1
        for chunk in shape.chunks:
            self.chunk_counts[chunk] = self.chunk_counts.get(chunk, 0) + 1
        parts = tables.attention_parts(shape)
        self.attention_s["decode"] += parts[1]
        self.attention_s["pp"] += parts[2]
        return tables.time_of(shape, parts)

    def engine_seconds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for part, counts in (("dense", self.dense_counts), ("lm", self.lm_counts)):
            for tokens, n in counts.items():
                add_engine_time(out, self.tables.dense.get(part, tokens)[1], n)
        for chunk, n in self.chunk_counts.items():
            add_engine_time(out, self.tables.prefill.get(chunk)[1], n)
        shares = {**self.tables.attention_share, "pp": {"roofline": 1.0}}
        for part, seconds in self.attention_s.items():
            add_engine_time(out, shares.get(part, {}), seconds)
        return out


def build_tables(model: ModelSpec, hw: HardwareSpec, shard: Sharding, *, weight_dtype: DType,
                 kv_dtype: DType, estimator: Estimator, max_tokens: int = 8192, decode_q: int = 1,
                 lora: LoraSpec | None = None, fusions: Fusions | None = None,
                 graph_max_tokens: int | None = None, custom_all_reduce_bytes: float = 0.0,
                 eager_launch_s: float = 0.0, batched_prefill_attention: bool = False,
                 fp8_vs_bf16: Fp8GemmRatios = Fp8GemmRatios(), fused_moe: FusedMoeTable =
                 FusedMoeTable()) -> StepCostTables:
    """Build the step-cost model, asking the engine chain in a few batched calls:
    `estimator.estimate_many(ops)` prices each op and names its engine (batched, as the chain);
    the dense part is prewarmed on a grid of token counts and filled exactly on demand. Layers per
    pipeline stage are `model.layers / pp` but a request crosses all stages, so a step's latency
    sums them all (no micro-batch pipelining inside one step, as in vLLM's PP without virtual
    engines). ``fusions``: the serving engine's operator composition (`layer_ops.Fusions`; None:
    every operator a kernel of its own). ``graph_max_tokens`` set (a serving engine's largest
    CUDA graph, 0 for none) prices the dense part as the engine runs it
    (`graph_replay.EngineKernels`; with ``custom_all_reduce_bytes``, the engine's own all-reduce
    below that size); None: as measured. ``eager_launch_s``: host time per kernel of a step the
    engine runs eagerly (`StepCostTables.launch_s`). ``batched_prefill_attention``: a step's
    prefill chunks share one attention launch per layer (`PrefillAttention.seconds`).
    ``fp8_vs_bf16``, ``fused_moe``: `Fp8GemmRatios`, `FusedMoeTable`."""
    grid = token_grid(max_tokens)
    kernels = None if graph_max_tokens is None else EngineKernels(
        hw=hw, graph_max_tokens=graph_max_tokens, custom_all_reduce_bytes=custom_all_reduce_bytes)
    dense = DenseCost(model, shard, weight_dtype, estimator, lora, fusions=fusions,
                      kernels=kernels, fp8_vs_bf16=fp8_vs_bf16, hw=hw, fused_moe=fused_moe)
    dense.prewarm("dense", grid)
    dense.prewarm("lm", grid)
    attn_dtype = kv_dtype if kv_dtype in (DType.BF16, DType.FP16, DType.FP8) else DType.BF16
    prefill = PrefillAttention(model, shard, estimator, attn_dtype,
                               batched=batched_prefill_attention)
    counts = Counter(model.layer_kinds)
    decode_points = [(b, c) for b in _DECODE_BATCHES for c in _DECODE_CONTEXTS]
    decode, share = _attention_times(model, hw, shard, estimator, prefill,
                                     [(0, L) for L in grid if L >= 16] or [(0, grid[-1])],
                                     decode_points, attn_dtype, decode_q)
    windowed = tuple(
        WindowTable(kind=k, span=model.attention_span(k), share=counts[k] / model.layers)
        for k in counts if k is not AttentionKind.FULL)
    # decode attention ~ c + a * B + b * (B * ctx): non-negative least squares on the grid,
    # relative weighting (c: each layer's kernel at a handful of keys, ~9 us on H100 in
    # AIConfigurator's decode rows, flat up to ~16 sequences of 128 keys)
    x = np.array([[1.0, b, b * (c + decode_q)] for b, c in decode_points], dtype=float)
    w = 1.0 / np.maximum(decode, 1e-12)
    coef, _ = nnls(x * w[:, None], decode * w)
    c0, a, b = (float(v) for v in coef)
    fitted = x @ coef
    fit_error = float(np.max(np.abs(fitted - decode) / np.maximum(decode, 1e-12)))
    hop = 0.0
    if shard.pp > 1:
        same_node = shard.tp * shard.pp <= hw.gpus_per_node
        # per token, from a 1024-token bf16 activation message between stages
        hop = p2p_time(model.hidden * 2.0 * 1024, hw, same_node=same_node) / 1024
    # kernels of one step: the dense part, the LM head and one attention core per layer
    eager_step_s = (dense.kernels() + model.layers) * eager_launch_s if eager_launch_s else 0.0
    return StepCostTables(
        dense=dense, prefill=prefill, decode_per_seq_s=a, decode_per_kv_s=b, decode_per_step_s=c0,
        pp_hop_s_per_token=hop, pp=shard.pp, fit_error=fit_error, attention_share=share,
        full_share=counts[AttentionKind.FULL] / model.layers, windowed=windowed,
        eager_step_s=eager_step_s, graph_max_tokens=graph_max_tokens or 0,
    )


def decode_floor_s(est: Estimate, op: OpSpec, hw: HardwareSpec) -> float:
    """A learned model's decode-attention answer, never below the op's roofline.

    A decode core streams its sequences' KV cache once, so no kernel runs it faster than the
    roofline's memory time. Tree models are piecewise constant past their training rows
    (`predictors.model.Target`): the H100 attention champion, whose decode rows for Qwen3-8B's
    32/8/128 heads stop at 524,288 cached tokens (AIConfigurator's grid: 128 x 4,096,
    512 x 512), answers 2.0 ms a layer for 256 x 8,192 and for 512 x 8,192 keys alike, where
    the roofline's KV read takes 2.9 and 5.7 ms,
    and the per-step fit over such points priced 64 sequences of 3,072 keys at half their KV
    read. Measured answers (the store) are kept as measured."""
    if est.engine in ("store", "roofline"):
        return est.latency_s
    return max(est.latency_s, roofline_time(op, hw))


def _attention_times(model: ModelSpec, hw: HardwareSpec, shard: Sharding, estimator: Estimator,
                     prefill: PrefillAttention, chunks: list[Chunk],
                     decode_points: list[tuple[int, int]], attn_dtype: DType, decode_q: int
                     ) -> tuple[np.ndarray, dict[str, dict[str, float]]]:
    """All-layer attention core times in one batched call: the prefill cores of ``chunks``
    (memoised in ``prefill``) and the decode cores at ``decode_points`` (a windowed layer runs
    the full kernel over its capped keys, `attention_span.decode_keys`; a learned answer
    floored at the roofline, `decode_floor_s`); with the engines' share of each part."""
    plan = [(c, op, n) for c in chunks for op, n in prefill.ops(c)]
    ops: list[OpSpec] = [op for _, op, _ in plan]
    for batch, ctx in decode_points:
        ((op, _),) = attention_specs(model, shard, TokenBatch(seqs=batch, q_len=decode_q,
                                                              kv_len=ctx + decode_q),
                                     LayerPhase.DECODE, attn_dtype)
        ops.append(op)
    answers = estimator.estimate_many(ops)
    prefill.store([(c, n) for c, _, n in plan], answers[:len(plan)])
    decode = np.array([model.layers * decode_floor_s(est, op, hw)
                       for est, op in zip(answers[len(plan):], ops[len(plan):], strict=True)])
    share: dict[str, dict[str, float]] = {}
    for (_, _, n), est in zip(plan, answers, strict=False):
        add_engine_time(share.setdefault("prefill", {}), {est.engine: est.latency_s}, n)
    for est in answers[len(plan):]:
        add_engine_time(share.setdefault("decode", {}), {est.engine: est.latency_s},
                        float(model.layers))
    for comp in share.values():
        total = sum(comp.values()) or 1.0
        for engine in comp:
            comp[engine] /= total
    return decode, share
