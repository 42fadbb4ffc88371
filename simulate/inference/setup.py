# SPDX-License-Identifier: Apache-2.0
"""A scenario's inference side parsed once: ``inference`` + ``serving``, or ``colocate`` tenants.

`simulate.scenario.parse_scenario` calls these, so the prediction (`simulate.inference.predict`)
works on frozen specs and never reads the raw mapping again. What needs the hardware or the model
(an engine preset, the GPU count, whether it fits) is checked when predicting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analytical.errors import SpecError
from simulate.fields import check_keys, float_field
from simulate.inference.spec import InferenceSpec, ServingSpec, parse_inference, parse_serving
from simulate.serving.trace_formats import has_trace

__all__ = ["ColocatedTenant", "InferenceSetup", "parse_colocation", "parse_inference_setup"]

TENANT_KEYS = {"name", "model", "memory_fraction", "inference", "serving"}


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceSetup:
    """What one model instance (or its dp replicas, or its disaggregated pools) runs.

    Without ``serving`` the prediction is one batch of ``inference.batch_size`` requests.
    """

    inference: InferenceSpec
    serving: ServingSpec | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ColocatedTenant:
    """One model sharing the scenario's GPUs with the others (``colocate[i]``)."""

    name: str
    model: str  # catalog name or path to a config.json
    memory_fraction: float  # of each GPU's memory, like vLLM's gpu_memory_utilization per process
    inference: InferenceSpec
    serving: ServingSpec  # required: tenants are served request streams


def parse_inference_setup(doc: Mapping[str, Any], path: str = "") -> InferenceSetup:
    """The ``inference`` (+ optional ``serving``) blocks of ``doc``; ``path`` prefixes fields
    (``colocate[0].``). A serving trace may leave the lengths out of ``inference``."""
    inference = parse_inference(doc["inference"], f"{path}inference",
                                lengths_from_trace=has_trace(doc))
    serving = parse_serving(doc["serving"], f"{path}serving") if "serving" in doc else None
    return InferenceSetup(inference=inference, serving=serving)


def parse_colocation(entries: Any) -> tuple[ColocatedTenant, ...]:
    """The ``colocate`` list: at least two tenants whose memory fractions sum to at most 1 (each
    defaults to an equal share)."""
    if not isinstance(entries, list) or len(entries) < 2:
        raise SpecError("colocate", "expected a list of at least two tenants")
    tenants = []
    for i, entry in enumerate(entries):
        path = f"colocate[{i}]"
        block = check_keys(entry, path, TENANT_KEYS, TENANT_KEYS - {"memory_fraction"})
        fraction = float_field(block, "memory_fraction", path, default=1.0 / len(entries),
                               maximum=1.0, exclusive_min=True)
        inference = parse_inference(block["inference"], f"{path}.inference",
                                    lengths_from_trace=has_trace(block))
        tenants.append(ColocatedTenant(name=str(block["name"]), model=str(block["model"]),
                                       memory_fraction=fraction, inference=inference,
                                       serving=parse_serving(block["serving"], f"{path}.serving")))
    total = sum(t.memory_fraction for t in tenants)
    if total > 1.0 + 1e-9:
        raise SpecError("colocate", f"memory fractions sum to {total:.2f} > 1")
    return tuple(tenants)
