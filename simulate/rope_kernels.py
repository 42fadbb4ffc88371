# SPDX-License-Identifier: Apache-2.0
"""The rotary embedding as Megatron-Core runs it for YaRN models (GPT-OSS): eager PyTorch, not
the one fused pass that the operator graph's ``rotary`` node prices.

Why it is eager: Megatron-Bridge turns ``apply_rope_fusion`` off for any
``position_embedding_type`` other than ``"rope"`` (``validate_rope_fusion_compatibility``,
src/megatron/bridge/utils/fusions.py, v0.2.2 through v0.6.0), and its GPT-OSS provider sets
``"yarn"`` (gpt_oss_provider.py v0.2.2, gpt_oss_bridge.py v0.4.x+; the v0.5.1 performance
script also sets ``apply_rope_fusion = False``); Megatron-Core itself falls back to the unfused
path whenever the YaRN concentration factor (``mscale``) is not 1, since Transformer Engine's
fused RoPE has no such scale (``apply_rotary_pos_emb``, megatron/core/models/common/embeddings/
rope_utils.py, NVIDIA/Megatron-LM 987395813b "Fixes for gpt-oss", 2025-11, unchanged at
d98e8a64). So every GPT-OSS run of the corpus' Megatron-Bridge releases takes
``_apply_rotary_pos_emb_bshd``, once for the query and once for the key (attention.py,
``split_qkv``). Counted from that function, in bf16 read-and-write passes over the tensor
(`torch_kernels.copy_pass`), against the fused kernel's one pass each way:

- forward, per tensor: ``t * cos_`` (1), ``_rotate_half``: ``-x2`` over half (0.5) and
  ``torch.cat((-x2, x1))`` (1), ``* sin_`` (1), the sum (reads 2, writes 1: 1.5) and the final
  ``torch.cat((t, t_pass))`` with an empty ``t_pass`` (a copy: 1): 6 kernels, 6 passes, 5 more
  than the fused one; plus the cos / sin tables of [seq, head_dim] fp32 recomputed per call
  (``cos``, ``* mscale``, ``.to``; the same for ``sin``): 6 small kernels.
- backward, per tensor: the gradient times ``sin_`` (1), ``neg`` over half (0.5), the chunk's
  backward ``cat`` (1), times ``cos_`` (1) and the sum of the two paths into ``t`` (1.5): 5
  kernels, 5 passes, 4 more than the fused one.

Switched by framework (`MEGATRON_ROPE_FRAMEWORKS`) and by the model
(`ModelSpec.rope_attention_factor` != 1, read from the HF ``rope_scaling``); MLA models
(DeepSeek) apply their rotary in the MLA module and are left as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from analytical.dtypes import DType
from analytical.layer_spec import Node, heads_per_rank
from analytical.memory import Framework
from analytical.model_spec import ModelSpec
from analytical.ops import MemoryBoundSpec
from simulate.torch_kernels import copy_pass

__all__ = ["ROPE_EXTRA_PASSES", "TABLE_KERNELS", "unfused_rope_nodes"]

MEGATRON_ROPE_FRAMEWORKS = frozenset({Framework.MEGATRON, Framework.NEMO})

ROPE_EXTRA_PASSES = (5.0, 4.0)  # (forward, backward) passes per tensor beyond the fused one
TABLE_KERNELS = 6  # cos / sin of the [seq, head_dim] fp32 frequencies, per tensor, forward


def unfused_rope_nodes(fwd: Sequence[Node], model: ModelSpec, framework: str, tp: int,
                       seq: int, dtype: DType) -> tuple[list[Node], list[Node]]:
    """Forward and backward passes that the eager YaRN rotary adds to the graph's fused
    ``rotary`` node (module docstring), for the query and the key of ``tp``'s heads over
    ``seq`` positions per sequence; none when the layer has no such node or the
    framework / model fuses it."""
    if (Framework(framework) not in MEGATRON_ROPE_FRAMEWORKS
            or model.rope_attention_factor == 1.0 or model.is_mla):
        return [], []
    rotary = next((n.op for n in fwd if n.name == "rotary"), None)
    if not isinstance(rotary, MemoryBoundSpec):
        return [], []
    heads, kv_heads = heads_per_rank(model, tp)
    out_f: list[Node] = []
    out_b: list[Node] = []
    for name, width in (("q", heads), ("k", kv_heads)):
        cols = width * model.head_dim
        node = f"rotary.unfused_{name}"
        out_f.append(copy_pass(node, rotary.rows, cols, ROPE_EXTRA_PASSES[0], dtype))
        out_f.append(copy_pass(f"rotary.tables_{name}", seq, model.head_dim, TABLE_KERNELS,
                               DType.FP32))
        out_b.append(copy_pass(f"{node}.bwd", rotary.rows, cols, ROPE_EXTRA_PASSES[1], dtype))
    return out_f, out_b
