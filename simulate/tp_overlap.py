# SPDX-License-Identifier: Apache-2.0
"""What Transformer Engine's userbuffers TP overlap costs the GEMM it hides behind.

A forward reduce-scatter (proj_fprop, fc2_fprop) overlaps with the "pipeline" method: the GEMM
is cut into ``num_splits`` chunks, each chunk's reduce-scatter runs on ``num_sm`` SMs beside the
next chunk's GEMM, and with ``set_sm_margin`` every chunk's GEMM is launched on the SMs the
communication kernel leaves (units - num_sm), for the whole GEMM, not only while a chunk's
collective runs. TE's defaults for the method (transformer_engine/pytorch/module/base.py,
`initialize_ub.get_default_config`, TE 2.x): ``num_sm`` 16, ``cga_size`` 2,
``set_sm_margin`` True, ``num_splits`` 4; ring exchange ``num_sm`` 1, no margin, tp chunks.
The margin default came with TE 2.0 (commit 544dd14b, 2025-02-07; tag v2.0 e5cc6c29): every
TE 1.x release (v1.2 4f9662fb to v1.8: `initialize_ub`'s ``add_ub(..., set_sm_margin=0)``;
v1.9 to v1.13 e5edd6cc: `get_default_config` ``"set_sm_margin": False``) runs the pipelined
GEMM on all SMs beside the 16 communication SMs, i.e. the generic contention of
`simulate.overlap`, so the
run's TE version (`TrainingSpec.transformer_engine`) decides it (`rs_gemm_margin`).
Bulk (the backward's dgrad / wgrad collectives beside a different GEMM) keeps its own
``num_sm`` without a margin, i.e. the generic contention: TE 2.x's
default would set the margin for bulk too (TE 1.x's for no method), but NeMo's and Bridge's
configs set ``set_sm_margin`` 0 for every bulk overlap and 1 for the pipelined ones
(NeMo-Framework-Launcher `ub_cfg_*.yaml`, every H100 config at e5abe838; Bridge
`BulkOverlapCfg(..., set_sm_margin=False)` in 70 of 70 uses at 067f987d), so a NeMo run has
the pipeline margin whatever its TE version. Megatron-LM's
``--tp-comm-overlap`` without ``--tp-comm-overlap-cfg`` runs TE's defaults; NeMo's and
Megatron-Bridge's per-model configs set 8-32 SMs for the two pipelined GEMMs
(NeMo-Framework-Launcher 24.07 `conf/training/tp_overlap/ub_cfg_h100_h8192_tp4_mbs1_seqlen4096
.yaml` at e5abe838: proj_fprop 24, fc2_fprop 16; Megatron-Bridge
`src/megatron/bridge/training/comm_overlap.py` at 0685ff5d: bf16 H100 configs 8-24), and the
corpus does not say which config a run used, so the TE default's 16 SMs is taken for all.

Both split methods run the GEMM as chunks along the tokens (`CommOverlapP2P` / `CommOverlap`
in transformer_engine/common/comm_gemm_overlap): ring exchange (qkv_fprop, fc1_fprop,
proj_dgrad, fc2_dgrad, the GEMMs an all-gather feeds) as tp GEMMs of m / tp rows, the pipeline
as ``num_splits`` GEMMs of m / num_splits rows. Smaller GEMMs run at a lower rate, so the split
GEMM is priced as that many chunks by the engine chain (`chunked_gemms`). The backward's
re-gather for the wgrad overlaps in bulk (whole GEMM, not split).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from analytical.hardware import HardwareSpec
from analytical.layer_backward import REGATHER
from analytical.layer_spec import Stream
from analytical.memory import Framework
from analytical.ops import GemmSpec, OpSpec
from simulate.efficiency import TE_USERBUFFERS, tp_overlap_exposes_bwd_rs, tp_overlap_rs_splits
from simulate.engines import Estimate
from simulate.graph import Block, Node

TE_PIPELINE_NUM_SM = 16  # initialize_ub default num_sm of the "pipeline" method (set_sm_margin on)


def te_major(version: str) -> int:
    """The major number of a Transformer Engine version ("1.8" -> 1)."""
    return int(str(version).split(".")[0])


def rs_gemm_margin(framework: str, hw: HardwareSpec, te_version: str) -> float:
    """Factor on the time of a GEMM whose reduce-scatter TE pipelines under ``set_sm_margin``
    (units / (units - num_sm)): TE >= 2.0's default, and NeMo's configs at any version; 0.0
    (the generic contention) for TE 1.x's defaults or where the framework does not run TE
    userbuffers."""
    fw = Framework(framework)
    if fw not in TE_USERBUFFERS or hw.compute_units <= 0:
        return 0.0
    if fw != Framework.NEMO and te_major(te_version) < 2:
        return 0.0
    return hw.compute_units / max(1, hw.compute_units - TE_PIPELINE_NUM_SM)


def pipelined_rs_extra_s(gemm_s: float, chunks_s: float, comm_s: float, splits: int,
                         margin: float) -> float:
    """Time a pipelined reduce-scatter adds to its GEMM (``gemm_s`` whole, ``chunks_s`` as
    ``splits`` chunks): each chunk at ``margin`` times its full-GPU time, chunk i's
    reduce-scatter beside chunk i+1's GEMM, the last chunk's reduce-scatter exposed."""
    n = max(1, splits)
    g, c = chunks_s * margin / n, comm_s / n
    return g + (n - 1) * max(g, c) + c - gemm_s


def _split_gemms(nodes: Sequence[Node], tp: int, splits: int) -> dict[str, tuple[GemmSpec, int]]:
    """The GEMMs of one pass TE splits, by op key, with their chunk count: the GEMM after each
    TP all-gather but the wgrad re-gather (ring exchange, tp chunks) and, with ``splits``, the
    GEMM before each reduce-scatter (pipeline)."""
    out: dict[str, tuple[GemmSpec, int]] = {}
    for i, node in enumerate(nodes):
        if node.stream != Stream.TP:
            continue
        kind = getattr(node.op, "kind", "")
        if kind == "all_gather" and not node.name.endswith(REGATHER):
            found, n = [m for m in nodes[i + 1:] if isinstance(m.op, GemmSpec)][:1], tp
        elif kind == "reduce_scatter" and splits:
            found, n = [m for m in nodes[:i] if isinstance(m.op, GemmSpec)][-1:], splits
        else:
            continue
        for g in found:
            out[g.op.key] = (g.op, n)  # type: ignore[assignment]
    return out


def chunked_gemms(blocks: Mapping[Any, Block], tp: int, rs_splits: int,
                  estimate: Callable[[list[OpSpec]], list[Estimate]]) -> dict[str, float]:
    """Seconds of each GEMM TE splits, run as its chunks (op key -> chunks' total), priced by
    ``estimate`` (the run's engine chain and framework corrections); forward reduce-scatters
    only are pipelined (`efficiency.tp_overlap_rs_splits`)."""
    split: dict[str, tuple[GemmSpec, int]] = {}
    for b in blocks.values():
        split |= _split_gemms(b.fwd, tp, rs_splits) | _split_gemms(b.bwd, tp, 0)
    split = {k: (op, n) for k, (op, n) in split.items() if n > 1}
    chunks: list[OpSpec] = [replace(op, m=-(-op.m // n)) for op, n in split.values()]
    est = estimate(chunks) if chunks else []
    return {k: e.latency_s * n for (k, (_, n)), e in zip(split.items(), est, strict=True)}


def split_gemm_s(whole_s: float, chunks_s: float) -> float:
    """A split GEMM's time: its chunks', never below the whole GEMM's (the library could have
    run the whole as those chunks, so a chain pricing them faster contradicts itself)."""
    return max(whole_s, chunks_s)


def tp_overlap_args(framework: str, tp: int, hw: HardwareSpec, blocks: Mapping[Any, Block],
                    estimate: Callable[[list[OpSpec]], list[Estimate]],
                    tp_comm: bool, te_version: str) -> dict[str, Any]:
    """`simulate.costs.block_cost`'s TP-overlap switches for the framework: the forward
    reduce-scatters' chunks and their GEMM's SM margin, the split GEMMs' time as chunks (TE
    userbuffers with ``tp_comm``), the backward reduce-scatters exposed or not; ``te_version``:
    the run's Transformer Engine, whose defaults decide the margin (`rs_gemm_margin`)."""
    splits = tp_overlap_rs_splits(framework, tp)
    te = tp_comm and tp > 1 and Framework(framework) in TE_USERBUFFERS
    return {"rs_splits": splits, "rs_margin": rs_gemm_margin(framework, hw, te_version),
            "chunked": chunked_gemms(blocks, tp, splits, estimate) if te else {},
            "bwd_rs_exposed": tp_overlap_exposes_bwd_rs(framework)}
