# SPDX-License-Identifier: Apache-2.0
"""Time the CPU of an eager Megatron-Core MoE transformer layer per forward and backward, per part,
in units of this machine's time per eager PyTorch op ("host ops"), beside the ATen kernels the same
pass issues.

Runs Megatron-Core's real ``TransformerLayer`` (local spec: ``SelfAttention`` with GQA, QK
layernorm and unfused RoPE, then ``MoELayer`` with ``TopKRouter``, ``MoEAlltoAllTokenDispatcher``
and ``SequentialMLP``) on EP gloo ranks on CPU, at negligible shapes (hidden 64, a few hundred
tokens, fp32, one thread), with the CUDA streams / events stubbed and the parts labelled as in
``scripts/count_moe_ops.py`` (whose instrumentation this reuses; the ranks and the
config are `scripts/moe_cpu_harness.py`'s). Per rank, per token count:
1. uninstrumented, ``--repeats`` fwd+bwd of the layer (part ``layer``) and of its
   ``SequentialMLP`` alone on the arguments it got in the layer (part ``experts_alone``): thread
   CPU time and wall time per pass, and the ops per class of one more pass under
   ``count_moe_ops.Counting``; the layer less its experts is the attention block, router and
   dispatcher;
2. then with the MoE parts labelled (``part.<name>``: ``part.other`` is the attention block,
   norms, residuals and the MoE layer's glue), ``--repeats`` fwd+bwd with a clock read at every
   switch of part: CPU time and ops per part (the labels' own autograd nodes add their time to
   the parts, so these are shares, not totals);
and, in the same process, reference ops: a ``torch.nn.Linear(hidden, hidden)`` forward with
trainable weights (the op Transformer Engine issue 2053 timed) and a ``torch.add`` at 8 and 64
rows. Medians over the repeats. Two token counts let the tiny compute be extrapolated away
(time at zero tokens = 2 t(T1) - t(T2) for T2 = 2 T1); the op counts do not depend on the tokens.

Only the unfused router and permutation are timed: the fused ones are Transformer Engine kernels,
which the CPU build lacks (``count_moe_ops`` counts them by TE's code but runs Megatron-Core's
unfused math in their place, so their CPU time would not be TE's). Must run in an environment with
``megatron-core`` and torch (NOT the project's venv):

    nice /tmp/mcore-venv/bin/python scripts/time_moe_layer_cpu.py --ep 1 2 4 --tokens 64 128 \
        --repeats 40 --out datasets/measurements/llmsim/cpu/moe-layer-cpu/qwen3-moe-layer.csv

run twice, the second time with ``--append`` (the shipped file: two runs, column ``run``,
written to /tmp/moecpu/pooled.csv as its ``command`` column says, then copied here).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import platform
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import count_moe_ops as com  # noqa: E402
from moe_cpu_harness import add_layer_options, gloo_rank, moe_config, run_ranks  # noqa: E402

CLOCK = time.thread_time_ns


class TimedState(com.State):
    """`count_moe_ops.State` that also adds the thread CPU time since the last switch of pass or
    part to the part that ran, while ``timing`` is set."""

    def __init__(self) -> None:
        self.timing = False
        self.spent: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
        self.acc: Counter[tuple[str, str]] = Counter()
        self._pass, self._part, self._t = "fwd", "other", CLOCK()
        super().__init__()

    def _tick(self) -> None:
        now = CLOCK()
        if self.timing:
            self.acc[(self._pass, self._part)] += now - self._t
        self._t = now

    @property
    def part(self) -> str:
        return self._part

    @part.setter
    def part(self, value: str) -> None:
        self._tick()
        self._part = value

    @property
    def pass_(self) -> str:
        return self._pass

    @pass_.setter
    def pass_(self, value: str) -> None:
        self._tick()
        self._pass = value


def _patch_rng() -> None:
    """The attention's dropout region forks the CUDA RNG tracker: a no-op on CPU."""
    import megatron.core.tensor_parallel.random as tpr

    tpr.CudaRNGStatesTracker.fork = lambda self, name="": contextlib.nullcontext()


def _layer(args: argparse.Namespace, ep: int):  # noqa: ANN202
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_layer import TransformerLayer

    cfg = moe_config(args, ep, num_query_groups=2, moe_router_fusion=False,
                     params_dtype=torch.float32, qk_layernorm=True, masked_softmax_fusion=False,
                     bias_dropout_fusion=False, apply_rope_fusion=False, attention_dropout=0.0,
                     hidden_dropout=0.0)
    spec = get_gpt_layer_local_spec(num_experts=args.experts, moe_grouped_gemm=False,
                                    qk_layernorm=True)
    layer = TransformerLayer(cfg, spec.submodules, layer_number=1).train()
    rope = RotaryEmbedding(kv_channels=cfg.kv_channels, rotary_percent=1.0,
                           use_cpu_initialization=True)
    return layer, rope


def _instrument(layer) -> None:  # noqa: ANN001
    """Label the MoE parts as `count_moe_ops` does; the rest of the layer (norms, attention,
    residuals) stays ``other``."""
    moe = layer.mlp
    for t in (moe.token_dispatcher.sort_input_by_local_experts,
              moe.token_dispatcher.restore_output_by_local_experts):
        com.STATE.mark_host(t)
    com._instrument(moe)


def _inputs(tokens: int, hidden: int, rope):  # noqa: ANN001, ANN202
    x = torch.randn(tokens, 1, hidden, requires_grad=True)
    mask = torch.triu(torch.ones(1, 1, tokens, tokens), diagonal=1).bool()
    return x, torch.randn_like(x), mask, rope(tokens)


def _pass(layer, inputs) -> tuple[int, int, int, int]:  # noqa: ANN001
    """One fwd+bwd: (fwd cpu ns, bwd cpu ns, fwd wall ns, bwd wall ns)."""
    x, grad, mask, emb = inputs
    st = com.STATE
    st.pass_, st.part = "fwd", "other"
    c0, w0 = CLOCK(), time.perf_counter_ns()
    out, _ = layer(x, attention_mask=mask, rotary_pos_emb=emb)
    st.pass_, st.part = "bwd", "other"
    c1, w1 = CLOCK(), time.perf_counter_ns()
    out.backward(grad)
    st.part = "done"
    c2, w2 = CLOCK(), time.perf_counter_ns()
    return c1 - c0, c2 - c1, w1 - w0, w2 - w1


def _median_us(xs: list[int]) -> float:
    return statistics.median(xs) / 1e3


def _reference(args: argparse.Namespace, when: str) -> list[dict]:
    """Thread CPU time per call of a trainable Linear forward and a ``torch.add`` (median over
    ``--repeats`` loops of 200 calls), labelled ``when`` (before or after the layer)."""
    rows = []
    lin = torch.nn.Linear(args.hidden, args.hidden, bias=False)
    for rows_n in (8, 64):
        a = torch.randn(rows_n, args.hidden)
        b = torch.randn(rows_n, args.hidden)
        for op, fn in (("ref.linear_fwd", lambda a=a: lin(a)),
                       ("ref.add", lambda a=a, b=b: torch.add(a, b))):
            per = []
            for _ in range(args.repeats):
                t0 = CLOCK()
                for _ in range(200):
                    fn()
                per.append((CLOCK() - t0) / 200)
            rows.append(dict(tokens=rows_n, pass_=when, part=op, cpu_us=_median_us(per)))
    return rows


def _counted(run) -> Counter[tuple[str, str, str]]:  # noqa: ANN001
    """Ops per (pass, part, class) of one call of ``run`` under `count_moe_ops.Counting`."""
    st = com.STATE
    st.counts.clear()
    st.ops.clear()
    st.on = True
    with com.Counting():
        run()
    st.on = False
    return Counter(st.counts)


def _by_class(counts: Counter[tuple[str, str, str]], pass_: str, part: str | None = None
              ) -> Counter[str]:
    out: Counter[str] = Counter()
    for (p, pt, c), v in counts.items():
        if p == pass_ and part in (None, pt):
            out[c] += v
    return out


def _capture_experts(layer, inputs):  # noqa: ANN001, ANN202
    """The arguments the layer's ``SequentialMLP`` gets in one pass (detached leaves)."""
    experts = layer.mlp.experts
    got: list = []
    forward = experts.forward

    def keep(*a, **k):  # noqa: ANN002, ANN003, ANN202
        got.append((a, k))
        return forward(*a, **k)

    experts.forward = keep
    _pass(layer, inputs)
    experts.forward = forward
    a, k = got[0]
    a = tuple(t.detach().requires_grad_(t.is_floating_point()) if isinstance(t, torch.Tensor)
              else t for t in a)
    return a, k


def _experts_pass(experts, args_kw) -> tuple[int, int, int, int]:  # noqa: ANN001
    """One fwd+bwd of the experts alone: (fwd cpu ns, bwd cpu ns, fwd wall ns, bwd wall ns)."""
    a, k = args_kw
    st = com.STATE
    st.pass_, st.part = "fwd", "experts"
    c0, w0 = CLOCK(), time.perf_counter_ns()
    out = experts(*a, **k)[0]
    st.pass_ = "bwd"
    c1, w1 = CLOCK(), time.perf_counter_ns()
    out.backward(torch.ones_like(out))
    st.part = "done"
    c2, w2 = CLOCK(), time.perf_counter_ns()
    return c1 - c0, c2 - c1, w1 - w0, w2 - w1


def _whole_rows(layer, tokens: int, args: argparse.Namespace, rope) -> list[dict]:  # noqa: ANN001
    """Uninstrumented: the layer's and the experts' (alone) CPU time per pass, with their ops."""
    inputs = _inputs(tokens, args.hidden, rope)
    for _ in range(3):
        _pass(layer, inputs)  # warm-up: lazy initialisation, allocator
    exp_args = _capture_experts(layer, inputs)
    rows = []
    for part, run in (("layer", lambda: _pass(layer, inputs)),
                      ("experts_alone", lambda: _experts_pass(layer.mlp.experts, exp_args))):
        run()
        counts = _counted(run)
        times = [run() for _ in range(args.repeats)]
        for i, p in enumerate(("fwd", "bwd")):
            rows.append(dict(tokens=tokens, pass_=p, part=part,
                             cpu_us=_median_us([t[i] for t in times]),
                             wall_us=_median_us([t[2 + i] for t in times]),
                             **_by_class(counts, p)))
    return rows


def _part_rows(layer, tokens: int, args: argparse.Namespace, rope) -> list[dict]:  # noqa: ANN001
    """Instrumented (labelled parts): ops and CPU time per part; the labels' own autograd nodes
    add their time to the parts, so these are shares, not totals."""
    inputs = _inputs(tokens, args.hidden, rope)
    _pass(layer, inputs)
    counts = _counted(lambda: _pass(layer, inputs))
    st = com.STATE
    spent: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
    for _ in range(args.repeats):
        st.acc.clear()
        st.timing = True
        _pass(layer, inputs)
        st.timing = False
        for k, v in st.acc.items():
            spent[k].append(v)
    return [dict(tokens=tokens, pass_=p, part=f"part.{part}", cpu_us=_median_us(v),
                 **_by_class(counts, p, part))
            for (p, part), v in sorted(spent.items()) if part != "done"]


def _worker(rank: int, world: int, args: argparse.Namespace, q) -> None:  # noqa: ANN001
    with gloo_rank(rank, world, args.port + world):
        q.put([dict(rank=rank, ep=world, **r) for r in _measure(args, world)])


def _measure(args: argparse.Namespace, world: int) -> list[dict]:
    """This rank's rows (module docstring): reference ops, the layer whole, its parts."""
    com.STATE = TimedState()
    com._patch_cuda()
    _patch_rng()
    layer, rope = _layer(args, world)
    rows = _reference(args, "ref_before")
    for tokens in args.tokens:
        rows += _whole_rows(layer, tokens, args, rope)
    _instrument(layer)
    for tokens in args.tokens:
        rows += _part_rows(layer, tokens, args, rope)
    return rows + _reference(args, "ref_after")  # again after the layer: the machine's drift


def _cpu_model() -> str:
    """``model name`` of /proc/cpuinfo with its family / model / stepping and clock."""
    info: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            info.setdefault(k.strip(), v.strip())
    if "model name" not in info:
        return platform.processor()
    return (f"{info['model name']} (family {info.get('cpu family')} model {info.get('model')} "
            f"stepping {info.get('stepping')}, {info.get('cpu MHz')} MHz)")


FIELDS = ["rank", "ep", "tokens", "pass_", "part", "cpu_us", "wall_us", "kernel", "collective",
          "d2h_copy", "host", "view", "sync"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_layer_options(p, ep=[1, 2, 4], tokens=[64, 128], port=29711)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--append", action="store_true",
                   help="add the rows to --out (one more run, told apart by its start time)")
    args = p.parse_args()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    import megatron.core

    rows: list[dict] = []
    for ep in args.ep:
        rows += [r for got in run_ranks(_worker, ep, args) for r in got]
    meta = dict(run=started, cpu=_cpu_model(), cores=os.cpu_count(), threads=1, dtype="fp32",
                megatron_core=megatron.core.__version__, torch=torch.__version__,
                experts=args.experts, topk=args.topk, hidden=args.hidden, ffn=args.ffn,
                heads=4, query_groups=2, dispatcher="alltoall", router_fusion=False,
                permute_fusion=False, repeats=args.repeats, stat="median",
                clock="thread_time", command="python " + " ".join(sys.argv))
    rows.sort(key=lambda r: (r["ep"], r["rank"], r["tokens"], r["pass_"], r["part"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    append = args.append and args.out.exists()
    with args.out.open("a" if append else "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*FIELDS, *meta])
        if not append:
            w.writeheader()
        for r in rows:
            w.writerow({**{k: r.get(k, 0) for k in FIELDS}, **meta})
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
