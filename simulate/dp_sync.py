# SPDX-License-Identifier: Apache-2.0
"""The data-parallel collectives of one pipeline stage: the bucketed gradient reduction after
the backward and the distributed optimizer's parameter all-gather after the step.

Megatron-Core's DDP keeps the routed experts' parameters and gradients in buffers of their own
(`expert_parallel_buffers`), reduced and gathered over the expert data-parallel group
(`intra_expt_dp_group`: dp*tp*cp / (ep*etp) ranks) while every other parameter uses dp*cp
(`intra_dp_cp_group`; megatron/core/distributed/distributed_data_parallel.py at d98e8a64,
`start_grad_sync` / `start_param_sync` walk both kinds of bucket group). With EP inside an
8-GPU node the expert group has one rank per node, so its collectives cross the network.
Shared by `simulate.training` and the search's evaluator, which size their buckets with
`bucket_bytes`.
"""

from __future__ import annotations

import math
from typing import Any

from analytical.layer_spec import ranks_per_node
from analytical.memory import Framework
from analytical.ops import CollectiveKind, CollectiveSpec
from analytical.parallel import ParallelConfig
from analytical.stage import StageParams
from simulate.engines import EngineChain

__all__ = ["bucket_bytes", "collective_spec", "grad_bucket_queues", "param_gathers"]

# Megatron-Core's DDP bucket default, in parameters of the gradient buffer: max(40M, 1M x the
# data-parallel group without CP), "to ensure that chunks used in NCCL ring-reduce
# implementations are large enough to remain bandwidth-bound rather than latency-bound"; with
# overlap_grad_reduce off the bucket is unbounded (one per buffer). The same bucket size serves
# the dense and the expert buffers. megatron/core/distributed/distributed_data_parallel.py at
# d98e8a64 (`dp_group`: process_groups_config.py, with_context_parallel=False); since 0fda386c
# (2024-04, "Tune DDP bucket size to improve speed at large DP counts"), in core_r0.8.0 on.
MCORE_DDP = frozenset({Framework.MEGATRON, Framework.NEMO})
MCORE_BUCKET_PARAMS = 40_000_000
MCORE_BUCKET_PARAMS_PER_DP_RANK = 1_000_000
DEFAULT_BUCKET_MB = 40.0  # other frameworks: llmsim's long-standing default


def bucket_bytes(framework: str, stated_mb: float | None, dp: int, grad_bytes: float,
                 overlap: bool) -> float:
    """One gradient bucket's bytes: Megatron-Core's rule for its frameworks (one bucket per
    buffer without overlap, as Megatron sets it whatever was configured); elsewhere the
    stated ``dp_bucket_mb``, or 40 MB."""
    mcore = Framework(framework) in MCORE_DDP
    if mcore and not overlap:
        return math.inf
    if stated_mb is not None:
        return stated_mb * 1e6
    if mcore:
        return max(MCORE_BUCKET_PARAMS, MCORE_BUCKET_PARAMS_PER_DP_RANK * dp) * grad_bytes
    return DEFAULT_BUCKET_MB * 1e6


def collective_spec(kind: CollectiveKind, size: float, group: int, rpn: int) -> CollectiveSpec:
    return CollectiveSpec(kind=kind, size_bytes=max(1, int(size)), group_size=group,
                          ranks_per_node=rpn)


def _groups(par: ParallelConfig, sp: StageParams, gpn: int) -> list[tuple[float, int, int]]:
    """(parameters, group, ranks per node) of the dense and the expert buffers."""
    es = par.expert_shard_group
    return [(sp.dense, par.shard_group, ranks_per_node(par.shard_group, par.tp, gpn)),
            (sp.expert, es, ranks_per_node(es, par.expert_tp * par.ep, gpn))]


def grad_bucket_queues(par: ParallelConfig, sp: StageParams, gpn: int, chain: EngineChain,
                       bucket_bytes: float, grad_bytes: float
                       ) -> tuple[CollectiveKind, list[tuple[int, Any, Any]]]:
    """A stage's gradient queues with something to reduce (dense over dp*cp, then experts over
    the expert shard group; none under ZeRO-3/FSDP): the collective kind and, per queue,
    (buckets n, full-bucket estimate, last-bucket estimate). n-1 full buckets and one
    remainder: two distinct shapes, estimated once each. ``bucket_bytes``: `bucket_bytes`
    (inf: one bucket per buffer)."""
    kind = CollectiveKind.ALL_REDUCE if par.zero_stage == 0 else CollectiveKind.REDUCE_SCATTER
    queues = []
    for params, group, rpn in (_groups(par, sp, gpn) if par.zero_stage < 3 else []):
        if group == 1 or params <= 0:
            continue
        total = params * grad_bytes
        n = max(1, math.ceil(total / bucket_bytes))
        full, last = chain.estimate_many([
            collective_spec(kind, min(bucket_bytes, total), group, rpn),
            collective_spec(kind, total - (n - 1) * bucket_bytes if n > 1 else total, group,
                            rpn)])
        queues.append((n, full, last))
    return kind, queues


def param_gathers(par: ParallelConfig, sp: StageParams, gpn: int, chain: EngineChain
                  ) -> list[Any]:
    """The distributed optimizer's bf16 parameter all-gathers after the step (ZeRO 1-2), run one
    after another: the dense buffer over dp*cp and the expert buffer over the expert shard
    group (not all parameters over dp*cp, which put an EP-8 row's expert gather on 8 ranks per
    node instead of one)."""
    if not 1 <= par.zero_stage < 3:
        return []
    specs = [collective_spec(CollectiveKind.ALL_GATHER, p * 2, g, r)
             for p, g, r in _groups(par, sp, gpn) if g > 1 and p > 0]
    return list(chain.estimate_many(specs)) if specs else []
