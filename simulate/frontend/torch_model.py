# SPDX-License-Identifier: Apache-2.0
"""Predict a user's PyTorch module or a Hugging Face config (``llmsim simulate-torch``).

``MODULE:FACTORY`` names a python callable returning an ``nn.Module`` (``pkg.mod:make`` or
``path/to/file.py:make``); ``--inputs MODULE:FN`` a callable returning its inputs (a tensor,
a tuple of positional or a dict of keyword arguments), by default token ids
``[batch, seq_len]``. Both run inside `FakeTensorMode`: nothing is allocated. The trace goes
through the data-parallel pass (``dp``, DDP or FSDP) and is priced by the engine chain.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from simulate.engines import EngineChain, EngineOptions
from simulate.frontend.graph import TracedGraph
from simulate.frontend.hf import MODES, trace_hf
from simulate.frontend.passes import data_parallel, fsdp
from simulate.frontend.price import TracedPrediction, price_traced
from simulate.frontend.trace import trace_module

__all__ = ["TorchTarget", "load_callable", "predict_torch", "trace_target"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchTarget:
    """What to trace: a module factory or a Hugging Face config, and the workload."""

    factory: str | None = None  # "module:callable"
    hf_config: str | None = None  # a name in datasets/models/ or a config.json path
    inputs: str | None = None  # "module:callable" returning the inputs
    mode: str = "forward"  # forward | train_step | generate (generate: hf_config only)
    batch: int = 1
    seq_len: int = 128
    new_tokens: int = 8  # generate
    dtype: str = "fp32"  # hf_config only: parameter dtype

    def __post_init__(self) -> None:
        if (self.factory is None) == (self.hf_config is None):
            raise SpecError("model", "give exactly one of MODULE:FACTORY and --hf-config")
        if self.mode not in MODES:
            raise SpecError("mode", f"unknown mode {self.mode!r}; known: {', '.join(MODES)}")
        if self.mode == "generate" and self.factory is not None:
            raise SpecError("mode", "generate needs --hf-config (a causal LM with a KV cache)")
        for name in ("batch", "seq_len", "new_tokens"):
            if getattr(self, name) < 1:
                raise SpecError(name, f"must be at least 1, got {getattr(self, name)}")


def load_callable(target: str, *, field: str) -> Callable[..., Any]:
    """Import ``module:attr`` or ``path/file.py:attr``; errors name ``field``."""
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise SpecError(field, f"expected MODULE:CALLABLE, got {target!r}")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise SpecError(field, f"no file {module_name}")
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(field, f"cannot import {module_name!r}: {exc}") from None
    value = getattr(module, attr, None)
    if not callable(value):
        raise SpecError(field, f"{module_name!r} has no callable {attr!r}")
    return value


def trace_target(target: TorchTarget) -> TracedGraph:
    """The weights-free trace of ``target``'s workload."""
    if target.hf_config is not None:
        return trace_hf(target.hf_config, mode=target.mode, batch=target.batch,
                        seq_len=target.seq_len, new_tokens=target.new_tokens,
                        dtype=target.dtype)
    import torch  # noqa: PLC0415

    factory = load_callable(target.factory, field="factory")
    if target.inputs is not None:
        inputs = load_callable(target.inputs, field="inputs")
    else:
        def inputs() -> torch.Tensor:
            return torch.zeros(target.batch, target.seq_len, dtype=torch.long)
    return trace_module(factory, inputs, backward=target.mode == "train_step")


def predict_torch(target: TorchTarget, *, hardware: str = "cpu", dp: int = 1,
                  use_fsdp: bool = False, engines: EngineOptions | None = None
                  ) -> tuple[TracedGraph, TracedPrediction]:
    """Trace, add the data-parallel collectives (``dp`` ranks on one node), price with the
    ``engines`` chain (None: every engine)."""
    hw = get_hardware(hardware)
    traced = trace_target(target)
    if dp > 1 or use_fsdp:
        ranks_per_node = min(dp, hw.gpus_per_node)
        if dp % ranks_per_node:
            raise SpecError("dp", f"{dp} ranks do not fill whole {hw.name} nodes of "
                            f"{hw.gpus_per_node}")
        traced = (fsdp(traced, dp=dp, ranks_per_node=ranks_per_node) if use_fsdp else
                  data_parallel(traced, dp=dp, ranks_per_node=ranks_per_node))
    chain = EngineChain.from_options(hw, EngineOptions() if engines is None else engines)
    return traced, price_traced(traced, chain, hw)
