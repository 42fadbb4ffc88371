# SPDX-License-Identifier: Apache-2.0
"""Numeric data types and their storage sizes.

Sizes are fractional bytes so that sub-byte types (int4, fp4) are exact: an int4 weight is 0.5
bytes, never 0 (a floor division bug seen in peers).
"""

from __future__ import annotations

from enum import StrEnum

from analytical.errors import SpecError


class DType(StrEnum):
    """A tensor element type; the value is the spelling used in files, keys and the store."""

    FP32 = "fp32"
    TF32 = "tf32"  # fp32 storage, tensor-core math at reduced mantissa
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"  # e4m3 / e5m2: one byte either way
    INT8 = "int8"
    INT4 = "int4"
    FP4 = "fp4"

    @property
    def bytes(self) -> float:
        """Storage bytes per element."""
        return _BYTES[self]

    @property
    def is_integer(self) -> bool:
        return self in (DType.INT8, DType.INT4)


_BYTES: dict[DType, float] = {
    DType.FP32: 4.0,
    DType.TF32: 4.0,
    DType.BF16: 2.0,
    DType.FP16: 2.0,
    DType.FP8: 1.0,
    DType.INT8: 1.0,
    DType.INT4: 0.5,
    DType.FP4: 0.5,
}

_ALIASES: dict[str, DType] = {
    "float32": DType.FP32,
    "float": DType.FP32,
    "bfloat16": DType.BF16,
    "float16": DType.FP16,
    "half": DType.FP16,
    "float8": DType.FP8,
    "fp8_e4m3": DType.FP8,
    "float8_e4m3fn": DType.FP8,
    "float8_e5m2": DType.FP8,
    "nvfp4": DType.FP4,
}


def parse_dtype(value: object, *, field: str = "dtype", source: str | None = None) -> DType:
    """Parse a dtype spelling (``bf16``, ``bfloat16``, ``torch.bfloat16``) or raise SpecError."""
    if isinstance(value, DType):
        return value
    text = str(value).strip().lower().removeprefix("torch.")
    if text in DType._value2member_map_:
        return DType(text)
    if text in _ALIASES:
        return _ALIASES[text]
    known = ", ".join(d.value for d in DType)
    raise SpecError(field, f"unknown dtype {value!r}; known: {known}", source=source)
