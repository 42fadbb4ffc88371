# SPDX-License-Identifier: Apache-2.0
"""Count the ATen ops an eager Megatron-Core MoE layer issues per forward and backward, per part.

Runs Megatron-Core's real ``MoELayer`` (local, non-Transformer-Engine spec: ``TopKRouter``,
``MoEAlltoAllTokenDispatcher``, ``SequentialMLP``) on EP ranks started with gloo on CPU, and
records every ATen op with a ``TorchDispatchMode``, labelled by the part of the layer that issued
it (router, preprocess, permute1, dispatch, sort_chunks, experts, unsort_chunks, combine,
unpermute). Each op is classed as
- ``kernel``: an op on device tensors that a GPU run launches as one kernel;
- ``view``: a view / allocation / metadata op (no kernel);
- ``host``: an op whose tensors all live on the host in a GPU run (the token counts after the
  dispatcher's device-to-host copy, the permutation indices on ``permute_idx_device``);
- ``collective``: a c10d op (all-to-all, all-gather);
plus the device-to-host copies and the host syncs (``d2h_event.synchronize()``, ``.item()``,
``.tolist()`` of a device tensor, ops with a data-dependent output size: `SYNC_OPS`) counted
apart; one row per op name. CUDA streams and events are stubbed (the
dispatcher's side stream), so the counts are those of a GPU run's eager code path, not its
timings. Must run in an environment with ``megatron-core`` and torch (NOT the project's venv):

    /tmp/mcore-venv/bin/python scripts/count_moe_ops.py --ep 2 4 8 --tokens 4096 16384 \
        --out datasets/measurements/llmsim/cpu/moe-op-counts/qwen3-moe-alltoall.csv
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
from collections import Counter

import torch
from moe_cpu_harness import add_layer_options, gloo_rank, moe_config, run_ranks
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

VIEW_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach",
            "alias", "lift_fresh", "_unsafe_view", "set_", "resize_", "_reshape_alias"}

# Ops whose output size depends on the data: on CUDA they copy a count to the host and wait
# (``masked_select`` and ``repeat_interleave`` without ``output_size`` go through ``nonzero`` /
# a ``.item()``), so each is a kernel and a host sync.
SYNC_OPS = {"nonzero", "masked_select", "unique", "_unique2", "repeat_interleave"}


class _Stream:
    """Stands for a CUDA stream on CPU: the dispatcher's side-stream calls become no-ops."""

    def wait_stream(self, other: object) -> None:
        pass

    def record_event(self) -> _Event:
        return _Event()


class _Event:
    def synchronize(self) -> None:
        STATE.count("sync", op="d2h_event.synchronize")


class State:
    """Counts per (pass, part, class) of the current recording."""

    def __init__(self) -> None:
        self.on = False
        self.pass_ = "fwd"
        self.part = "other"
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.ops: Counter[tuple[str, str, str, str]] = Counter()  # with the op's name
        self.host: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def count(self, cls: str, n: int = 1, op: str = "") -> None:
        if self.on:
            self.counts[(self.pass_, self.part, cls)] += n
            self.ops[(self.pass_, self.part, cls, op)] += n

    def mark_host(self, t: object) -> None:
        if isinstance(t, torch.Tensor):
            self.host[t] = True


STATE = State()


def _tensors(tree: object) -> list[torch.Tensor]:
    return [x for x in torch.utils._pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


class Counting(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = _tensors((args, kwargs))
        name = func.__name__.split(".")[0]
        ns = func.namespace
        _classify(func, name, ns, ins, out)
        return out


def _classify(func, name: str, ns: str, ins: list[torch.Tensor], out: object) -> None:  # noqa: ANN001
    """Count one dispatched op under its class (module docstring)."""
    host_in = bool(ins) and all(t in STATE.host for t in ins)
    if ns in {"c10d", "_c10d_functional"}:
        cls = "collective"
    elif name == "_local_scalar_dense":
        cls = "host" if host_in else "sync"
    elif func.is_view or name in VIEW_OPS:
        cls = "view"
    else:
        cls = "host" if host_in else "kernel"
    STATE.count(cls, op=f"{ns}.{name}")
    if cls == "kernel" and name in SYNC_OPS:
        STATE.count("sync", op=f"{ns}.{name}")
    if host_in:
        for t in _tensors(out):
            STATE.mark_host(t)


class _Mark(torch.autograd.Function):
    """Identity whose backward labels the ops autograd runs next with its part."""

    @staticmethod
    def forward(ctx, part: str, *ts: torch.Tensor):  # noqa: ANN001
        ctx.part = part
        return ts if len(ts) > 1 else ts[0]

    @staticmethod
    def backward(ctx, *grads):  # noqa: ANN001
        STATE.part = ctx.part
        return (None, *grads)


def _mark(part: str, out: object) -> object:
    """Wrap the grad-requiring tensors of ``out`` in `_Mark` (the part's backward entry)."""
    if isinstance(out, torch.Tensor) and out.requires_grad:
        return _Mark.apply(part, out)
    if isinstance(out, tuple):
        return tuple(_mark(part, o) for o in out)
    return out


def _label(obj: object, attr: str, part: str) -> None:
    fn = getattr(obj, attr)

    def wrapped(*a, **k):  # noqa: ANN002, ANN003
        # the inputs' markers give the backward back to the enclosing part (nested parts)
        prev = STATE.part
        a = tuple(_mark(prev, x) if isinstance(x, torch.Tensor) else x for x in a)
        STATE.part = part
        try:
            out = fn(*a, **k)
        finally:
            STATE.part = prev
        return _mark(part, out)

    setattr(obj, attr, wrapped)


def _patch_cuda() -> None:
    import megatron.core.transformer.moe.token_dispatcher as td

    stream = _Stream()
    torch.cuda.Stream = lambda *a, **k: _Stream()  # type: ignore[assignment,misc]
    torch.cuda.current_stream = lambda *a, **k: stream  # type: ignore[assignment]
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()  # type: ignore[assignment]
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]

    def to_host(tensor, as_numpy=False, record_stream=False):  # noqa: ANN001, ANN202
        if isinstance(tensor, torch.Tensor) and tensor not in STATE.host:
            STATE.count("d2h_copy", op="maybe_move_tensor_to_cpu")
            STATE.mark_host(tensor)
            if as_numpy:
                return tensor.numpy()
        return tensor

    td.maybe_move_tensor_to_cpu = to_host
    # megatron-core 0.15.0's router_gating_linear reads ``te_general_gemm``, defined only when
    # Transformer Engine imports: without TE the PyTorch path runs.
    import megatron.core.transformer.moe.moe_utils as mu

    if not hasattr(mu, "te_general_gemm"):
        mu.te_general_gemm = None
    tolist = torch.Tensor.tolist

    def counted_tolist(self):  # noqa: ANN001, ANN202
        if self not in STATE.host:
            STATE.count("sync", op="tolist")
        return tolist(self)

    torch.Tensor.tolist = counted_tolist  # type: ignore[method-assign]


# Kernels (forward, backward) per call of TE's fused MoE functions, read from TE's code:
# the router's ``FusedTopkScoreFunction``, ``FusedComputeScoresForMoEAuxLoss`` and
# ``FusedAuxLoss`` run one ``tex.fused_*_fwd`` / ``_bwd`` each (transformer_engine/pytorch/
# router.py); permutation (transformer_engine/pytorch/permutation.py with triton/
# permutation.py): ``moe_permute_with_probs`` = ``make_row_id_map`` (three Triton passes) +
# ``permute_with_mask_map``, backward ``unpermute_with_mask_map``; ``moe_sort_chunks_by_index``
# = ``make_chunk_sort_map`` + ``sort_chunks_by_map``, backward ``sort_chunks_by_map``;
# ``moe_unpermute`` = ``unpermute_with_mask_map``, backward ``permute_with_mask_map``.
TE_KERNELS = {"fused_topk_with_score_function": (1, 1),
              "fused_compute_score_for_moe_aux_loss": (1, 1), "fused_moe_aux_loss": (1, 1),
              "fused_permute_with_probs": (4, 1), "fused_sort_chunks_by_index": (2, 1),
              "fused_sort_chunks_by_index_with_probs": (2, 1), "fused_unpermute": (1, 1)}


class _Fused(torch.autograd.Function):
    """A Transformer Engine fused function on CPU: Megatron-Core's unfused reference math,
    counted as the kernels TE issues forward and backward (`TE_KERNELS`)."""

    @staticmethod
    def forward(ctx, name: str, ref, n_in: int, *args):  # noqa: ANN001
        STATE.count("kernel", TE_KERNELS[name][0], op=f"te.{name}_fwd")
        ctx.set_materialize_grads(False)
        ins = [a.detach().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor)
               else a for a in args]
        on, STATE.on = STATE.on, False
        with torch.enable_grad():
            outs = ref(*ins)
        STATE.on = on
        outs = outs if isinstance(outs, tuple) else (outs,)
        ctx.name, ctx.ins, ctx.outs = name, ins, outs
        return tuple(o.detach() for o in outs)

    @staticmethod
    def backward(ctx, *grads):  # noqa: ANN001
        STATE.count("kernel", TE_KERNELS[ctx.name][1], op=f"te.{ctx.name}_bwd")
        pairs = [(o, g) for o, g in zip(ctx.outs, grads, strict=True)
                 if o.requires_grad and g is not None]
        leaves = [a for a in ctx.ins if isinstance(a, torch.Tensor) and a.requires_grad]
        on, STATE.on = STATE.on, False
        got = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs],
                                  allow_unused=True) if pairs else [None] * len(leaves)
        STATE.on = on
        it = iter(got)
        return (None, None, None, *(next(it) if isinstance(a, torch.Tensor) and
                                     a.requires_grad else None for a in ctx.ins))


def _patch_fused_router() -> None:
    """Router fusion without TE: Megatron-Core's unfused functions stand in for the math of
    `_Fused`'s one kernel each way."""
    import megatron.core.transformer.moe.moe_utils as mu

    topk_ref, score_ref, aux_ref = (mu.topk_routing_with_score_function,
                                    mu.compute_routing_scores_for_aux_loss,
                                    mu.switch_load_balancing_loss_func)

    def topk(logits, topk, use_pre_softmax=False, num_groups=None, group_topk=None,  # noqa: ANN001, ANN202
             scaling_factor=None, score_function="softmax", expert_bias=None):
        ref = lambda lg: topk_ref(lg, topk, use_pre_softmax=use_pre_softmax,  # noqa: E731
                                  num_groups=num_groups, group_topk=group_topk,
                                  scaling_factor=scaling_factor, score_function=score_function,
                                  expert_bias=expert_bias, fused=False)
        return _Fused.apply("fused_topk_with_score_function", ref, 1, logits)

    def scores(logits, topk, score_function):  # noqa: ANN001, ANN202
        ref = lambda lg: score_ref(lg, topk, score_function, fused=False)  # noqa: E731
        return _Fused.apply("fused_compute_score_for_moe_aux_loss", ref, 1, logits)

    def aux(probs, tokens_per_expert, total_num_tokens, topk, num_experts, coeff):  # noqa: ANN001, ANN202
        ref = lambda p, t: aux_ref(p, t, total_num_tokens, topk, num_experts, coeff)  # noqa: E731
        return _Fused.apply("fused_moe_aux_loss", ref, 2, probs, tokens_per_expert)[0]

    mu.HAVE_TE = True
    mu.fused_topk_with_score_function = topk
    mu.fused_compute_score_for_moe_aux_loss = scores
    mu.fused_moe_aux_loss = aux


def _patch_fused_permute() -> None:
    """Permute fusion without TE: the unfused functions stand in for `_Fused`'s kernels."""
    import megatron.core.transformer.moe.moe_utils as mu

    permute_ref, sort_ref, unpermute_ref = mu.permute, mu.sort_chunks_by_idxs, mu.unpermute

    def permute(tokens, probs, routing_map, num_out_tokens):  # noqa: ANN001, ANN202
        ref = lambda t, p, m: permute_ref(t, m, probs=p, num_out_tokens=num_out_tokens)  # noqa: E731
        return _Fused.apply("fused_permute_with_probs", ref, 3, tokens, probs, routing_map)

    def sort_probs(inp, probs, split_sizes, sorted_idxs):  # noqa: ANN001, ANN202
        ref = lambda i, p, s, x: sort_ref(i, s, x, probs=p)  # noqa: E731
        return _Fused.apply("fused_sort_chunks_by_index_with_probs", ref, 4, inp, probs,
                            split_sizes, sorted_idxs)

    def sort(inp, split_sizes, sorted_idxs):  # noqa: ANN001, ANN202
        ref = lambda i, s, x: sort_ref(i, s, x)[0]  # noqa: E731
        return _Fused.apply("fused_sort_chunks_by_index", ref, 3, inp, split_sizes,
                            sorted_idxs)[0]

    def unpermute(inp, row_id_map, merging_probs=None, restore_shape=None):  # noqa: ANN001, ANN202
        ref = lambda i, r: unpermute_ref(i, r, restore_shape, probs=merging_probs)  # noqa: E731
        return _Fused.apply("fused_unpermute", ref, 2, inp, row_id_map)[0]

    mu.HAVE_TE = True
    mu.fused_permute_with_probs = permute
    mu.fused_sort_chunks_by_index_with_probs = sort_probs
    mu.fused_sort_chunks_by_index = sort
    mu.fused_unpermute = unpermute


def _layer(args: argparse.Namespace, ep: int, fusion: bool):  # noqa: ANN202
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.moe.moe_layer import MoELayer

    cfg = moe_config(args, ep, moe_router_fusion=fusion, bf16=True, params_dtype=torch.bfloat16)
    spec = get_gpt_layer_local_spec(num_experts=args.experts, moe_grouped_gemm=False)
    layer = MoELayer(cfg, spec.submodules.mlp.submodules, layer_number=1)
    # the dispatcher puts its chunk-sort indices on CUDA under permute fusion: built unfused
    # (indices on the host), switched after
    cfg.moe_permute_fusion = args.permute_fusion == "on"
    return layer.to(torch.bfloat16).train()


def _instrument(layer) -> None:  # noqa: ANN001
    d = layer.token_dispatcher
    if not d.config.moe_permute_fusion:  # else the indices live on the device
        for t in (d.sort_input_by_local_experts, d.restore_output_by_local_experts):
            STATE.mark_host(t)
    _label(layer.router, "forward", "router")
    _label(d, "preprocess", "preprocess")
    _label(d, "dispatch_preprocess", "permute1")
    _label(d, "token_dispatch", "dispatch")
    _label(d, "dispatch_postprocess", "sort_chunks")
    _label(layer.experts, "forward", "experts")
    _label(d, "combine_preprocess", "unsort_chunks")
    _label(d, "token_combine", "combine")
    _label(d, "combine_postprocess", "unpermute")


def _step(layer, tokens: int, hidden: int) -> None:  # noqa: ANN001
    x = torch.randn(tokens, 1, hidden, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn_like(x)
    STATE.pass_, STATE.part = "fwd", "other"
    with Counting():
        out, _ = layer(x)
        STATE.pass_, STATE.part = "bwd", "other"
        out.backward(grad)


def _worker(rank: int, world: int, args: argparse.Namespace, fusion: bool, q) -> None:  # noqa: ANN001
    with gloo_rank(rank, world, args.port + world * 2 + fusion):
        q.put(_count(rank, world, args, fusion))


def _count(rank: int, world: int, args: argparse.Namespace, fusion: bool) -> list[dict]:
    """This rank's op counts per token count (module docstring)."""
    _patch_cuda()
    if fusion:
        _patch_fused_router()
    if args.permute_fusion == "on":
        _patch_fused_permute()
    layer = _layer(args, world, fusion)
    _instrument(layer)
    rows = []
    for tokens in args.tokens:
        _step(layer, tokens, args.hidden)  # warm-up: lazy initialisation
        STATE.counts.clear()
        STATE.ops.clear()
        STATE.on = True
        _step(layer, tokens, args.hidden)
        STATE.on = False
        for (pass_, part, cls, op), n in sorted(STATE.ops.items()):
            rows.append(dict(rank=rank, ep=world, tokens=tokens, router_fusion=fusion,
                             pass_=pass_, part=part, op_class=cls, op=op, count=n))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_layer_options(p, ep=[2, 4, 8], tokens=[4096, 16384], port=29611)
    p.add_argument("--router-fusion", choices=["off", "on", "both"], default="off")
    p.add_argument("--permute-fusion", choices=["off", "on"], default="off")
    args = p.parse_args()
    import megatron.core

    fusions = {"off": [False], "on": [True], "both": [False, True]}[args.router_fusion]
    rows: list[dict] = []
    for fusion in fusions:
        for ep in args.ep:
            got = run_ranks(_worker, ep, args, fusion)
            rows += [r for rs in got for r in rs if r["rank"] == 0]
    meta = dict(megatron_core=megatron.core.__version__, torch=torch.__version__,
                permute_fusion=args.permute_fusion == "on", experts=args.experts, topk=args.topk, hidden=args.hidden, ffn=args.ffn,
                dispatcher="alltoall", command="python " + " ".join(sys.argv))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*rows[0], *meta])
        w.writeheader()
        for r in rows:
            w.writerow({**r, **meta})
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
