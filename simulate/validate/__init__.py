# SPDX-License-Identifier: Apache-2.0
"""CPU validation: small real architectures and end-to-end timing of the real models."""

from simulate.validate.measure import ModelTiming, measure_model
from simulate.validate.models import (
    VALIDATION_MODELS,
    ValidationModel,
    build_validation_model,
    trace_validation_model,
    validation_inputs,
    validation_model,
)

__all__ = [
    "VALIDATION_MODELS", "ModelTiming", "ValidationModel", "build_validation_model",
    "measure_model", "trace_validation_model", "validation_inputs", "validation_model",
]
