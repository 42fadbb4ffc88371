# SPDX-License-Identifier: Apache-2.0
"""The set-up `count_moe_ops.py` and `time_moe_layer_cpu.py` share: their common command-line
options, one CPU gloo rank per EP rank (spawned, results gathered through a queue), Megatron-Core's
model-parallel state and the MoE fields of the ``TransformerConfig`` both build. Each script keeps
what it measures and the columns it writes. Must run where ``megatron-core`` and torch import
(see either script).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["add_layer_options", "gloo_rank", "moe_config", "run_ranks"]


def add_layer_options(p: argparse.ArgumentParser, *, ep: list[int], tokens: list[int],
                      port: int) -> None:
    """The options of the layer both scripts build, its EP sizes and token counts, the first
    rendezvous port and the output file."""
    p.add_argument("--ep", type=int, nargs="+", default=ep)
    p.add_argument("--tokens", type=int, nargs="+", default=tokens)
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--ffn", type=int, default=32)
    p.add_argument("--port", type=int, default=port)
    p.add_argument("--out", type=Path, required=True)


def run_ranks(target: Callable[..., None], world: int, *args: Any) -> list[Any]:
    """Spawn ``world`` processes running ``target(rank, world, *args, queue)`` and return what
    each put on the queue (one item per rank, in arrival order)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, world, *args, q)) for r in range(world)]
    for pr in procs:
        pr.start()
    got = [q.get() for _ in procs]
    for pr in procs:
        pr.join()
    return got


@contextmanager
def gloo_rank(rank: int, world: int, port: int) -> Iterator[None]:
    """One EP rank on CPU: a gloo process group at ``port``, a seed per rank and one thread
    (so the CPU times are one core's); waits for every rank before tearing the group down."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1234 + rank)
    torch.set_num_threads(1)
    yield
    dist.barrier()
    dist.destroy_process_group()


def moe_config(args: argparse.Namespace, ep: int, **fields: Any):  # noqa: ANN201
    """Megatron-Core's model-parallel state for EP ``ep`` (TP 1) and a one-layer
    ``TransformerConfig`` of the MoE both scripts run (the all-to-all dispatcher, aux-loss
    routing in fp32, unfused permutation, per-expert GEMMs, no biases, SwiGLU, CPU
    initialisation), with ``fields`` added or overriding."""
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1,
                                             expert_model_parallel_size=ep)
    common = dict(
        num_layers=1, hidden_size=args.hidden, num_attention_heads=4,
        ffn_hidden_size=args.ffn, moe_ffn_hidden_size=args.ffn, num_moe_experts=args.experts,
        moe_router_topk=args.topk, moe_token_dispatcher_type="alltoall",
        moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-3,
        moe_grouped_gemm=False, moe_permute_fusion=False, moe_router_dtype="fp32",
        expert_model_parallel_size=ep, use_cpu_initialization=True,
        perform_initialization=True, add_bias_linear=False, gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, bias_activation_fusion=False,
        sequence_parallel=False)
    return TransformerConfig(**{**common, **fields})
