# SPDX-License-Identifier: Apache-2.0
"""``llmsim models list/show`` through the installed entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LLMSIM = Path(sys.executable).parent / "llmsim"


def _run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    command = [str(LLMSIM)] if LLMSIM.exists() else [sys.executable, "-m", "simulate.cli.main"]
    env = {**os.environ, "LLMSIM_HOME": str(home)}
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_show_json(home):
    result = _run("models", "show", "llama-3-70b", "--json", home=home)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["spec"]["hidden"] == 8192 and data["spec"]["kv_heads"] == 8
    assert data["params"]["total"] == 70_553_706_496
    assert data["kv_cache_bytes_per_token_bf16"] == 80 * 2 * 8 * 128 * 2
    assert data["seq_len"] == 4096
    assert data["training_flops_per_token"] > 6 * 69e9


def test_list_json_and_table(home):
    result = _run("models", "list", "--json", home=home)
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["mixtral-8x7b"]["experts"] == 8 and rows["mixtral-8x7b"]["top_k"] == 2
    assert rows["deepseek-v3"]["params_b"] == pytest.approx(671.0, abs=0.1)
    table = _run("models", "list", home=home)
    assert table.returncode == 0 and "qwen3-8b" in table.stdout


def test_show_table_and_errors(home, tmp_path):
    result = _run("models", "show", "mixtral-8x7b", home=home)
    assert result.returncode == 0 and "router_per_layer" in result.stdout
    unknown = _run("models", "show", "no-such-model", home=home)
    assert unknown.returncode == 2 and "llama-3-8b" in unknown.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": "big"}))
    broken = _run("models", "show", str(bad), home=home)
    assert broken.returncode == 2 and "hidden_size" in broken.stderr
    assert "Traceback" not in broken.stderr
