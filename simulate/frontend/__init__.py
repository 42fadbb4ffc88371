# SPDX-License-Identifier: Apache-2.0
"""Native PyTorch frontend: trace a module's aten calls onto the operator vocabulary.

`trace_module` records one forward (and backward) pass under fake tensors, `aten_map` maps each
call, `passes` adds data-parallel collectives, `hf` builds Hugging Face models from configs.
"""

from simulate.frontend.aten_map import ATEN_MAP, AtenCall, Category, Mapped, TensorMeta, map_call
from simulate.frontend.graph import (
    ParamInfo,
    TracedGraph,
    TracedOp,
    TracePhase,
    UnknownOpRow,
    graph_ops,
    unknown_ops_report,
)
from simulate.frontend.passes import (
    UnsupportedParallelismError,
    apply_parallel,
    data_parallel,
    fsdp,
    gradient_buckets,
)
from simulate.frontend.trace import trace_module

__all__ = [
    "ATEN_MAP", "AtenCall", "Category", "Mapped", "ParamInfo", "TensorMeta", "TracePhase",
    "TracedGraph", "TracedOp", "UnknownOpRow", "UnsupportedParallelismError", "apply_parallel",
    "data_parallel", "fsdp", "gradient_buckets", "graph_ops", "map_call", "trace_module",
    "unknown_ops_report",
]
