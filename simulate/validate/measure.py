# SPDX-License-Identifier: Apache-2.0
"""Time a real model end to end: forward, forward + backward, or a short greedy generate.

The measuring discipline is the profiler's (DESIGN.md): untimed warm-up calls first, then
``repeats`` timed calls with `time.perf_counter_ns`, the garbage collector off while timing,
a fixed and recorded thread count, and the median and spread from `profiler.timing.summarize`.
What each mode runs is exactly what `simulate.frontend.hf.trace_hf` traces for that mode.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from analytical.errors import SpecError
from profiler.timing import Timing, summarize
from simulate.frontend.hf import MODES, Mode, generate_steps


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelTiming:
    """Timing of one model workload, in seconds, with the conditions it ran under."""

    mode: str
    timing: Timing
    threads: int  # torch intra-op threads while timing
    warmup: int  # untimed calls before the first timed one

    @property
    def median_s(self) -> float:
        return self.timing.median_s


def _loss(output: Any) -> torch.Tensor:
    loss = getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else output.sum()


def _workload(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor], mode: Mode,
              new_tokens: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """(prepare, run): prepare is untimed (drops gradients), run is the timed call."""
    def no_prep() -> None:
        return None

    if mode == "forward":
        def forward() -> None:
            with torch.no_grad():
                model(**inputs)
        return no_prep, forward
    if mode == "train_step":
        def drop_grads() -> None:
            model.zero_grad(set_to_none=True)

        def train_step() -> None:
            _loss(model(**inputs)).backward()
        return drop_grads, train_step

    def generate() -> None:
        generate_steps(model, inputs["input_ids"], new_tokens)
    return no_prep, generate


def measure_model(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor], *, mode: Mode,
                  warmup: int = 3, repeats: int = 10, threads: int | None = None,
                  new_tokens: int = 8) -> ModelTiming:
    """Median-of-repeats wall time of one workload of ``model``.

    Args:
        model: the real module (weights allocated).
        inputs: keyword inputs (``input_ids``, and ``labels`` for ``train_step``).
        mode: ``forward`` (no grad), ``train_step`` (forward with loss + backward; gradients
            dropped before each call so none accumulate; no optimizer step) or ``generate``
            (prefill + ``new_tokens - 1`` cached decode steps, greedy).
        warmup: untimed calls first (lazy init, allocator warm-up); at least 1.
        repeats: timed calls; at least 1.
        threads: torch intra-op threads (default: the current setting), restored afterwards.
        new_tokens: tokens generated in ``generate`` mode.
    """
    if mode not in MODES:
        raise SpecError("mode", f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    if warmup < 1 or repeats < 1:
        raise SpecError("warmup" if warmup < 1 else "repeats", "must be at least 1")
    if mode == "generate" and new_tokens < 1:
        raise SpecError("new_tokens", "must be at least 1")
    previous = torch.get_num_threads()
    used = previous if threads is None else threads
    if used < 1:
        raise SpecError("threads", f"must be at least 1, got {used}")
    prepare, run = _workload(model, inputs, mode, new_tokens)
    on_cuda = any(p.is_cuda for p in model.parameters())
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    torch.set_num_threads(used)
    gc_was_enabled = gc.isenabled()
    samples: list[float] = []
    try:
        for _ in range(warmup):
            prepare()
            run()
        sync()
        gc.collect()
        gc.disable()
        for _ in range(repeats):
            prepare()
            sync()
            start = time.perf_counter_ns()
            run()
            sync()
            samples.append((time.perf_counter_ns() - start) * 1e-9)
    finally:
        if gc_was_enabled:
            gc.enable()
        torch.set_num_threads(previous)
        if mode == "train_step":
            model.zero_grad(set_to_none=True)
    return ModelTiming(mode=mode, timing=summarize(samples), threads=used, warmup=warmup)


def time_models(models: Sequence[str], modes: Sequence[str], *, threads: int, warmup: int,
                repeats: int) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(median s, relative p10-p90 spread, min s) of each validation model in each mode."""
    from simulate.validate.models import (  # noqa: PLC0415
        build_validation_model,
        validation_inputs,
        validation_model,
    )

    out: dict[tuple[str, str], tuple[float, float, float]] = {}
    for name in models:
        spec = validation_model(name)
        model = build_validation_model(spec)
        model.eval()  # no dropout; train_step still builds the autograd graph
        for mode in modes:
            timing = measure_model(model, validation_inputs(spec, mode),  # type: ignore[arg-type]
                                   mode=mode, warmup=warmup,  # type: ignore[arg-type]
                                   repeats=repeats, threads=threads,
                                   new_tokens=spec.new_tokens).timing
            spread = (timing.p90_s - timing.p10_s) / timing.median_s if timing.median_s else 0.0
            out[(name, mode)] = (timing.median_s, spread, timing.min_s)
        del model
        gc.collect()
    return out
