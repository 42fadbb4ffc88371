# SPDX-License-Identifier: Apache-2.0
"""``llmsim simulate-torch`` on a tiny module: FLOPs, unknown ops, DDP collectives, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from analytical.errors import SpecError
from simulate.cli.torch_cmd import command
from simulate.frontend.torch_model import TorchTarget, load_callable

_MODULE = """
import torch

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 64)
        self.fc = torch.nn.Linear(64, 32, bias=False)

    def forward(self, ids):
        return torch.special.erfcx(self.fc(self.emb(ids)))  # erfcx: no mapping -> unknown

def make():
    return Tiny()

def inputs():
    return (torch.zeros(4, 8, dtype=torch.long),)
"""


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")


@pytest.fixture()
def module_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_model.py"
    path.write_text(_MODULE)
    return path


def _run(args: list[str], tmp_path: Path) -> dict:
    result = CliRunner().invoke(command, [*args, "--no-store",
                                          "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_forward_flops_and_unknown_ops(module_file: Path, tmp_path: Path) -> None:
    out = _run([f"{module_file}:make", "--batch", "2", "--seq-len", "16"], tmp_path)
    assert out["flops"] == 2 * 32 * 64 * 32  # the one GEMM [32 x 64] @ [64 x 32]; the rest 0
    assert out["per_category_s"]["gemm"] > 0
    (unknown,) = out["unknown_ops"]
    assert unknown["aten"].startswith("aten.special_erfcx") and unknown["count"] == 1
    assert 0 < unknown["share"] < 1
    assert sum(out["engine_share"].values()) == pytest.approx(1.0)
    assert out["engine_share"]["roofline"] == pytest.approx(1.0)  # no store, no models
    assert out["step_time_s"] == pytest.approx(out["serial_s"])


def test_train_step_with_ddp_and_custom_inputs(module_file: Path, tmp_path: Path) -> None:
    fwd = _run([f"{module_file}:make", "--inputs", f"{module_file}:inputs"], tmp_path)
    step = _run([f"{module_file}:make", "--inputs", f"{module_file}:inputs",
                 "--mode", "train_step"], tmp_path)
    out = _run([f"{module_file}:make", "--inputs", f"{module_file}:inputs",
                "--mode", "train_step", "--dp", "2"], tmp_path)
    gemm_flops = 2 * 32 * 64 * 32  # inputs(): 4 x 8 tokens
    assert fwd["flops"] == gemm_flops
    # backward: dX and dW GEMMs as large as the forward one, plus erfcx's derivative (two
    # [32 x 32] multiplies of one flop per element)
    assert step["flops"] == 3 * gemm_flops + 2 * 32 * 32
    assert "collective" not in step["per_category_s"] and step["overlap_s"] is None
    assert out["per_category_s"]["collective"] > 0  # the gradient all-reduce
    assert out["overlap_s"] is not None and out["overlap_s"] <= out["serial_s"]
    assert out["step_time_s"] == pytest.approx(out["overlap_s"])


def test_fsdp_adds_gathers(module_file: Path, tmp_path: Path) -> None:
    out = _run([f"{module_file}:make", "--mode", "train_step", "--dp", "2", "--fsdp"],
               tmp_path)
    assert out["per_category_s"]["collective"] > 0 and out["overlap_s"] is None


def test_bad_input_names_the_field(module_file: Path) -> None:
    with pytest.raises(SpecError, match="model"):
        TorchTarget()
    with pytest.raises(SpecError, match="generate"):
        TorchTarget(factory=f"{module_file}:make", mode="generate")
    with pytest.raises(SpecError, match="factory"):
        load_callable("no_such_module_xyz:make", field="factory")
    with pytest.raises(SpecError, match="factory"):
        load_callable(f"{module_file}:missing", field="factory")
    result = CliRunner().invoke(command, ["nocolon"])
    assert isinstance(result.exception, SpecError)
