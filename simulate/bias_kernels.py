# SPDX-License-Identifier: Apache-2.0
"""The eager bias add in front of the attention residual that Megatron-Core runs when a model's
attention output projection has a bias and the run leaves bias-dropout-add unfused (GPT-OSS on
Megatron-Bridge / NeMo).

Megatron-Core's attention output projection (``TERowParallelLinear``, ``skip_bias_add=True``)
returns its bias apart, and the layer's ``self_attn_bda`` applies it. With
``bias_dropout_fusion`` off, ``get_bias_dropout_add`` returns the eager
``_bias_dropout_add_func`` (megatron/core/fusions/fused_bias_dropout.py, NVIDIA/Megatron-LM
d98e8a64): ``x = x + bias`` (one kernel: read and write of the [tokens, hidden] output), a
dropout that returns its input at ``hidden_dropout = 0`` (ATen ``dropout``: no kernel at p = 0),
then ``residual + out`` (the graph's ``attn_residual``). Backward: the add's bias gradient is a
sum over tokens (``sum_to_size``: a read of the [tokens, hidden] output gradient, half a pass);
the input gradient is the output gradient itself. Fused (``bias_dropout_add_fused_train``) the
bias rides the residual add's kernel: nothing extra.

Who runs it unfused: the scenario's ``training.bias_dropout_fusion: false``. Megatron-LM's
command line turns the fusion on (``--no-bias-dropout-fusion`` is store_false,
megatron/training/arguments.py), as NeMo's GPT configs do (megatron_gpt_config.yaml
``bias_dropout_add_fusion: True``), hence the default; Megatron-Bridge's ``GPTOSSBridge.provider_bridge`` sets
``bias_dropout_fusion = False`` (src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py,
v0.4.1-v0.6.0; ``GPTOSSProvider.bias_dropout_fusion: bool = False`` in v0.2.0-v0.3.0), which no
performance script overrides (scripts/performance/utils/overrides.py), so `validate published`
sets it off for the Megatron-Bridge GPT-OSS rows. Switched by that field, by the framework
(Megatron-Core's layer: `UNFUSED_BDA_FRAMEWORKS`) and by the model (`ModelSpec.attn_out_bias`).
"""

from __future__ import annotations

from collections.abc import Sequence

from analytical.dtypes import DType
from analytical.layer_spec import Node
from analytical.memory import Framework
from analytical.model_spec import ModelSpec
from analytical.ops import GemmSpec
from simulate.torch_kernels import copy_pass

__all__ = ["ATTN_BIAS_PASSES", "UNFUSED_BDA_FRAMEWORKS", "attn_bias_add_nodes"]

UNFUSED_BDA_FRAMEWORKS = frozenset({Framework.MEGATRON, Framework.NEMO})  # Megatron-Core's layer
ATTN_BIAS_PASSES = (1.0, 0.5)  # (forward, backward) passes over [tokens, hidden]


def attn_bias_add_nodes(fwd: Sequence[Node], model: ModelSpec, framework: str, dtype: DType,
                        *, fused: bool = True, tp: int = 1, sp: bool = False
                        ) -> tuple[list[Node], list[Node]]:
    """Forward and backward passes of the unfused attention-output bias add (module docstring),
    over the output projection's [tokens, hidden] (its 1/tp after a sequence-parallel
    reduce-scatter); none where the run fuses it or the model has no such bias."""
    if fused or not model.attn_out_bias or Framework(framework) not in UNFUSED_BDA_FRAMEWORKS:
        return [], []
    proj = next((n.op for n in fwd if n.name == "out_proj" and isinstance(n.op, GemmSpec)), None)
    if proj is None:
        return [], []
    rows = max(1, proj.m * proj.batch // (tp if sp else 1))
    return ([copy_pass("attn_bias_add", rows, proj.n, ATTN_BIAS_PASSES[0], dtype)],
            [copy_pass("attn_bias_add.bwd", rows, proj.n, ATTN_BIAS_PASSES[1], dtype)])
