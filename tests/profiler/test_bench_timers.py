# SPDX-License-Identifier: Apache-2.0
"""Timers (with a fake clock, so no wall-clock assertions) and the family benchmarks on CPU."""

from __future__ import annotations

import gc
import math

import pytest
import torch

from analytical.errors import SpecError
from analytical.ops import AttentionSpec, GemmSpec, MemoryBoundSpec, MemoryOpKind, MoESpec
from profiler import timers
from profiler.benchmarks import measure_point
from profiler.benchmarks.attention import build_attention
from profiler.benchmarks.common import Bench, measure_bench
from profiler.benchmarks.gemm import build_gemm
from profiler.benchmarks.memory import build_memory
from profiler.benchmarks.moe import build_moe
from profiler.measurement import Status
from profiler.timers import Budget, rep_count, time_cpu

FAST = Budget(warmup_s=0.0, measure_s=0.002, min_reps=2, max_reps=5)


class FakeClock:
    """perf_counter_ns that only moves when the benchmark 'runs'."""

    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        self.now_ns += int(seconds * 1e9)


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(timers.time, "perf_counter_ns", fake)
    return fake


def test_cpu_timer_counts_reps_from_wall_budget_and_excludes_prepare(clock):
    calls = {"run": 0, "prepare": 0}
    gc_state = []

    def run():
        calls["run"] += 1
        gc_state.append(gc.isenabled())
        clock.advance(0.001)  # 1 ms per call

    def prepare():
        calls["prepare"] += 1
        clock.advance(0.005)  # untimed set-up must not show in the samples

    budget = Budget(warmup_s=0.0035, measure_s=0.010, min_reps=3, max_reps=100)
    timing = time_cpu(run, budget, prepare=prepare, flush_bytes=0)
    # the budget bounds wall time: a repetition costs 6 ms with its untimed prepare, so 10 ms
    # allow 1, raised to min_reps; the samples hold only the 1 ms calls
    assert timing.n == 3
    assert timing.median_s == pytest.approx(0.001) and timing.std_s == pytest.approx(0.0)
    # first call + warm-up (the deadline counts prepare time too: 1 call of 6 ms > 3.5 ms) + reps
    assert calls["run"] == calls["prepare"] == 1 + 1 + 3
    assert not any(gc_state) and gc.isenabled()


def test_rep_count_clamps_and_guards_zero():
    budget = Budget(measure_s=0.1, min_reps=5, max_reps=50)
    assert rep_count(0.01, budget) == 10
    assert rep_count(1.0, budget) == 5
    assert rep_count(1e-6, budget) == 50
    assert rep_count(0.0, budget) == 50


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"min_reps": 0}, "budget.min_reps"), ({"min_reps": 9, "max_reps": 3}, "budget.min_reps"),
    ({"measure_s": -1.0}, "budget.measure_ms"), ({"max_reps": 2.5}, "budget.max_reps")])
def test_budget_validation_names_field(kwargs, field):
    with pytest.raises(SpecError) as info:
        Budget(**kwargs)
    assert info.value.field == field


def test_gemm_bench_computes_the_product():
    op = GemmSpec(m=8, n=16, k=32, dtype="fp32", batch=3)
    bench = build_gemm(op, "torch.matmul", "cpu")
    bench.run()
    out = bench.run.__closure__  # the output buffer lives in the closure
    tensors = [c.cell_contents for c in out if isinstance(c.cell_contents, torch.Tensor)]
    a, b, result = (t for t in tensors if t.dim() == 3)
    assert result.shape == (3, 8, 16)
    torch.testing.assert_close(result, a @ b)
    # on a CPU the weight is stored [n, k] and multiplied transposed, as nn.Linear does
    assert b.shape == (3, 32, 16) and not b.is_contiguous()
    assert b.transpose(-1, -2).is_contiguous()


def test_attention_bench_uses_bottom_right_causal_mask():
    op = AttentionSpec(batch=1, q_len=3, kv_len=5, heads=4, kv_heads=2, head_dim=8,
                       phase="decode", dtype="fp32")
    bench = build_attention(op, "sdpa.math", "cpu")
    out = bench.run()
    assert out.shape == (1, 4, 3, 8)
    # reference: query i (0-based) of the last 3 sees keys 0 .. 5 - 3 + i
    closure = bench.run.__code__.co_freevars
    env = dict(zip(closure, (c.cell_contents for c in bench.run.__closure__), strict=True))
    q, k, v = env["q"], env["k"], env["v"]
    k2, v2 = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    scores = q @ k2.transpose(-1, -2) / math.sqrt(8)
    allowed = torch.arange(5)[None, :] <= (torch.arange(3)[:, None] + 2)
    scores = scores.masked_fill(~allowed, float("-inf"))
    torch.testing.assert_close(out, torch.softmax(scores, -1) @ v2)


@pytest.mark.parametrize("backward", [False, True])
def test_every_memory_op_runs_forward_and_backward(backward):
    for kind in MemoryOpKind:
        if kind == MemoryOpKind.OPTIMIZER and backward:
            continue
        op = MemoryBoundSpec(kind=kind, rows=8, cols=64, dtype="fp32", backward=backward)
        outcome = measure_point(op, "torch.eager", FAST, "cpu")
        assert outcome.status == Status.OK, (kind, outcome.error)
        assert outcome.timing.n >= 2


def test_backward_prepare_drops_grads():
    op = MemoryBoundSpec(kind="add", rows=4, cols=8, dtype="fp32", backward=True)
    bench = build_memory(op, "torch.eager", "cpu")
    for _ in range(3):
        bench.prepare()
        bench.run()
    inputs = [c.cell_contents for c in bench.prepare.__closure__
              if isinstance(c.cell_contents, list)][0]
    for tensor in inputs:  # d(x + y)/dx = 1 with grad_out g: one pass, not three
        assert tensor.grad is not None
    grads = {id(t): t.grad.clone() for t in inputs}
    bench.prepare()
    bench.run()
    for tensor in inputs:
        torch.testing.assert_close(tensor.grad, grads[id(tensor)])


def test_moe_combine_is_the_weighted_scatter_add():
    op = MoESpec(kind="combine", tokens=6, hidden=4, experts=3, top_k=2, dtype="fp32")
    bench = build_moe(op, "torch.eager", "cpu")
    bench.run()
    env = dict(zip(bench.run.__code__.co_freevars,
                   (c.cell_contents for c in bench.run.__closure__), strict=True))
    expected = torch.zeros(6, 4).index_add_(0, env["token_of_slot"], env["y"] * env["weights"])
    torch.testing.assert_close(env["out"], expected)
    # every token receives exactly top_k slots
    assert torch.bincount(env["token_of_slot"], minlength=6).tolist() == [2] * 6


def test_unsupported_and_errors_become_statuses():
    fp8 = measure_point(GemmSpec(m=16, n=16, k=16, dtype="fp8"), "torch._scaled_mm", FAST, "cpu")
    assert fp8.status == Status.UNSUPPORTED and "CUDA" in fp8.error
    flash = measure_point(AttentionSpec(batch=1, q_len=4, kv_len=4, heads=2, kv_heads=2,
                                        head_dim=8, dtype="fp32"), "sdpa.flash", FAST, "cpu")
    assert flash.status == Status.UNSUPPORTED
    rotary = measure_point(MemoryBoundSpec(kind="rotary", rows=2, cols=7, dtype="fp32"),
                           "torch.eager", FAST, "cpu")
    assert rotary.status == Status.ERROR and "even" in rotary.error

    def oom():
        raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB")

    assert measure_bench(oom, FAST, "cpu").status == Status.OOM

    def boom():
        return Bench(run=lambda: (_ for _ in ()).throw(RuntimeError("illegal memory access")))

    failed = measure_bench(boom, FAST, "cpu")
    assert failed.status == Status.ERROR and "illegal memory access" in failed.error
    assert failed.timing is None


def test_cpu_path_does_not_import_triton():
    import sys

    measure_point(GemmSpec(m=4, n=4, k=4, dtype="fp32"), "torch.matmul", FAST, "cpu")
    assert "triton.testing" not in sys.modules


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_event_timer_measures_a_large_gemm():
    op = GemmSpec(m=4096, n=4096, k=4096, dtype="bf16")
    outcome = measure_point(op, "torch.matmul", Budget(measure_s=0.05), "cuda")
    assert outcome.status == Status.OK
    achieved = op.flops / outcome.timing.median_s
    assert 1e13 < achieved < 5e15  # between 10 TFLOP/s and any current peak


def test_cuda_timer_recipe_with_fake_events(monkeypatch, clock):
    """The do_bench recipe without a GPU: torch.cuda events and synchronize are faked, the flush
    buffer lives on the CPU. Checks flush-before-every-rep, one event pair per rep, counts."""
    log = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t_ns = None

        def record(self):
            self.t_ns = clock.now_ns
            log.append("record")

        def elapsed_time(self, end):
            return (end.t_ns - self.t_ns) / 1e6  # milliseconds, like CUDA

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: log.append("sync"))
    monkeypatch.setattr(timers, "_FLUSH_BYTES", 4096)
    real_zero = torch.Tensor.zero_

    def zero(self):
        log.append("flush")
        return real_zero(self)

    monkeypatch.setattr(torch.Tensor, "zero_", zero)

    spins = []

    def spin(seconds, device):
        log.append("spin")
        spins.append(seconds)

    monkeypatch.setattr(timers, "gpu_spin", spin)

    def run():
        log.append("run")
        clock.advance(0.002)  # 2 ms kernel (and, on this fake clock, 2 ms of host time)

    budget = Budget(warmup_s=0.004, measure_s=0.020, min_reps=3, max_reps=100)
    gc.enable()
    timing = timers.time_cuda(run, budget, device="cpu")
    assert gc.isenabled()  # off while timing, restored after
    assert timing.n == 10 and timing.median_s == pytest.approx(0.002)
    assert log.count("run") == 1 + 5 + 2 + 10  # first call, estimate, warm-up, reps
    assert log.count("flush") == log.count("run")  # every call starts with a cold L2
    timed = log[-(10 * 5 + 1):]
    # the GPU spins between the flush and the start event, so the host has enqueued the call
    # before the GPU reaches it: 2x the host's 2 ms plus the margin
    assert timed[-1] == "sync" and timed[:5] == ["flush", "spin", "record", "run", "record"]
    assert spins == [pytest.approx(2 * 0.002 + timers.SPIN_MARGIN_S)] * (2 + 10)
    assert log.count("sync") == 3  # after the first call, after the estimate, at the end


def test_spin_covers_the_host_and_is_capped():
    assert timers.spin_seconds(0.0) == pytest.approx(timers.SPIN_MARGIN_S)
    assert timers.spin_seconds(100e-6) == pytest.approx(200e-6 + timers.SPIN_MARGIN_S)
    assert timers.spin_seconds(1.0) == timers.SPIN_MAX_S


def test_pinned_sdpa_kernel_is_entered_once_around_the_timing(monkeypatch):
    """A pinned kernel's context costs the host more than a small kernel costs the GPU: it is
    entered once per measurement, not once per call."""
    import contextlib

    entered = []

    @contextlib.contextmanager
    def pinned():
        entered.append(1)
        yield

    calls = []
    outcome = measure_bench(lambda: Bench(run=lambda: calls.append(1), context=pinned), FAST,
                            "cpu")
    assert outcome.status == Status.OK and len(calls) > 3 and entered == [1]
    op = AttentionSpec(batch=1, q_len=4, kv_len=4, heads=2, kv_heads=2, head_dim=8,
                       dtype="fp32")
    bench = build_attention(op, "sdpa.math", "cpu")
    assert bench.context is not contextlib.nullcontext  # the math kernel, pinned
    with bench.context():
        assert bench.run().shape == (1, 2, 4, 8)


def test_collective_backend_gaps_are_unsupported_with_text(monkeypatch):
    from analytical.ops import CollectiveSpec
    from profiler.benchmarks import collective

    def lacking(op, device):
        def call():
            raise RuntimeError("ProcessGroupGloo does not support reduce_scatter_tensor")
        return call

    monkeypatch.setattr(collective, "build_collective", lacking)
    op = CollectiveSpec(kind="reduce_scatter", size_bytes=1024, group_size=2, ranks_per_node=2)
    outcome = collective.measure_collective(op, FAST, "cpu")
    assert outcome.status == Status.UNSUPPORTED and "does not support" in outcome.error


def test_gpu_clocks_read_from_nvidia_smi(monkeypatch, tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '1980, 2619'\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setattr(timers.shutil, "which", lambda name: str(fake))
    assert timers.gpu_clocks_mhz(0) == "sm=1980,mem=2619"
    monkeypatch.setattr(timers.shutil, "which", lambda name: None)
    assert timers.gpu_clocks_mhz(0) == ""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_timer_excludes_host_work_before_the_launch():
    """A call that spends 300 us on the host before a tiny kernel: the spin keeps the GPU busy
    until the kernel is queued, so the sample is the kernel's few microseconds, not the host's
    300 (what a plain event pair after a 256 MB flush would see, the flush lasting ~85 us)."""
    import time

    x = torch.ones(1024, device="cuda")

    def run():
        begin = time.perf_counter()
        while time.perf_counter() - begin < 300e-6:
            pass
        x.add_(1.0)

    timing = timers.time_cuda(run, Budget(warmup_s=0.002, measure_s=0.02, min_reps=10))
    assert timing.median_s < 50e-6


def test_spin_is_skipped_where_torch_has_no_sleep_kernel(monkeypatch):
    """``torch.cuda._sleep`` is private: a torch without it times as plain do_bench, it does not
    turn every point into an ERROR row."""
    monkeypatch.delattr(torch.cuda, "_sleep", raising=False)
    assert timers.gpu_spin(1e-3, "cuda") is None
