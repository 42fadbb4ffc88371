# SPDX-License-Identifier: Apache-2.0
"""Element-wise passes that Megatron-Core's grouped expert MLP (``TEGroupedMLP``) runs outside
the fused kernels that the operator graph assumes, for biased and clamped experts (GPT-OSS).

The graph prices a routed expert block as GEMM, one fused activation pass, GEMM. Megatron-Core
(megatron/core/transformer/moe/experts.py and fusions/fused_bias_geglu.py, NVIDIA/Megatron-LM
a329dd6d "Enable bias in expert mlp [gpt-oss 5/5]", 2025-09, unchanged for the eager path
through d98e8a64, 2026-08) adds, counted from that code in units of one bf16 read-and-write
pass over the tensor named (`torch_kernels.copy_pass`):

- the FC2 expert bias (``add_bias_linear``; the graph's `ModelSpec.mlp_bias`): FC2 is built with
  ``skip_bias_add=True`` and ``TEGroupedMLP._apply_bias`` adds each local expert's bias, weighted
  by its tokens' routing probabilities, in a Python loop over ``torch.split`` of the FC2 output:
  ``torch.cat([t + b * p ...])``. Forward: ``b * p`` writes a [tokens_e, hidden] tensor, the add
  reads it and ``t`` and writes the sum, ``cat`` copies all of them: 12 bytes per element of
  the [routed tokens, hidden] output, 3 passes, with bf16 routing probabilities (the
  all-to-all dispatcher's, router in the model dtype); the flex dispatcher (DeepEP / HybridEP)
  requires fp32 probabilities (token_dispatcher.py), which make the sum and the copy fp32 and
  add a cast back, 28 bytes: the lower count is taken, since a run's dispatcher is not in the
  scenario. Backward: the product's two gradients (``g * p``
  and ``g * b``, each written and then summed) and the split's backward (``cat`` of the
  per-expert gradients): 16 bytes, 4 passes. (FC1's bias rides the GEMM epilogue in Transformer
  Engine's ``GroupedLinear``: free.)
- the clamp (``activation_func_clamp_value``; `ModelSpec.glu_clamp`):
  ``weighted_bias_quick_geglu_impl`` chunks the FC1 output [routed tokens, 2 x ffn] into its
  halves, clamps each (one pass over the whole between them) and ``torch.cat``s them back (one
  pass) before the fused activation: 2 passes forward; backward, each clamp's mask-multiply
  reads the gradient and the input and writes (1.5 passes) and the chunk's backward
  concatenates the two halves' gradients (1 pass): 2.5 passes.

Switched by framework (`MEGATRON_MOE_FRAMEWORKS`) and by the model (biased / clamped experts);
applies to training MoE layers. Both are in the corpus' Megatron-Bridge GPT-OSS-120B runs.

None of it runs where the recipe fuses the expert MLP (scenario ``training.moe_fused_mlp``,
Megatron-Bridge ``cutedsl_fused_grouped_mlp``: ``use_transformer_engine_op_fuser`` with
``moe_mlp_glu_interleave_size = 32``, scripts/performance/utils/overrides.py v0.5.0; the
GB200/GB300 MXFP8 GPT-OSS-120B recipes of v0.5.0 and v0.6.0, NeMo 26.06 / 26.08):
Megatron-Core's ``TEGroupedMLP._fused_forward`` (experts.py, ``_make_fused_ops``: FC1
``GroupedLinear``, ``ScaledClampedQGeGLU``, FC2 ``GroupedLinear`` with its bias scaled per token)
and Transformer Engine's fused grouped MLP (transformer_engine/pytorch/ops/fused/grouped_mlp.py,
cuDNN frontend's ``grouped_gemm_glu`` / ``grouped_gemm_dglu`` sm100 kernels) put the biases, the
clamp, the GLU and the routing-probability scale in the grouped GEMMs' epilogues: neither the
passes above nor the graph's separate activation node (`fused_expert_mlp`). cudnn-frontend
issue 256 shows how much of the step that fused backward kernel is: 10x slower in frontend
1.24, it is the "known issue" footnoted on the NeMo 26.06.01 GPT-OSS rows (33,166 -> 20,288
tok/s/GPU on GB300, docs/performance-summary-archive.md), which the corpus leaves out.
"""

from __future__ import annotations

from collections.abc import Sequence

from analytical.dtypes import DType
from analytical.layer_spec import Node
from analytical.memory import Framework
from analytical.model_spec import ModelSpec
from analytical.ops import GemmSpec
from simulate.torch_kernels import copy_pass

__all__ = ["BIAS_PASSES", "CLAMP_PASSES", "FUSED_MLP_NODES", "expert_elementwise_nodes",
           "fused_expert_mlp"]

MEGATRON_MOE_FRAMEWORKS = frozenset({Framework.MEGATRON, Framework.NEMO})

BIAS_PASSES = (3.0, 4.0)  # (forward, backward) passes over [routed tokens, hidden]
CLAMP_PASSES = (2.0, 2.5)  # (forward, backward) passes over [routed tokens, 2 x ffn]
FUSED_MLP_NODES = frozenset({"experts.act"})  # in the fused grouped GEMMs' epilogues


def _expert_gemm(fwd: Sequence[Node], name: str) -> GemmSpec | None:
    for n in fwd:
        if n.name == name and isinstance(n.op, GemmSpec):
            return n.op
    return None


def fused_expert_mlp(fwd: Sequence[Node], fused: bool) -> list[Node]:
    """The layer's forward nodes without those the fused grouped MLP folds into its GEMMs
    (module docstring); unchanged when the run's expert MLP is not fused."""
    return [n for n in fwd if not (fused and n.name in FUSED_MLP_NODES)]


def expert_elementwise_nodes(fwd: Sequence[Node], model: ModelSpec, framework: str, dtype: DType,
                             *, fused: bool = False) -> tuple[list[Node], list[Node]]:
    """Forward and backward passes that a Megatron-Core MoE layer adds for biased / clamped
    experts (module docstring), from the layer's forward expert GEMMs; none otherwise, and none
    under the fused grouped MLP."""
    if Framework(framework) not in MEGATRON_MOE_FRAMEWORKS or fused:
        return [], []
    down = _expert_gemm(fwd, "experts.down")
    up = _expert_gemm(fwd, "experts.up_gate")
    out_f: list[Node] = []
    out_b: list[Node] = []
    if down is not None and model.mlp_bias:
        rows = down.m * down.batch
        out_f.append(copy_pass("experts.down_bias", rows, down.n, BIAS_PASSES[0], dtype))
        out_b.append(copy_pass("experts.down_bias.bwd", rows, down.n, BIAS_PASSES[1], dtype))
    if up is not None and model.glu_clamp > 0:
        rows = up.m * up.batch
        out_f.append(copy_pass("experts.act_clamp", rows, up.n, CLAMP_PASSES[0], dtype))
        out_b.append(copy_pass("experts.act_clamp.bwd", rows, up.n, CLAMP_PASSES[1], dtype))
    return out_f, out_b
