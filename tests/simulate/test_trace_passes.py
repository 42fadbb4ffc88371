# SPDX-License-Identifier: Apache-2.0
"""Data-parallel passes on a traced graph: bucket sizes, collective volumes and placement."""

from __future__ import annotations

import pytest
import torch

from analytical.errors import LlmsimError, SpecError
from analytical.ops import CollectiveKind
from analytical.parallel import ParallelConfig
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import ParamInfo, TracePhase
from simulate.frontend.passes import (
    UnsupportedParallelismError,
    apply_parallel,
    data_parallel,
    fsdp,
    fsdp_units,
    gradient_buckets,
)
from simulate.frontend.trace import trace_module

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


class _Stack(torch.nn.Module):
    """embed -> 3 x Linear(256, 256) -> head: parameter names like model.layers.<i>."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 256)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(256, 256) for _ in range(3))
        self.head = torch.nn.Linear(256, 1000, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x).float().pow(2).mean()


@pytest.fixture(scope="module")
def graph():
    return trace_module(_Stack, lambda: (torch.randint(0, 1000, (2, 8)),), backward=True)


def _params(*mib: float) -> list[ParamInfo]:
    return [ParamInfo(name=f"p{i}", numel=int(m * MIB) // 4, dtype="float32", itemsize=4)
            for i, m in enumerate(mib)]


def test_buckets_fill_in_reverse_with_a_small_first_bucket() -> None:
    params = _params(10, 10, 10, 0.5, 0.75)
    # reverse: 0.75 + 0.5 >= 1 MiB closes the first; then 10 + 10 + 10 >= 25 closes the next
    assert gradient_buckets(params) == [(4, 3), (2, 1, 0)]
    assert gradient_buckets(params, bucket_bytes=MIB, first_bucket_bytes=MIB) == [
        (4, 3), (2,), (1,), (0,)]
    with pytest.raises(SpecError):
        gradient_buckets(params, bucket_bytes=0)


def test_ddp_all_reduces_every_parameter_byte_once(graph) -> None:
    out = data_parallel(graph, dp=8, ranks_per_node=4, bucket_bytes=300_000)
    reduces = out.select(Category.COLLECTIVE)
    assert {op.spec.kind for op in reduces} == {CollectiveKind.ALL_REDUCE}
    assert sum(op.spec.size_bytes for op in reduces) == graph.param_bytes
    assert {(op.spec.group_size, op.spec.ranks_per_node) for op in reduces} == {(8, 4)}
    assert all(op.phase == TracePhase.BACKWARD for op in reduces)
    assert len(out.ops) == len(graph.ops) + len(reduces)
    assert [op.index for op in out.ops] == list(range(len(out.ops)))
    # each bucket is reduced right after the call that completes its last gradient
    for op in reduces:
        completed = [o.index for o in out.ops if o.grads_ready & op.params]
        assert op.index == max(completed) + 1
    # buckets fill from the last parameter: the head's bucket is reduced first, the
    # embedding's (ready only after its own backward) last
    names = [{graph.params[i].name for i in op.params} for op in reduces]
    assert "head.weight" in names[0] and "embed.weight" in names[-1]


def test_zero1_reduce_scatters_then_all_gathers(graph) -> None:
    out = data_parallel(graph, dp=4, zero=1)
    kinds = [op.spec.kind for op in out.select(Category.COLLECTIVE)]
    assert kinds.count(CollectiveKind.REDUCE_SCATTER) == kinds.count(CollectiveKind.ALL_GATHER)
    assert kinds[-1] == CollectiveKind.ALL_GATHER


def test_fsdp_gathers_per_unit_and_reduce_scatters_grads(graph) -> None:
    units = fsdp_units(graph.params)
    assert set(units) == {"", "layers.0", "layers.1", "layers.2"}
    out = fsdp(graph, dp=4)
    ops = out.select(Category.COLLECTIVE)
    fwd_gathers = [op for op in ops if op.phase == TracePhase.FORWARD]
    assert len(fwd_gathers) == 4
    assert sum(op.spec.size_bytes for op in fwd_gathers) == graph.param_bytes
    scatters = [op for op in ops if op.spec.kind == CollectiveKind.REDUCE_SCATTER]
    assert sum(op.spec.size_bytes for op in scatters) == graph.param_bytes
    # non-root units are gathered again for backward; the root is not
    regathers = [op for op in ops if op.phase == TracePhase.BACKWARD
                 and op.spec.kind == CollectiveKind.ALL_GATHER]
    assert len(regathers) == 3
    # each unit's forward gather comes before the first call that reads its parameters
    for gather in fwd_gathers:
        first_use = next(op.index for op in out.ops
                         if op.category != Category.COLLECTIVE and op.params & gather.params)
        assert gather.index < first_use


def test_unsupported_layouts_say_so(graph) -> None:
    with pytest.raises(UnsupportedParallelismError, match="tp=2") as info:
        apply_parallel(graph, ParallelConfig(tp=2, dp=2))
    assert isinstance(info.value, LlmsimError) and isinstance(info.value, NotImplementedError)
    assert apply_parallel(graph, ParallelConfig(dp=2, fsdp=True)).count(Category.COLLECTIVE)
    assert apply_parallel(graph, ParallelConfig(dp=1)) is graph
    with pytest.raises(SpecError, match="ranks_per_node"):
        data_parallel(graph, dp=4, ranks_per_node=3)
