# SPDX-License-Identifier: Apache-2.0
"""Per-request progress and the batch one scheduler step forms."""

from __future__ import annotations

from dataclasses import dataclass, field

from analytical.attention_span import AttentionKind, causal_pairs, decode_keys
from simulate.serving.workload import Request

# (kind, span) of a model's sliding-window or chunked layers (`StepCostTables.spans`)
Span = tuple[AttentionKind, int]


class Sequence:
    """A request in flight: how much of its context is in the KV cache and what it generated."""

    __slots__ = ("req", "prefilled", "generated", "blocks", "first_token_s", "finish_s",
                 "preemptions", "swapped", "ready_s", "admitted_s", "last_token_s")

    def __init__(self, req: Request) -> None:
        self.req = req
        self.prefilled = req.cached_prefix  # KV tokens present (prefix-cache hits count)
        self.generated = 0
        self.blocks = 0
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.preemptions = 0
        self.swapped = False
        # TTFT parts: the request reaches the scheduler's queue (after the front end) at ready_s
        # and its first prefill chunk runs in the step starting at admitted_s
        self.ready_s: float | None = None
        self.admitted_s: float | None = None
        self.last_token_s: float | None = None  # when the newest token came out (for ITL)

    @property
    def context_target(self) -> int:
        """Tokens that must be in the KV cache before the next token can be decoded: the prompt
        plus every generated token but the newest (after a recompute preemption all of them)."""
        return self.req.input_len + max(self.generated - 1, 0)

    @property
    def in_prefill(self) -> bool:
        return self.prefilled < self.context_target

    @property
    def remaining_prefill(self) -> int:
        return self.context_target - self.prefilled

    @property
    def context_len(self) -> int:
        """Tokens in the KV cache now."""
        return self.prefilled

    @property
    def done(self) -> bool:
        return self.generated >= self.req.output_len


@dataclass(slots=True)
class Batch:
    """What one forward step computes: prefill chunks (sequence, new tokens) and decodes."""

    prefill: list[tuple[Sequence, int]] = field(default_factory=list)
    decode: list[Sequence] = field(default_factory=list)
    swap_bytes: float = 0.0  # KV moved between GPU and host for swap preemption this step

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode

    @property
    def prefill_tokens(self) -> int:
        return sum(n for _, n in self.prefill)


@dataclass(frozen=True, slots=True)
class StepShape:
    """The aggregates a step-cost model needs (cheap to compute, exact under a linear model)."""

    tokens: int  # new tokens through the dense layers
    logits: int  # sequences that produce a token this step (LM head rows)
    prefill_pairs: float  # causal query-key pairs of all prefill chunks, summed
    prefill_chunks: int
    decode_seqs: int
    decode_kv: int  # KV tokens read by decode attention, summed over sequences
    decode_q: int  # query tokens per decode sequence (1, or k+1 when verifying drafts)
    graph_tokens: int = 0  # tokens the dense layers run, CUDA-graph padding included (0: tokens)
    # per windowed (kind, span): (kind, span, prefill pairs, decode keys) of one such layer
    windowed: tuple[tuple[AttentionKind, int, float, int], ...] = ()
    # (cached prefix, new tokens) of each prefill chunk: its attention core is priced per chunk
    chunks: tuple[tuple[int, int], ...] = ()

    @property
    def dense_tokens(self) -> int:
        return self.graph_tokens or self.tokens


def step_shape(batch: Batch, decode_q: int = 1, spans: tuple[Span, ...] = ()) -> StepShape:
    """Aggregates of ``batch``; ``spans``: the windowed layer kinds whose pairs and keys are
    counted apart (`analytical.attention_span`: a window caps what each query sees)."""
    pairs = 0.0
    logits = 0
    for seq, new in batch.prefill:
        before = seq.prefilled
        pairs += new * before + new * (new + 1) / 2.0
        if before + new >= seq.context_target:
            logits += 1
    decode_kv = sum(s.prefilled for s in batch.decode)
    windowed = tuple(
        (kind, span, sum(causal_pairs(kind, s.prefilled, new, span) for s, new in batch.prefill),
         sum(decode_keys(kind, s.prefilled, span) for s in batch.decode))
        for kind, span in spans)
    return StepShape(
        tokens=batch.prefill_tokens + decode_q * len(batch.decode),
        logits=logits + decode_q * len(batch.decode),
        prefill_pairs=pairs,
        prefill_chunks=len(batch.prefill),
        decode_seqs=len(batch.decode),
        decode_kv=decode_kv,
        decode_q=decode_q,
        windowed=windowed,
        chunks=tuple((seq.prefilled, new) for seq, new in batch.prefill),
    )
