# SPDX-License-Identifier: Apache-2.0
"""Store rows that time a different kernel from the one a framework runs for the same op.

The profiler times each memory-bound op as PyTorch runs it eagerly: `F.rms_norm` as one fused
CUDA kernel, rotary and SwiGLU as composites (`profiler.benchmarks.memory`). A framework that
runs the other form is re-priced at the roofline by `simulate.efficiency.framework_estimates`;
this module says when, in one place for both directions.
"""

from __future__ import annotations

from analytical.ops import MemoryBoundSpec, MemoryOpKind, OpSpec
from simulate.engines import Estimate
from simulate.torch_kernels import eager_traffic

__all__ = ["COMPOSITE_IN_STORE", "FUSED_IN_STORE", "composite_in_store", "fused_in_store"]

# Store rows timing a fused kernel that eager frameworks run as the composite: `F.rms_norm`, one
# CUDA kernel in torch 2.11 (H200 8,192 x 4,096 bf16: 46 us).
FUSED_IN_STORE = frozenset({MemoryOpKind.RMSNORM})

# Store rows (and the predictors learned from them) that time an eager composite where the
# framework runs one fused kernel: `profiler.benchmarks.memory` times rotary as slices, a
# concatenation and three element-wise ops, and SwiGLU as `F.silu(x) * y` (two kernels).
# Megatron-Core and NeMo run Transformer Engine's fused RoPE (`apply_rope_fusion`, on by default:
# Megatron-LM `--no-rope-fusion` turns it off; `fused_apply_rotary_pos_emb`,
# megatron/core/models/common/embeddings/rope_utils.py) and the fused bias-SwiGLU
# (`bias_swiglu_fusion`, `bias_swiglu_impl` in megatron/core/fusions/fused_bias_swiglu.py);
# Inductor fuses a compiled PyTorch-native model's point-wise chain. Those take the graph's one
# fused pass at the roofline, as serving engines' do (`simulate.inference.graph_replay`).
COMPOSITE_IN_STORE = frozenset({MemoryOpKind.ROTARY, MemoryOpKind.SWIGLU})


def fused_in_store(op: OpSpec, framework: str, compiled: bool) -> bool:
    """A measured fused kernel standing for the eager composite ``framework`` runs."""
    return (isinstance(op, MemoryBoundSpec) and op.kind in FUSED_IN_STORE
            and eager_traffic(framework, compiled, op.kind, backward=op.backward) != 1.0)


def composite_in_store(op: OpSpec, e: Estimate, framework: str, compiled: bool) -> bool:
    """A measured (or learned) eager composite standing for a kernel ``framework`` fuses."""
    return (isinstance(op, MemoryBoundSpec) and op.kind in COMPOSITE_IN_STORE
            and e.engine != "roofline"
            and eager_traffic(framework, compiled, op.kind, backward=op.backward) == 1.0)
