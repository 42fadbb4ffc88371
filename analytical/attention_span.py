# SPDX-License-Identifier: Apache-2.0
"""How many keys a query attends to, and how many tokens a layer caches, per attention kind.

Full attention sees every earlier key; a sliding-window layer the last ``window`` keys
(Mistral 7B, Jiang et al. 2023 sec. 2; Gemma 2 local layers, Gemma Team 2024 sec. 2; GPT-OSS
model card sec. 2.1); a chunked layer only the keys of its own ``chunk``-token block (Llama 4's
local layers: transformers ``Llama4TextConfig.attention_chunk_size``). Means are over the
positions 1..S of one sequence, as a continuous integral, so that full causal attention gives
S/2, the figure `analytical.model_spec.ModelSpec.attention_flops_per_token` has always used.
"""

from __future__ import annotations

from enum import StrEnum


class AttentionKind(StrEnum):
    """What one decoder layer's attention sees."""

    FULL = "full"  # every earlier key (causal) or every key
    SLIDING = "sliding"  # the last `window` keys, the query's own included
    CHUNKED = "chunked"  # keys of the query's own `chunk`-aligned block


# Hugging Face ``layer_types`` entries -> our kinds (transformers >= 4.53 configs write them).
HF_LAYER_TYPES = {
    "full_attention": AttentionKind.FULL,
    "sliding_attention": AttentionKind.SLIDING,
    "chunked_attention": AttentionKind.CHUNKED,
}


def mean_keys(kind: AttentionKind, seq_len: int, span: int, *, causal: bool = True) -> float:
    """Mean keys per query over a ``seq_len``-token sequence; ``span`` = window or chunk size.

    Causal: full S/2; sliding S/2 while S <= W, else W - W^2 / (2S) (the integral of min(x, W));
    chunked: each complete chunk of C contributes C^2 / 2, the remainder r^2 / 2.
    Non-causal (bidirectional) attention doubles the causal figures, capped at S.
    """
    s = float(seq_len)
    if s <= 0:
        return 0.0
    if kind is AttentionKind.FULL or span >= seq_len:
        causal_mean = s / 2.0
    elif kind is AttentionKind.SLIDING:
        causal_mean = span - span * span / (2.0 * s)
    else:
        full, rest = divmod(seq_len, span)
        causal_mean = (full * span * span + rest * rest) / (2.0 * s)
    return causal_mean if causal else min(2.0 * causal_mean, s)


def cached_tokens(kind: AttentionKind, context_len: int, span: int) -> int:
    """Tokens a layer keeps in its KV cache at ``context_len`` cached tokens (an upper bound).

    A sliding layer needs only the last ``span`` tokens and a chunked layer at most one chunk
    (the hybrid caches of vLLM and transformers drop the rest); a full layer keeps everything.
    """
    if kind is AttentionKind.FULL:
        return context_len
    return min(context_len, span)


def causal_pairs(kind: AttentionKind, before: int, new: int, span: int) -> float:
    """Query-key pairs of ``new`` queries appended after ``before`` cached tokens: query p
    (1-based) keeps p keys (full), min(p, W) (sliding) or (p - 1) mod C + 1 (chunked), the
    pairs `analytical.layers.windowed_blocks` prices. Full: new * before + new (new + 1) / 2."""
    return _pairs_upto(kind, before + new, span) - _pairs_upto(kind, before, span)


def _pairs_upto(kind: AttentionKind, n: int, span: int) -> float:
    """Pairs of positions 1..n (closed form of the sums in `causal_pairs`)."""
    if kind is AttentionKind.FULL or n <= span:
        return n * (n + 1) / 2.0
    if kind is AttentionKind.SLIDING:
        return span * (span + 1) / 2.0 + (n - span) * float(span)
    full, rest = divmod(n, span)
    return full * span * (span + 1) / 2.0 + rest * (rest + 1) / 2.0


def decode_keys(kind: AttentionKind, context: int, span: int) -> int:
    """Earlier keys the next token (at position context + 1) reads: all ``context`` (full), the
    last W - 1 (sliding: its window holds itself too) or those of its own chunk so far."""
    if kind is AttentionKind.FULL:
        return context
    if kind is AttentionKind.SLIDING:
        return min(context, span - 1)
    return context % span
