# SPDX-License-Identifier: Apache-2.0
"""A model's training domain: the categorical values (dtype, collective kind, attention phase,
causal, ...) its training rows held.

Trees cannot price a category they never saw: a send/recv asked of a model trained on
all-reduce and all-gather goes down whichever branches a zero in every kind column takes, and
comes back as a confident wrong number. So a model answers only inside its domain, and the
engine chain prices the rest with the roofline / link model and says why
(`simulate.engines`). Numeric fields are not limited: sizes beyond the training range are
what the gated and ratio targets extrapolate.

One stand-in is allowed: a collective moves bytes, so a dtype the model never saw is asked as
a seen dtype of the same width (bf16 as fp16, fp8 as int8): NCCL moves and reduces 16-bit
types at the same rate, and the published NCCL tables hold fp16 and int8 only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from enum import Enum

from analytical.dtypes import DType
from analytical.ops import OpSpec, op_to_dict

Domain = dict[str, list[object]]  # field -> sorted values seen (JSON: str or bool)


def categorical_fields(op: OpSpec) -> dict[str, object]:
    """The spec's categorical fields (enums as their string values, and booleans)."""
    return {name: value for name, value in op_to_dict(op).items()
            if isinstance(value, (bool, str, Enum))}


def training_domain(ops: Iterable[OpSpec]) -> Domain:
    """Every categorical value the ops hold, per field, sorted (stable JSON)."""
    seen: dict[str, set[object]] = {}
    for op in ops:
        for name, value in categorical_fields(op).items():
            seen.setdefault(name, set()).add(value)
    return {name: sorted(values, key=repr) for name, values in sorted(seen.items())}


def stand_in(domain: Mapping[str, list[object]] | None, op: OpSpec) -> OpSpec:
    """``op`` as the model is asked it: a collective whose dtype is outside ``domain`` takes
    the first seen dtype of the same element width (unchanged when there is none)."""
    seen_dtypes = (domain or {}).get("dtype")
    if op.family != "collective" or not seen_dtypes or op.dtype.value in seen_dtypes:
        return op
    for seen in map(DType, map(str, seen_dtypes)):  # JSON strings (str() keeps them as is)
        if seen.bytes == op.dtype.bytes:
            return replace(op, dtype=seen)
    return op


def outside_domain(domain: Mapping[str, list[object]] | None, op: OpSpec) -> str | None:
    """``"kind=send_recv"`` for the first categorical value ``op`` (after `stand_in`) has
    that ``domain`` lacks; None when inside (or when the domain is unknown: a model saved
    before it was recorded)."""
    if domain is None:
        return None
    op = stand_in(domain, op)
    for name, value in categorical_fields(op).items():
        if name in domain and value not in domain[name]:
            return f"{name}={value}"
    return None
