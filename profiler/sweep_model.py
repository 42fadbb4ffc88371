# SPDX-License-Identifier: Apache-2.0
"""``shapes: {model: ...}`` in a sweep: the operator shapes one model needs per layer.

For each tensor-parallel degree ``tp``, sequence length S and micro-batch b (tokens = b*S, or b
when decoding) the Megatron-LM layout gives (Shoeybi et al. 2019, section 3: column-parallel QKV
and MLP-up, row-parallel output and MLP-down):

* GEMM ``m=tokens``: QKV ``n=(H+2G)*D/tp, k=hidden``; output ``n=hidden, k=H*D/tp``; MLP up
  ``n=ffn*(2 if gated)/tp, k=hidden``; MLP down ``n=hidden, k=ffn/tp``; LM head
  ``n=vocab/tp, k=hidden``; MoE experts at ``m=ceil(tokens*top_k/experts)`` plus the router.
  Phase ``train`` adds each GEMM's backward: dX ``(m, k, n)`` and dW ``(k, n, m)``.
* attention: ``H/tp`` heads, ``max(1, G/tp)`` KV heads; prefill causal S x S, decode 1 x S,
  train = prefill forward and backward.
* memory: norm, residual add, activation, rotary, embedding, cross entropy (not when decoding).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from analytical.errors import LlmsimError, SpecError

__all__ = ["MODEL_KEYS", "PHASES", "model_shapes"]

MODEL_KEYS = ("name", "tp", "seq_len", "micro_batch", "phases")
PHASES = ("prefill", "decode", "train")

Shape = tuple[dict[str, Any], str, bool]  # (spec values without dtype, field, strict)


def _ints(spec: Mapping[str, Any], key: str, field: str, source: str,
          default: list[int] | None = None) -> list[int]:
    value = spec.get(key, default)
    values = value if isinstance(value, list) else [value]
    if value is None or not values or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise SpecError(f"{field}.{key}", f"expected positive integers, got {value!r}",
                        source=source)
    return values


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def model_shapes(family: str, spec: Any, *, field: str, source: str) -> list[Shape]:
    """Shapes (without dtype) of ``family`` operators for the model under each layout."""
    if not isinstance(spec, Mapping):
        raise SpecError(field, "expected a mapping", source=source)
    for key in spec:
        if key not in MODEL_KEYS:
            raise SpecError(f"{field}.{key}", f"unknown key; allowed: {', '.join(MODEL_KEYS)}",
                            source=source)
    if family not in ("gemm", "attention", "memory", "moe"):
        raise SpecError(f"{field}", f"model shapes exist for gemm, attention, memory and moe, "
                        f"not {family}", source=source)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{field}.name", "needs a model name or config path", source=source)
    from analytical.model import load_model  # noqa: PLC0415 - only model sweeps need it

    try:
        model = load_model(name)
    except LlmsimError as exc:
        raise SpecError(f"{field}.name", str(exc), source=source) from None
    tps = _ints(spec, "tp", field, source, [1])
    seq_lens = _ints(spec, "seq_len", field, source)
    batches = _ints(spec, "micro_batch", field, source, [1])
    phases = spec.get("phases", ["prefill"])
    phases = phases if isinstance(phases, list) else [phases]
    for i, phase in enumerate(phases):
        if phase not in PHASES:
            raise SpecError(f"{field}.phases[{i}]", f"unknown phase {phase!r}; known: "
                            f"{', '.join(PHASES)}", source=source)
    for i, tp in enumerate(tps):
        if model.heads % tp:
            raise SpecError(f"{field}.tp[{i}]", f"{model.heads} heads are not divisible by "
                            f"tp={tp}", source=source)
    out: list[Shape] = []
    for tp in tps:
        for seq_len in seq_lens:
            for batch in batches:
                for phase in phases:
                    make = _FAMILY_SHAPES[family]
                    out.extend((shape, field, False)
                               for shape in make(model, tp, seq_len, batch, phase))
    return out


def _gemms(model: Any, tp: int, seq_len: int, batch: int, phase: str) -> Iterable[dict]:
    tokens = batch if phase == "decode" else batch * seq_len
    gated = 2 if model.gated_mlp else 1
    kv_local = max(1, model.kv_heads // tp)
    forward = [
        (tokens, (model.heads // tp + 2 * kv_local) * model.head_dim, model.hidden),  # QKV
        (tokens, model.hidden, model.heads // tp * model.head_dim),  # attention output
        (tokens, _ceil_div(model.vocab, tp), model.hidden),  # LM head
    ]
    if model.is_moe:
        expert_tokens = max(1, _ceil_div(tokens * model.top_k, model.num_experts))
        ffn = _ceil_div(model.moe_ffn_hidden, tp)
        forward += [(tokens, model.num_experts, model.hidden),  # router
                    (expert_tokens, gated * ffn, model.hidden), (expert_tokens, model.hidden, ffn)]
    else:
        ffn = _ceil_div(model.ffn_hidden, tp)
        forward += [(tokens, gated * ffn, model.hidden), (tokens, model.hidden, ffn)]
    for m, n, k in forward:
        yield {"m": m, "n": n, "k": k}
        if phase == "train":
            yield {"m": m, "n": k, "k": n}  # dX = dY @ W^T
            yield {"m": k, "n": n, "k": m}  # dW = X^T @ dY


def _attention(model: Any, tp: int, seq_len: int, batch: int, phase: str) -> Iterable[dict]:
    common = {"batch": batch, "heads": model.heads // tp,
              "kv_heads": max(1, model.kv_heads // tp), "head_dim": model.head_dim,
              "causal": True}
    if phase == "decode":
        yield {**common, "q_len": 1, "kv_len": seq_len, "phase": "decode"}
        return
    yield {**common, "q_len": seq_len, "kv_len": seq_len, "phase": "prefill"}
    if phase == "train":
        yield {**common, "q_len": seq_len, "kv_len": seq_len, "phase": "prefill",
               "backward": True}


def _memory(model: Any, tp: int, seq_len: int, batch: int, phase: str) -> Iterable[dict]:
    rows = batch if phase == "decode" else batch * seq_len
    ffn = _ceil_div(model.moe_ffn_hidden if model.is_moe else model.ffn_hidden, tp)
    ops = [("rmsnorm", model.hidden), ("add", model.hidden),
           ("swiglu" if model.gated_mlp else "gelu", ffn),
           ("rotary", model.heads // tp * model.head_dim), ("embedding", model.hidden)]
    if phase != "decode":
        ops.append(("cross_entropy", _ceil_div(model.vocab, tp)))
    for kind, cols in ops:
        yield {"kind": kind, "rows": rows, "cols": cols}
        if phase == "train" and kind != "embedding":
            yield {"kind": kind, "rows": rows, "cols": cols, "backward": True}


def _moe(model: Any, tp: int, seq_len: int, batch: int, phase: str) -> Iterable[dict]:
    if not model.is_moe:
        return
    tokens = batch if phase == "decode" else batch * seq_len
    for kind in ("dispatch", "combine"):
        yield {"kind": kind, "tokens": tokens, "hidden": model.hidden,
               "experts": model.num_experts, "top_k": model.top_k}


_FAMILY_SHAPES = {"gemm": _gemms, "attention": _attention, "memory": _memory, "moe": _moe}
