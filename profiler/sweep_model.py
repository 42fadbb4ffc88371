# SPDX-License-Identifier: Apache-2.0
"""``shapes: {model: ...}`` in a sweep: the operator shapes one model needs, from the same layer
builder the simulator asks (`analytical.layers`), so a model sweep measures exactly its keys.

For each tensor-parallel degree ``tp``, sequence length S and micro-batch b:

* ``train``: one training micro-batch of b sequences of S tokens under Megatron-Core's layout
  (``sp``, ``cp``, ``ep`` as given, expert TP = tp): every layer kind's forward nodes, their
  backward (dgrad/wgrad, backward kernels), embedding, final norm, LM head and cross-entropy.
* ``prefill``: b sequences of S new tokens under vLLM's layout (no SP, experts on the TP ranks,
  expert TP = tp // ep); the LM head on one row per sequence.
* ``decode``: b sequences of one new token against S cached positions.

Collectives are not emitted (their sweeps are per group size, not per model); the sweep's
``dtypes`` replace each operator's dtype.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from analytical.errors import LlmsimError, SpecError
from analytical.layer_backward import backward_nodes
from analytical.layer_edges import (
    embedding_ops,
    final_norm_op,
    lm_head_ops,
    unfused_loss_passes,
)
from analytical.layer_spec import LayerPhase, Sharding, TokenBatch
from analytical.layers import layer_ops
from analytical.model_spec import ModelSpec
from analytical.ops import OpSpec, op_to_dict

__all__ = ["MODEL_KEYS", "PHASES", "model_ops", "model_shapes"]

MODEL_KEYS = ("name", "tp", "seq_len", "micro_batch", "phases", "sp", "cp", "ep")
PHASES = ("prefill", "decode", "train")
FAMILIES = ("gemm", "attention", "memory", "moe")

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


def _flag(spec: Mapping[str, Any], key: str, field: str, source: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise SpecError(f"{field}.{key}", f"expected true/false, got {value!r}", source=source)
    return value


def _phases(spec: Mapping[str, Any], field: str, source: str) -> list[LayerPhase]:
    phases = spec.get("phases", ["prefill"])
    phases = phases if isinstance(phases, list) else [phases]
    for i, phase in enumerate(phases):
        if phase not in PHASES:
            raise SpecError(f"{field}.phases[{i}]", f"unknown phase {phase!r}; known: "
                            f"{', '.join(PHASES)}", source=source)
    return [LayerPhase(p) for p in phases]


def _load(spec: Mapping[str, Any], family: str, field: str, source: str) -> ModelSpec:
    if not isinstance(spec, Mapping):
        raise SpecError(field, "expected a mapping", source=source)
    for key in spec:
        if key not in MODEL_KEYS:
            raise SpecError(f"{field}.{key}", f"unknown key; allowed: {', '.join(MODEL_KEYS)}",
                            source=source)
    if family not in FAMILIES:
        raise SpecError(f"{field}", f"model shapes exist for {', '.join(FAMILIES)}, not "
                        f"{family}", source=source)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{field}.name", "needs a model name or config path", source=source)
    from analytical.model import load_model  # noqa: PLC0415 - only model sweeps need it

    try:
        return load_model(name)
    except LlmsimError as exc:
        raise SpecError(f"{field}.name", str(exc), source=source) from None


def model_shapes(family: str, spec: Any, *, field: str, source: str) -> list[Shape]:
    """Shapes (without dtype) of ``family`` operators for the model under each layout."""
    model = _load(spec, family, field, source)
    tps = _ints(spec, "tp", field, source, [1])
    seq_lens = _ints(spec, "seq_len", field, source)
    batches = _ints(spec, "micro_batch", field, source, [1])
    (cp,), (ep,) = _ints(spec, "cp", field, source, [1]), _ints(spec, "ep", field, source, [1])
    sp = _flag(spec, "sp", field, source)
    phases = _phases(spec, field, source)
    out: list[Shape] = []
    seen: set[str] = set()
    for i, tp in enumerate(tps):
        for seq_len, batch, phase in itertools.product(seq_lens, batches, phases):
            try:
                ops = model_ops(model, tp=tp, seq_len=seq_len, micro_batch=batch, phase=phase,
                                sp=sp and tp > 1, cp=cp, ep=ep)
            except SpecError as exc:
                where = f"{field}.tp[{i}]" if exc.field.endswith(".tp") else field
                raise SpecError(where, exc.reason, source=source) from None
            for op in ops:
                if op.family == family and op.key not in seen:
                    seen.add(op.key)
                    values = op_to_dict(op)
                    values.pop("dtype")
                    out.append((values, field, False))
    return out


def model_ops(model: ModelSpec, *, tp: int, seq_len: int, micro_batch: int, phase: LayerPhase,
              sp: bool = False, cp: int = 1, ep: int = 1) -> list[OpSpec]:
    """Every operator (collectives included) the simulator asks for one step of ``model``."""
    batch = TokenBatch(seqs=micro_batch, q_len=1 if phase == LayerPhase.DECODE else seq_len,
                       kv_len=seq_len)
    # one layer of each kind: dense or MoE, full or windowed attention
    kinds = sorted({(i in model.moe_layer_indices, model.layer_kinds[i])
                    for i in range(model.layers)})
    if phase == LayerPhase.TRAIN:
        sh = Sharding(tp=tp, cp=cp, ep=ep, sp=sp)
        tokens = batch.tokens // cp
        nodes = [n for moe, att in kinds
                 for n in layer_ops(model, sh, batch, phase, moe=moe, attention=att)]
        nodes += [final_norm_op(model, sh, tokens), *lm_head_ops(model, sh, tokens, phase)]
        nodes += backward_nodes(nodes) + tuple(embedding_ops(model, sh, tokens))
        nodes += unfused_loss_passes(nodes)[0]  # Megatron-LM's default loss (its fp32 passes)
        nodes += backward_nodes(embedding_ops(model, sh, tokens)[:1])
    else:
        if tp % ep:
            raise SpecError("ep", f"ep={ep} must divide tp={tp} (experts on the TP ranks)")
        sh = Sharding(tp=tp, ep=ep, etp=tp // ep)
        nodes = [n for moe, att in kinds
                 for n in layer_ops(model, sh, batch, phase, moe=moe, attention=att)]
        nodes += [*embedding_ops(model, sh, batch.tokens), final_norm_op(model, sh, batch.tokens),
                  *lm_head_ops(model, sh, micro_batch, phase)]
    return [n.op for n in nodes]
