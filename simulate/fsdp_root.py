# SPDX-License-Identifier: Apache-2.0
"""ZeRO-3/FSDP's root unit: the parameters outside the transformer blocks, gathered and reduced
around each micro-batch with nothing to hide behind (`fsdp_root_block`), placed at the front of
the stage's first chunk by `with_root_keys` (used by `simulate.training` and the search)."""

from __future__ import annotations

from typing import Any

from analytical.layer_spec import Stream
from analytical.layers import coll
from analytical.model_spec import ModelSpec
from analytical.ops import CollectiveKind
from analytical.parallel import ParallelConfig
from simulate.efficiency import grad_reduce_dtype
from simulate.graph import Block, TrainStep

__all__ = ["fsdp_root_block", "fsdp_root_blocks", "has_fsdp_root", "with_root_keys"]


def fsdp_root_block(model: ModelSpec, step: TrainStep, *, embedding: bool, head: bool,
                    pp: int) -> Block:
    """ZeRO-3/FSDP's root unit: the parameters outside the transformer blocks (embedding, final
    norm, untied LM head) are sharded by the root module (torchtitan `fully_shard(model)` after
    the blocks; Composer's root FSDP module around llm-foundry's `wte` and `norm_f`). Its
    all-gather is the first thing a micro-batch's forward waits for, and its gradients'
    reduce-scatter runs after the last backward operator: neither has compute to hide behind
    (no compute node here, so `costs` exposes both). The root is not resharded after forward
    (FSDP2 `_lazy_init` keeps the root unsharded; FSDP1 `_post_forward_reshard`: "do not free
    the root's parameters in the post-forward"), so its backward needs no second gather."""
    sh, act = step.sharding, step.precision.act
    table = model.vocab * model.hidden
    params = 0.0
    if embedding:
        params += table / sh.tp + model.embedding_params - table
    if head:
        params += (model.lm_head_params or (table if pp > 1 else 0)) / sh.tp
        params += model.final_norm_params
    grad = grad_reduce_dtype(step.framework, act)
    ag = coll("fsdp_root_all_gather", CollectiveKind.ALL_GATHER, params * act.bytes,
              sh.fsdp_group, sh.fsdp_rpn, Stream.FSDP, act)
    rs = coll("fsdp_root_reduce_scatter", CollectiveKind.REDUCE_SCATTER, params * grad.bytes,
              sh.fsdp_group, sh.fsdp_rpn, Stream.FSDP, grad)
    return Block(name="fsdp_root", fwd=(ag,), bwd=(rs,))


def has_fsdp_root(par: ParallelConfig) -> bool:
    """Whether the embedding / head parameters are sharded in a root unit (`fsdp_root_block`)."""
    return par.fsdp_group > 1


def fsdp_root_blocks(model: ModelSpec, step: TrainStep, *, pp: int) -> dict[str, Block]:
    """The root unit of the first stage (embedding; the head too when pp == 1) and of the last
    (head), keyed as `with_root_keys` places them; none without ZeRO-3/FSDP sharding."""
    if step.sharding.fsdp_group <= 1:
        return {}
    out = {"fsdp_root.first": fsdp_root_block(model, step, embedding=True, head=pp == 1, pp=pp)}
    if pp > 1:
        out["fsdp_root.last"] = fsdp_root_block(model, step, embedding=False, head=True, pp=pp)
    return out


def with_root_keys(chunks: list[list[Any]], par: ParallelConfig) -> list[list[Any]]:
    """Per-chunk block keys with the root unit in front of the first chunk (and of the last
    chunk's stage when pp > 1)."""
    if not has_fsdp_root(par):
        return chunks
    out = [list(keys) for keys in chunks]
    out[0].insert(0, "fsdp_root.first")
    if par.pp > 1:
        out[-1].insert(0, "fsdp_root.last")
    return out
