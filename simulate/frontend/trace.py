# SPDX-License-Identifier: Apache-2.0
"""Trace a PyTorch module into a `TracedGraph` without allocating its weights.

The module and its inputs are built inside `FakeTensorMode` (tensors carry shapes, dtypes and
devices but no data), and a `TorchDispatchMode` above it records every aten call with its
shapes, its order and whether it ran in the forward or in the backward pass (the boundary is
the call to ``loss.backward()``). Each call is mapped by `simulate.frontend.aten_map`.

Limits: data-dependent shapes (``nonzero``, ``.tolist()``, boolean masks) cannot be traced
with fake tensors; Hugging Face MoE models trace through their ``grouped_mm`` experts path,
whose cost assumes balanced routing. Module boundaries and hooks are not recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from analytical.errors import SpecError
from simulate.frontend.aten_map import AtenCall, TensorMeta, map_call
from simulate.frontend.graph import ParamInfo, TracedGraph, TracedOp, TracePhase

_SKIPPED_NAMESPACES = frozenset({"prim"})  # metadata queries (prim.device), not kernels


def _meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorMeta(tuple(int(s) for s in value.shape),
                          str(value.dtype).removeprefix("torch."), value.element_size())
    return value


def _bind(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Arguments by schema name, defaults filled in."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(func._schema.arguments):
        if not arg.kwarg_only and i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def _storage_id(tensor: torch.Tensor) -> int | None:
    try:
        return tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


class _Recorder(TorchDispatchMode):
    """Records each aten call issued below it (the fake mode runs it)."""

    def __init__(self, param_storages: Mapping[int, int]) -> None:
        super().__init__()
        self.phase = TracePhase.FORWARD
        self.ops: list[TracedOp] = []
        self._param_storages = param_storages

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = self._run(func, args, kwargs)
        if func.namespace in _SKIPPED_NAMESPACES:
            return out
        self._record(func, args, kwargs, out)
        return out

    @staticmethod
    def _run(func, args, kwargs):  # noqa: ANN001, ANN205
        # NOTE: the meta kernel of _grouped_mm accepts only bf16, while the CPU kernel also runs
        # fp32; trace it in bf16 and hand back the result in the caller's dtype.
        if func.overloadpacket is torch.ops.aten._grouped_mm:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if tensors and tensors[0].dtype not in (torch.bfloat16,):
                dtype = tensors[0].dtype
                cast = tree_map(lambda a: a.to(torch.bfloat16) if isinstance(a, torch.Tensor)
                                and a.is_floating_point() else a, args)
                return func(*cast, **kwargs).to(dtype)
        return func(*args, **kwargs)

    def _record(self, func, args, kwargs, out) -> None:  # noqa: ANN001
        params = _bind(func, args, kwargs)
        in_tensors = [t for t in tree_flatten(params)[0] if isinstance(t, torch.Tensor)]
        out_tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        inputs = tuple(_meta(t) for t in in_tensors)
        outputs = tuple(_meta(t) for t in out_tensors)
        call = AtenCall(name=func.overloadpacket.__name__, params=tree_map(_meta, params),
                        inputs=inputs, outputs=outputs)
        mapped = map_call(call)
        used = frozenset(self._param_storages[sid] for sid in map(_storage_id, in_tensors)
                         if sid in self._param_storages)
        floats = [t for t in outputs + inputs if t.dtype.startswith(("float", "bfloat"))]
        dtype = (floats or list(outputs + inputs) or [TensorMeta((), "", 0)])[0].dtype
        self.ops.append(TracedOp(
            index=len(self.ops), aten=str(func), phase=self.phase, spec=mapped.spec,
            in_shapes=tuple(t.shape for t in inputs), out_shapes=tuple(t.shape for t in outputs),
            dtype=dtype, category=mapped.category, bytes=call.bytes, params=used))


def _call(module: torch.nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, Mapping):
        return module(**inputs)
    if isinstance(inputs, (tuple, list)):
        return module(*inputs)
    return module(inputs)


def _default_loss(output: Any) -> torch.Tensor:
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(output, torch.Tensor):
        return output.sum()
    raise SpecError("loss", "the output has no .loss and is not a tensor: pass loss=fn(output)")


def trace_module(module_factory: Callable[[], torch.nn.Module], inputs_factory: Callable[[], Any],
                 *, backward: bool,
                 loss: Callable[[Any], torch.Tensor] | None = None) -> TracedGraph:
    """Record the aten calls of one forward (and backward) pass of a module, weights-free.

    Args:
        module_factory: builds the module; called inside `FakeTensorMode`, so parameters it
            creates are fake (no memory). Build it on the device whose kernels you want traced
            (``cpu`` selects the CPU attention kernels).
        inputs_factory: builds the inputs, also inside the fake mode: a mapping (keyword
            arguments), a tuple (positional) or one tensor.
        backward: also trace ``loss.backward()``; those calls get phase BACKWARD.
        loss: turns the output into a scalar; default: ``output.loss`` (Hugging Face models
            given ``labels``) or ``output.sum()``. Its calls count as forward.

    Returns:
        The graph in call order with the trainable parameters.
    """
    with FakeTensorMode(allow_non_fake_inputs=True):
        module = module_factory()
        if not isinstance(module, torch.nn.Module):
            raise SpecError("module_factory", f"returned {type(module).__name__}, not a Module")
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        params = tuple(ParamInfo(name=name, numel=p.numel(), dtype=str(p.dtype)
                                 .removeprefix("torch."), itemsize=p.element_size())
                       for name, p in named)
        storages = {_storage_id(p): i for i, (_, p) in enumerate(named)}
        storages.pop(None, None)
        inputs = inputs_factory()
        recorder = _Recorder(storages)
        ready: dict[int, set[int]] = {}

        def mark_ready(index: int) -> Callable[[torch.Tensor], None]:
            def hook(_: torch.Tensor) -> None:
                if recorder.ops:
                    ready.setdefault(len(recorder.ops) - 1, set()).add(index)
            return hook

        handles = [p.register_post_accumulate_grad_hook(mark_ready(i))
                   for i, (_, p) in enumerate(named)] if backward else []
        grad_mode = torch.enable_grad() if backward else torch.no_grad()
        with grad_mode, recorder:
            output = _call(module, inputs)
            if backward:
                scalar = loss(output) if loss is not None else _default_loss(output)
                recorder.phase = TracePhase.BACKWARD
                scalar.backward()
        for handle in handles:
            handle.remove()
    ops = tuple(replace(op, grads_ready=frozenset(ready[op.index])) if op.index in ready else op
                for op in recorder.ops)
    return TracedGraph(ops=ops, params=params, backward=backward)
