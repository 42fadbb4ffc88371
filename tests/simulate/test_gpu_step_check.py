# SPDX-License-Identifier: Apache-2.0
"""The single-GPU step check without a GPU: the corpus rows made from the committed step JSONs,
the kernel classes of the profile, and the step script itself on a tiny model on CPU."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from simulate.validate.published import row_scenario

ROOT = Path(__file__).resolve().parents[2]
STEP_DIR = ROOT / "datasets" / "validation" / "gpu-step"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


corpus = _load("gpu_step_corpus")
step = _load("gpu_train_step")


def test_committed_runs_csv_is_what_the_script_makes_of_the_committed_jsons(monkeypatch):
    folders = sorted(str(p) for p in STEP_DIR.iterdir() if p.is_dir() and p.name != "configs")
    monkeypatch.setattr(sys, "argv", ["gpu_step_corpus.py", *folders])
    out = io.StringIO()
    with redirect_stdout(out):
        corpus.main()
    assert out.getvalue() == (STEP_DIR / "runs.csv").read_text()


def test_a_row_reads_tokens_per_second_and_reserved_memory_and_simulates_as_ran():
    path = STEP_DIR / "h200-2026-11-26" / "llama-3.2-1b-s8192-mb2.json"
    data = json.loads(path.read_text())
    columns = next(csv.reader((ROOT / "datasets/validation/training/published_runs.csv").open()))
    row = corpus.corpus_row(path, columns)
    assert row is not None
    assert float(row["tokens_per_s_per_gpu"]) == pytest.approx(2 * 8192 / data["step_median_s"],
                                                                 rel=1e-4)
    assert float(row["peak_memory_gib"]) == pytest.approx(data["memory"]["max_reserved_gib"],
                                                           abs=0.01)
    scenario = row_scenario(row, "r")
    assert scenario["hardware"] == {"gpu": "h200", "num_gpus": 1, "gpus_per_node": 1}
    assert scenario["training"]["framework"] == "torchtitan"
    assert scenario["training"]["parallel"]["fsdp"] is True
    assert scenario["training"]["micro_batch"] == 2 and scenario["training"]["seq_len"] == 8192


def test_profile_kinds_skip_annotations_and_sort_kernels():
    assert step.is_annotation("Optimizer.step#AdamW.step")
    assert step.is_annotation("FSDP::pre_forward (layers.13)")
    assert not step.is_annotation("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT")
    assert step.kernel_kind("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT") == "gemm"
    assert step.kernel_kind("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma") \
        == "attention"
    assert step.kernel_kind("ncclDevKernel_AllGather_RING_LL") == "nccl"
    assert step.kernel_kind("multi_tensor_apply_kernel<TensorListMetadata<4>>") == "optimizer"
    assert step.kernel_kind("vectorized_elementwise_kernel<silu_kernel>") == "other"


def test_read_config_takes_head_dim_and_tied_embeddings():
    cfg = step.read_config(STEP_DIR / "configs" / "llama-3.2-1b.json")
    assert (cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]) == (2048, 32, 8, 64)
    assert cfg["tied"] is True and cfg["layers"] == 16


@pytest.mark.slow  # a torch.distributed process of its own (gloo, FSDP2 at world size 1)
def test_the_step_script_runs_a_tiny_model_on_cpu(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
        "tie_word_embeddings": True}))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_train_step.py"), str(tmp_path / "out"),
         "--config", str(config), "--seq", "16", "--mb", "2", "--device", "cpu",
         "--steps", "2", "--warmup", "1", "--label", "tiny"],
        capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "MASTER_PORT": "29633"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "out" / "tiny.json").read_text())
    assert len(data["step_s"]) == 2 and data["step_median_s"] > 0
    # per block wq, wk, wv, wo, w1, w3, w2 and two norms; one embedding shared with the output
    h, f, v, kv = 32, 64, 100, 2 * 8
    per_block = h * h + 2 * h * kv + h * h + 3 * h * f + 2 * h
    assert data["params"] == 2 * per_block + v * h + h
