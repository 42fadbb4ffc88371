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

A collective's node span is checked too, per kind (`NODES_PREFIX`): the node counts
(`CollectiveSpec.nodes`) the training rows of that kind held. Crossing a node boundary changes
the link (NVLink or PCIe inside a node, the NIC and the inter-node network across nodes), and
no feature of one node's table says what that network does: a champion trained on one node's
NCCL tables asked an inter-node all-reduce goes off every measured curve and its trees
extrapolate to a hop they never saw. Stop 42's quickstart (docs/validation/transfer-effects.md,
issue 23) had L40S and H100 SXM champions trained on aiconfigurator's single-node tables price
the MLPerf llama2_70b_lora collectives of 64 and 384 GPUs: the L40S rows went from -1% (the NCCL
link model) to -70%. Per kind, because Vidur's tables hold 2-node send/recv but single-node
all-reduce only. The group size is not checked: inside a node an unseen group size is a point
off the curves that the roofline-ratio extrapolator prices over the same link, whose bus factor
the link model carries (numeric, like sizes). A model saved before the node span was recorded
(no `NODES_PREFIX` field in its domain) answers every node count, as it did.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from enum import Enum

from analytical.dtypes import DType
from analytical.errors import LlmsimError
from analytical.hardware import get_hardware
from analytical.ops import CollectiveSpec, OpSpec, op_to_dict

Domain = dict[str, list[object]]  # field -> sorted values seen (JSON: str, bool or int)
# "nodes.<kind>" -> the node counts the collective rows of that kind spanned
NODES_PREFIX = "nodes."


def categorical_fields(op: OpSpec) -> dict[str, object]:
    """The spec's categorical fields (enums as their string values, and booleans)."""
    return {name: value for name, value in op_to_dict(op).items()
            if isinstance(value, (bool, str, Enum))}


def span_fields(op: OpSpec) -> dict[str, int]:
    """A collective's node count under its kind's field (``{"nodes.all_reduce": 2}``);
    empty for other ops."""
    if isinstance(op, CollectiveSpec):
        return {f"{NODES_PREFIX}{op.kind.value}": op.nodes}
    return {}


def _order(value: object) -> tuple[int, object]:
    """Node counts in numeric order, other values by repr (stable JSON)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (0, value)
    return (1, repr(value))


def training_domain(ops: Iterable[OpSpec]) -> Domain:
    """Every categorical value the ops hold, per field, and each collective kind's node
    counts, sorted (stable JSON)."""
    seen: dict[str, set[object]] = {}
    for op in ops:
        for name, value in {**categorical_fields(op), **span_fields(op)}.items():
            seen.setdefault(name, set()).add(value)
    return {name: sorted(values, key=_order) for name, values in sorted(seen.items())}


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
    that ``domain`` lacks, ``"all_reduce at nodes=2"`` for a collective over a node count its
    kind's rows never spanned; None when inside (or when the domain is unknown: a model saved
    before it was recorded; a domain without node spans checks no node count)."""
    if domain is None:
        return None
    op = stand_in(domain, op, hardware)
    for name, value in categorical_fields(op).items():
        if name in domain and value not in domain[name]:
            return f"{name}={value}"
    recorded = any(name.startswith(NODES_PREFIX) for name in domain)
    for name, nodes in span_fields(op).items():
        if recorded and nodes not in domain.get(name, ()):
            return f"{name.removeprefix(NODES_PREFIX)} at nodes={nodes}"
    return None
