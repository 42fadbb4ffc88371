# SPDX-License-Identifier: Apache-2.0
"""Timing real models: warm-up and repeats are honoured, threads fixed and restored."""

from __future__ import annotations

import pytest
import torch

from analytical.errors import SpecError
from simulate.validate.measure import measure_model
from simulate.validate.models import (
    build_validation_model,
    validation_inputs,
    validation_model,
)


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


class _Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.calls = 0
        self.threads_seen: set[int] = set()
        self.grad_was_none: list[bool] = []

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None):
        self.calls += 1
        self.threads_seen.add(torch.get_num_threads())
        self.grad_was_none.append(self.linear.weight.grad is None)
        return self.linear(input_ids)


def test_warmup_and_repeats_are_counted_and_threads_restored() -> None:
    model = _Counting()
    before = torch.get_num_threads()
    result = measure_model(model, {"input_ids": torch.randn(4, 8)}, mode="train_step",
                           warmup=2, repeats=5, threads=1)
    assert model.calls == 7 and result.timing.n == 5 and len(result.timing.samples_s) == 5
    assert result.threads == 1 and model.threads_seen == {1} and result.warmup == 2
    assert torch.get_num_threads() == before
    assert all(model.grad_was_none), "gradients are dropped before every call"
    assert model.linear.weight.grad is None
    assert 0 < result.timing.min_s <= result.median_s <= result.timing.max_s


def test_bad_arguments_name_the_field() -> None:
    model = _Counting()
    inputs = {"input_ids": torch.randn(2, 8)}
    for kwargs, field in [({"mode": "serve"}, "mode"), ({"mode": "forward", "warmup": 0},
                                                          "warmup"),
                          ({"mode": "forward", "repeats": 0}, "repeats"),
                          ({"mode": "forward", "threads": 0}, "threads")]:
        with pytest.raises(SpecError) as info:
            measure_model(model, inputs, **kwargs)
        assert info.value.field == field


@pytest.mark.parametrize("mode", ["forward", "train_step", "generate"])
def test_real_small_moe_model_is_timed(mode: str) -> None:
    pytest.importorskip("transformers")
    spec = validation_model("mixtral-small-test")
    model = build_validation_model(spec)
    result = measure_model(model, validation_inputs(spec, mode), mode=mode, warmup=1,
                           repeats=3, new_tokens=spec.new_tokens)
    assert result.mode == mode and result.timing.n == 3 and result.median_s > 0
