# SPDX-License-Identifier: Apache-2.0
"""Which parameters one GPU of one pipeline stage holds (before any ZeRO/FSDP sharding).

Layout (Megatron-LM / Megatron-Core conventions): layers are cut into pp * vpp contiguous chunks
and stage i holds chunks i, i + pp, i + 2*pp, ... (a stage gets ceil(layers / (pp*vpp)) layers
per chunk, the last ones fewer; `PipelineSplit` may count the embedding and the loss as a layer
each); the embedding sits on the first stage, the final norm and LM
head on the last. Attention, MLP, expert and vocabulary matrices are split over tp; norms and
routers are replicated. Routed experts are split over ep, each expert also over ``etp`` ranks
(0 = tp, Megatron-Core's default; see `analytical.parallel`). Memory totals live in
`analytical.memory`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analytical.activations import check_tensor_parallel
from analytical.errors import SpecError
from analytical.model_spec import ModelSpec
from analytical.parallel import PipelineSplit


@dataclass(frozen=True, slots=True, kw_only=True)
class StageParams:
    """Parameter counts on one GPU of one pipeline stage."""

    dense: float  # everything except routed experts (replicated over dp)
    expert: float  # routed-expert weights (replicated over dp / ep)
    linear: float  # block matmul weights (quantisable), experts included
    largest_layer: float  # the biggest layer's parameters on this GPU
    layer_is_moe: tuple[bool, ...]  # one entry per layer this stage holds
    has_embedding: bool
    has_lm_head: bool

    @property
    def total(self) -> float:
        return self.dense + self.expert


def is_moe_layer(model: ModelSpec, index: int) -> bool:
    """Whether layer ``index`` (0-based) has routed experts (`ModelSpec.moe_layer_indices`: the
    DeepSeek first-dense / frequency rule, or an explicit list such as Llama 4's)."""
    return index in model.moe_layer_indices


def chunk_layers(layers: int, n_virtual: int,
                 split: PipelineSplit = PipelineSplit.EVEN) -> list[range]:
    """0-based layer indices of each virtual chunk (stage v % pp, chunk v // pp), in order:
    ceil(slots / n_virtual) slots per chunk, the last ones fewer, where the slots are the layers
    plus, under ``embedding-loss``, one for the embedding (first) and one for the loss (last)."""
    extra = 1 if split == PipelineSplit.EMBEDDING_LOSS else 0
    slots = layers + 2 * extra
    if slots < n_virtual:
        raise SpecError("parallel.pp", f"pp*vpp={n_virtual} exceeds layers={layers}")
    per = math.ceil(slots / n_virtual)
    return [range(max(0, v * per - extra), max(0, min((v + 1) * per - extra, layers)))
            for v in range(n_virtual)]


def stage_layers(layers: int, *, pp: int, vpp: int = 1, stage: int = 0,
                 split: PipelineSplit = PipelineSplit.EVEN) -> list[int]:
    """0-based layer indices held by pipeline ``stage`` (see the module docstring)."""
    if not 0 <= stage < pp:
        raise SpecError("stage", f"must be in [0, {pp}), got {stage}")
    chunks = chunk_layers(layers, pp * vpp, split)
    held = [i for v in range(vpp) for i in chunks[v * pp + stage]]
    if not held:
        raise SpecError("parallel.pp", f"pipeline stage {stage} of pp={pp}, vpp={vpp} holds no "
                        f"layer of {layers} ({split} split)")
    return held


def stage_params(model: ModelSpec, *, tp: int = 1, pp: int = 1, vpp: int = 1, ep: int = 1,
                 stage: int = 0, etp: int = 0,
                 split: PipelineSplit = PipelineSplit.EVEN) -> StageParams:
    """Parameters of ``stage`` on one GPU; raises SpecError naming the parallel degree that does
    not divide the model."""
    for name, value in (("tp", tp), ("pp", pp), ("vpp", vpp), ("ep", ep)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"parallel.{name}", f"must be an integer >= 1, got {value!r}")
    check_tensor_parallel(model, tp)
    if model.is_moe and model.num_experts % ep:
        raise SpecError("parallel.ep", f"num_experts={model.num_experts} is not divisible by "
                        f"ep={ep}")
    if not model.is_moe and ep > 1:
        raise SpecError("parallel.ep", f"ep={ep} needs an MoE model; {model.name} is dense")
    attention = model.attention_params_per_layer / tp
    norms = model.norm_params_per_layer
    dense_mlp = model.dense_mlp_params / tp
    experts = (model.num_experts // ep * model.expert_params / (etp or tp) if model.is_moe
               else 0.0)
    shared = model.shared_expert_params / tp
    moe_dense = shared + model.router_params_per_layer

    indices = stage_layers(model.layers, pp=pp, vpp=vpp, stage=stage, split=split)
    flags = tuple(is_moe_layer(model, i) for i in indices)
    n_moe = sum(flags)
    n_dense = len(flags) - n_moe
    dense = len(flags) * (attention + norms) + n_dense * dense_mlp + n_moe * moe_dense
    expert = n_moe * experts
    linear = len(flags) * attention + n_dense * dense_mlp + expert + n_moe * shared
    has_embedding, has_lm_head = stage == 0, stage == pp - 1
    token_table = model.vocab * model.hidden  # vocab-parallel over tp
    if has_embedding:  # a learned position table (the rest) is replicated
        dense += token_table / tp + (model.embedding_params - token_table)
    if has_lm_head:
        # Tied embeddings: Megatron keeps a copy of the embedding on the last stage when pp > 1.
        head = model.lm_head_params or (token_table if pp > 1 else 0)
        dense += head / tp + model.final_norm_params
    largest = max(attention + norms + (experts + moe_dense if moe else dense_mlp)
                  for moe in set(flags))
    return StageParams(dense=dense, expert=expert, linear=linear, largest_layer=largest,
                       layer_is_moe=flags, has_embedding=has_embedding, has_lm_head=has_lm_head)

