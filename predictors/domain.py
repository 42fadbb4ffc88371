# SPDX-License-Identifier: Apache-2.0
"""A model's training domain: the categorical values (dtype, collective kind, attention phase,
causal, ...) its training rows held.

Trees cannot price a category they never saw: a send/recv asked of a model trained on
all-reduce and all-gather goes down whichever branches a zero in every kind column takes, and
comes back as a confident wrong number. So a model answers only inside its domain, and the
engine chain prices the rest with the roofline / link model and says why
(`simulate.engines`). Numeric fields are not limited: sizes beyond the training range are
what the gated and ratio targets extrapolate.

Two stand-ins are allowed. A collective moves bytes, so a dtype the model never saw is asked as
a seen dtype of the same width (bf16 as fp16, fp8 as int8): NCCL moves and reduces 16-bit
types at the same rate, and the published NCCL tables hold fp16 and int8 only. And on a GPU
whose hardware YAML gives fp16 and bf16 the same dense peak (every GPU in the catalog: the
vendors' datasheets, e.g. A100 312 TFLOP/s for both, H100 SXM 989), a GEMM, attention or
memory-bound op in one 16-bit float is asked in the other: same element width, so the same
bytes, and the same tensor-core rate. Vidur measured its A100/H100/A40 GEMMs and norms in fp16
only; serving and training run bf16.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from enum import Enum

from analytical.dtypes import DType
from analytical.errors import LlmsimError
from analytical.hardware import get_hardware
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


_HALF_FLOATS = {DType.FP16: DType.BF16, DType.BF16: DType.FP16}


def _same_half_rate(hardware: str | None) -> bool:
    """Whether fp16 and bf16 run at one dense peak on ``hardware`` (a GPU of the catalog)."""
    if hardware is None:
        return False
    try:
        hw = get_hardware(hardware)
    except LlmsimError:
        return False
    return hw.kind == "gpu" and hw.peak_flops(DType.FP16) == hw.peak_flops(DType.BF16) > 0


def stand_in(domain: Mapping[str, list[object]] | None, op: OpSpec,
             hardware: str | None = None) -> OpSpec:
    """``op`` as the model is asked it: a collective whose dtype is outside ``domain`` takes
    the first seen dtype of the same element width; another op in fp16 or bf16 takes the
    other when only that one was seen and ``hardware`` runs both at one peak (unchanged when
    neither applies)."""
    seen_dtypes = (domain or {}).get("dtype")
    if not seen_dtypes or op.dtype.value in seen_dtypes:
        return op
    if op.family != "collective":
        other = _HALF_FLOATS.get(op.dtype)
        if other is not None and other.value in seen_dtypes and _same_half_rate(hardware):
            return replace(op, dtype=other)
        return op
    for seen in map(DType, map(str, seen_dtypes)):  # JSON strings (str() keeps them as is)
        if seen.bytes == op.dtype.bytes:
            return replace(op, dtype=seen)
    return op


def outside_domain(domain: Mapping[str, list[object]] | None, op: OpSpec,
                   hardware: str | None = None) -> str | None:
    """``"kind=send_recv"`` for the first categorical value ``op`` (after `stand_in`) has
    that ``domain`` lacks; None when inside (or when the domain is unknown: a model saved
    before it was recorded)."""
    if domain is None:
        return None
    op = stand_in(domain, op, hardware)
    for name, value in categorical_fields(op).items():
        if name in domain and value not in domain[name]:
            return f"{name}={value}"
    return None
