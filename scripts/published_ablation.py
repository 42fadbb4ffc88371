# SPDX-License-Identifier: Apache-2.0
"""What each framework effect moves in ``llmsim validate published``: switch the effects on one
at a time (cumulatively) and print the per-source table after each.

Usage: python scripts/published_ablation.py [--store] [--sources a,b]
(roofline only by default: --no-store --no-predictors). The effects are switched off by
patching the functions that implement them, so each step runs the code the CLI runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Any
from unittest import mock

import analytical.memory as memory
import simulate.dtensor_tp as dtensor_tp
import simulate.efficiency as efficiency
import simulate.graph as graph
import simulate.moe_host as moe_host
import simulate.scenario as scenario
import simulate.torch_kernels as torch_kernels
import simulate.training as training
from analytical.activations import activation_bytes_per_layer
from analytical.dtypes import DType, parse_dtype
from analytical.hardware import get_hardware
from analytical.layer_backward import recompute_nodes
from analytical.parallel import Recompute
from simulate.validate import corpus_row
from simulate.validate import published as pub


def _selective_as_megatron(model, parallel, *, micro_batch, seq_len, **_):
    return activation_bytes_per_layer(model, parallel, micro_batch=micro_batch, seq_len=seq_len,
                                      recompute=Recompute.SELECTIVE)


def _default_gather(parallel, stage, framework, param_dtype_bytes):
    if parallel.zero_stage < 3:
        return 0.0
    return memory.ZERO3_GATHERED_LAYERS * stage.largest_layer * param_dtype_bytes


_measured_tps = pub._measured_tps


def _causal_tps(row):
    return _measured_tps({**row, "attention_flops": ""})


_bool = pub._bool


def _no_tp_overlap(row, key):
    return False if key == "tp_comm_overlap" else _bool(row, key)


_get = pub._get
_loss_upcast = torch_kernels.loss_upcast_nodes


def _no_triton(row, key):
    value = _get(row, key)
    return "" if key == "attention" and value == "flash-triton" else value


_inflight_factor = memory._inflight_factor
_host_bound = moe_host.host_bound_costs


def _no_graphs(costs, blocks, step, est, hw, graphs=()):
    return _host_bound(costs, blocks, step, est, hw)


def _uncapped_inflight(parallel, schedule, num_microbatches, stage=0):
    """Before the cap: stage 0's pp * (1 + (pp-1)/(pp*vpp)) micro-batches even when m == pp."""
    if schedule == "interleaved":
        pp = parallel.pp
        return pp * (1.0 + (pp - 1) / (pp * parallel.vpp))
    return _inflight_factor(parallel, schedule, num_microbatches, stage)


# (label, patches that switch the effect OFF); applied cumulatively from the last one backwards.
EFFECTS: list[tuple[str, list[tuple[Any, str, Any]]]] = [
    ("mfu vs training-precision peak", []),  # handled in the runner wrapper
    ("megatron fp32 main grads", [(scenario, "framework_grad_bytes", lambda f, p=2.0: 2.0)]),
    ("torchtitan per-op SAC", [(memory, "op_sac_bytes_per_layer", _selective_as_megatron)]),
    ("torchtitan no reshard under PP (+ fp32 unsharded grads)",
     [(memory, "_gathered_weights", _default_gather)]),
    ("loss working set per framework",
     [(memory, "_logit_bytes", lambda f, compiled=False: memory.LOGITS_BYTES)]),
    ("TE fp8 saved linear inputs (megatron/nemo)", [(memory, "_saves_fp8_inputs", lambda f: False)]),
    ("unstated recompute: least that fits", [(pub, "UNSTATED_RECOMPUTE", ("none",))]),
    ("unstated micro-batch: torchtitan pp split",
     [(corpus_row, "_micro_batch", lambda row, par, fw: int(row.get("micro_batch") or 1))]),
    ("source's attention-FLOPs convention for derived tokens/s",
     [(pub, "_measured_tps", _causal_tps)]),
    ("attention backend per framework (FA2 / cuDNN on Hopper)",
     [(training, "framework_estimates", lambda ops, est, hw, fw, **_: list(est))]),
    ("torchtitan per-op SAC recompute time",
     [(graph, "recompute_nodes",
       lambda fwd, rc, per_op=False, modules=(): recompute_nodes(fwd, rc, modules=modules))]),
    ("fp8 cast passes per framework",
     [(graph, "fp8_cast_nodes", lambda fwd, fw, recipe="tensorwise": ([], []))]),
    ("TP communication overlap where the source states it", [(pub, "_bool", _no_tp_overlap)]),
    ("FSDP reduce-scatter in fp32 (torchtitan, Composer)",
     [(graph, "grad_reduce_dtype", lambda fw, act: act)]),
    ("llm-foundry sweeps' Triton flash attention (source's attn_impl)",
     [(pub, "_get", _no_triton)]),
    ("DP gradient reduction in fp32 (Megatron bf16, Composer, torchtitan)",
     [(training, "grad_reduce_dtype", lambda fw, act: act)]),
    ("PyTorch-generated reductions at their bandwidth fraction (torchtitan, Hopper)",
     [(efficiency, "FRAMEWORK_REDUCTIONS", {})]),
    ("interleaved 1F1B activations per stage, capped at m micro-batches (Megatron-Core warm-up)",
     [(memory, "_inflight_factor", _uncapped_inflight)]),
    ("TE userbuffers: forward TP reduce-scatter pipelined in 4 chunks (Megatron/NeMo)",
     [(efficiency, "tp_overlap_rs_splits", lambda fw, tp=1: 0)]),
    ("eager composite kernels where the source says so (column compile)",
     [(torch_kernels, "EAGER_TRAFFIC", {})]),
    ("torchao fp8 rowwise backward passes (column fp8_recipe)",
     [(torch_kernels, "rowwise_nodes", lambda name, op: [])]),
    ("llm-foundry flash path: unpad / pad copies around attention",
     [(graph, "unpad_nodes", lambda fwd, fw, attention: ([], []))]),
    ("ZeRO-3/FSDP root unit (embedding / head) gathered and reduced exposed",
     [(training, "fsdp_root_blocks", lambda model, step, pp: {}),
      (training, "with_root_keys", lambda chunks, par: chunks)]),
    ("sustained 16-bit GEMM ceiling under the power limit (hardware efficiency.sustained_gemm)",
     [(efficiency, "sustained", lambda op, e, hw: e)]),
    ("MoE host floor at the host CPU's op time (hardware node.host_op_us; Grace 2.75x)",
     [(moe_host, "host_kernel_s", lambda hw: moe_host.x86_kernel_s())]),
    ("recipes' CUDA graphs off the MoE host floor (column cuda_graph)",
     [(training, "host_bound_costs", _no_graphs)]),
    ("Megatron-Core unfused cross entropy (Megatron-LM default; column cross_entropy_fusion)",
     [(graph, "unfused_loss_nodes", lambda fw, fusion, head: ([], []))]),
    ("torchtitan async TP: SymmetricMemory chunked reduce-scatter and partial sum",
     [(efficiency, "SYMM_MEM_TP", frozenset()), (torch_kernels, "SYMM_MEM_TP", frozenset())]),
    ("torchtitan loss compiled with the model since 2025-04 (column compile_loss)",
     [(memory, "COMPILED_CROSS_ENTROPY_BYTES", memory.FP32_CROSS_ENTROPY_BYTES),
      (graph, "loss_upcast_nodes", lambda fw, head, compiled=False: _loss_upcast(fw, head))]),
    ("torchtitan context parallel: PyTorch's fp32 merges around the SDPA ring",
     [(graph, "ring_merge_nodes", lambda fw, fwd, cp: ([], []))]),
    ("torchtitan async TP: backward SP reduce-scatters not fused (one producer matmul needed)",
     [(efficiency, "SYMM_MEM_BWD_RS_EXPOSED", frozenset())]),
    ("torchtitan DTensor TP: no Megatron re-gather of the SP input in backward",
     [(dtensor_tp, "DTENSOR_TP", frozenset())]),
    ("torchtitan DTensor SP on dim 1: a re-concatenation copy per SP collective",
     [(dtensor_tp, "DTENSOR_SP_COPY", frozenset())]),
    ("torchtitan per-op SAC counts its separate wq / wk / wv and w1 / w3 matmuls",
     [(dtensor_tp, "SEPARATE_PROJECTIONS", frozenset())]),
]


def _runner(base: Callable, bf16_mfu: bool) -> Callable:
    def run(scenario: Mapping[str, Any]) -> Mapping[str, Any]:
        data = dict(base(scenario))
        if bf16_mfu and data.get("mfu") is not None:
            hw = get_hardware(scenario["hardware"]["gpu"])
            prec = parse_dtype(scenario["training"]["precision"])
            data["mfu"] *= hw.peak_flops(prec) / hw.peak_flops(DType.BF16)
        return data

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", action="store_true", help="use the store (no predictors)")
    parser.add_argument("--sources", default=None)
    args = parser.parse_args()
    rows = pub.load_corpus()
    if args.sources:
        rows = [r for r in rows if r["source"] in args.sources.split(",")]
    base = pub.simulate_runner(use_store=args.store, use_predictors=False)
    for on in range(len(EFFECTS) + 1):
        with ExitStack() as stack:
            for _, patches in EFFECTS[on:]:
                for target, name, value in patches:
                    stack.enter_context(mock.patch.object(target, name, value))
            outcomes = pub.score_training(rows, _runner(base, bf16_mfu=on == 0))
        label = "baseline (all effects off)" if on == 0 else f"+ {EFFECTS[on - 1][0]}"
        print(f"\n### {label}\n")
        print(pub.markdown_table(pub.summarize(outcomes), "published_ablation.py",
                                 pub.calibration_note()).split("\n", 2)[2])


if __name__ == "__main__":
    main()
