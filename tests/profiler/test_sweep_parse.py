# SPDX-License-Identifier: Apache-2.0
"""Sweep files: expansion, determinism, errors that name file and field, shipped sweeps."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from analytical.errors import SpecError
from analytical.ops import CollectiveKind, GemmSpec
from profiler.sweep import load_sweep, parse_shard, parse_sweep, select_shard

SWEEPS = Path(__file__).resolve().parents[2] / "datasets" / "sweeps"


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))


def _sweep(families, **top):
    return parse_sweep({"name": "t", "device": "cpu", "families": families, **top},
                       source="t.yaml")


def test_grid_is_cartesian_in_order_and_deduplicated():
    sweep = _sweep([{"family": "gemm", "dtypes": ["fp32", "bf16"],
                     "shapes": {"grid": {"m": [1, 2], "n": [8], "k": [4, 4]}}}])
    keys = [p.op.key for p in sweep.points("cpu")]
    assert keys == ["gemm/fp32/b1/1x8x4", "gemm/fp32/b1/2x8x4",
                    "gemm/bf16/b1/1x8x4", "gemm/bf16/b1/2x8x4"]
    assert {p.backend for p in sweep.points("cpu")} == {"torch.matmul"}


def test_coupled_axes_and_invalid_combinations_dropped():
    sweep = _sweep([{"family": "attention", "dtypes": ["bf16"], "shapes": {"grid": {
        "batch": 1, "q_len": [1, 64], "kv_len": [32], "heads,kv_heads": [[8, 2], [4, 4]],
        "head_dim": 64, "phase": "decode"}}}])
    ops = [p.op for p in sweep.points("cpu")]
    # q_len 64 > kv_len 32 is impossible and dropped; heads/kv_heads stay paired
    assert [(o.q_len, o.heads, o.kv_heads) for o in ops] == [(1, 8, 2), (1, 4, 4)]


def test_sample_is_seeded_log_uniform_and_rounded():
    entry = {"family": "gemm", "dtypes": ["fp32"], "shapes": {"sample": {
        "count": 40, "seed": 7, "ranges": {"m": [1, 4096], "n": [16, 1024], "k": [16, 64]},
        "multiple": {"n": 16, "k": 16}}}}
    first = [p.op for p in _sweep([entry]).points("cpu")]
    again = [p.op for p in _sweep([entry]).points("cpu")]
    assert first == again and len(first) == 40
    assert all(1 <= o.m <= 4096 and o.n % 16 == 0 and o.k % 16 == 0 for o in first)
    assert all(16 <= o.n <= 1024 and 16 <= o.k <= 64 for o in first)
    # log-uniform over 1..4096: about half the draws fall below sqrt(4096) = 64
    assert 10 <= sum(o.m < 64 for o in first) <= 30
    other = [p.op for p in _sweep([{**entry, "shapes": {"sample": {
        **entry["shapes"]["sample"], "seed": 8}}}]).points("cpu")]
    assert other != first


def test_list_budget_and_backend_defaults():
    sweep = _sweep([
        {"family": "gemm", "dtypes": ["fp8"], "budget": {"measure_ms": 50},
         "shapes": {"list": [{"m": 16, "n": 32, "k": 64}]}},
        {"family": "collective", "dtypes": ["fp32"], "shapes": {"list": [
            {"kind": "all_reduce", "size_bytes": 1024, "group_size": 2, "ranks_per_node": 2}]}},
    ], budget={"warmup_ms": 2, "measure_ms": 10, "min_reps": 3, "max_reps": 9})
    gemm, coll = sweep.points("cpu")
    assert gemm.op == GemmSpec(m=16, n=32, k=64, dtype="fp8")
    assert gemm.backend == "torch._scaled_mm"
    assert gemm.budget.measure_s == pytest.approx(0.05)
    assert gemm.budget.warmup_s == pytest.approx(0.002) and gemm.budget.max_reps == 9
    assert coll.backend == "gloo" and sweep.points("cuda")[1].backend == "nccl"
    assert coll.op.kind == CollectiveKind.ALL_REDUCE


@pytest.mark.parametrize(("families", "field"), [
    ([{"family": "conv", "dtypes": ["fp32"], "shapes": {"list": [{}]}}], "families[0].family"),
    ([{"family": "gemm", "dtypes": ["fp9"], "shapes": {"list": [{}]}}], "families[0].dtypes[0]"),
    ([{"family": "gemm", "dtypes": ["fp32"], "shapes": {"grid": {"q": [1]}}}],
     "families[0].shapes.grid.q"),
    ([{"family": "gemm", "dtypes": ["fp32"], "shapes": {"sample": {
        "count": 3, "ranges": {"m": [8, 2], "n": [1, 2], "k": [1, 2]}}}}],
     "families[0].shapes.sample.ranges.m"),
    ([{"family": "gemm", "dtypes": ["fp32"], "shapes": {"list": [{"m": 1, "n": 2}]}}],
     "families[0].shapes.list[0].k"),
    ([{"family": "gemm", "dtypes": ["fp32"], "backends": ["cublas"],
       "shapes": {"list": [{"m": 1, "n": 1, "k": 1}]}}], "families[0].backends[0]"),
    ([{"family": "gemm", "dtypes": ["fp32"], "budget": {"min_reps": 0},
       "shapes": {"list": [{"m": 1, "n": 1, "k": 1}]}}], "families[0].budget.min_reps"),
    ([{"family": "gemm", "dtypes": ["fp32"], "shape": {}}], "families[0].shape"),
])
def test_errors_name_file_and_field(families, field):
    with pytest.raises(SpecError) as info:
        _sweep(families)
    assert info.value.field == field
    assert str(info.value).startswith("t.yaml: ")


def test_load_sweep_reports_bad_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("families: [\n", encoding="utf-8")
    with pytest.raises(SpecError, match="bad.yaml"):
        load_sweep(path)


def test_shards_partition_the_points():
    sweep = _sweep([{"family": "gemm", "dtypes": ["fp32"],
                     "shapes": {"grid": {"m": list(range(1, 11)), "n": 8, "k": 8}}}])
    points = sweep.points("cpu")
    parts = [select_shard(points, parse_shard(f"{i}/3")) for i in range(3)]
    assert sorted(p.op.key for part in parts for p in part) == sorted(p.op.key for p in points)
    assert [len(p) for p in parts] == [4, 3, 3]
    for bad in ("3/3", "1", "a/b", "0/0"):
        with pytest.raises(SpecError, match="shard"):
            parse_shard(bad)


def test_model_shapes_follow_megatron_tensor_parallel():
    # llama-3-8b from the catalog (its published config.json): the shapes come from
    # analytical.layers, the builder the simulator asks
    model = {"name": "llama-3-8b", "tp": [2], "seq_len": [1024], "micro_batch": [1],
             "phases": ["prefill", "decode"]}
    gemms = _sweep([{"family": "gemm", "dtypes": ["bf16"], "shapes": {"model": model}}])
    nmk = {(p.op.m, p.op.n, p.op.k) for p in gemms.points("cpu")}
    assert (1024, (16 + 2 * 4) * 128, 4096) in nmk  # QKV, 16 heads + 2x4 KV heads per rank
    assert (1024, 4096, 2048) in nmk  # attention output, row parallel
    assert (1024, 14336, 4096) in nmk  # gate+up: 2 * 14336 / 2
    assert (1024, 4096, 7168) in nmk  # down
    # LM head on one sampled row per sequence (what inference asks; training: every token)
    assert (1, 64128, 4096) in nmk and (1024, 64128, 4096) not in nmk
    assert (1, 6144 // 2, 4096) in nmk  # decode: one token per sequence
    attn = _sweep([{"family": "attention", "dtypes": ["bf16"], "shapes": {"model": {
        **model, "phases": ["train", "decode"]}}}]).points("cpu")
    assert [(a.op.q_len, a.op.kv_len, a.op.heads, a.op.kv_heads, a.op.backward)
            for a in attn] == [(1024, 1024, 16, 4, False), (1024, 1024, 16, 4, True),
                               (1, 1024, 16, 4, False)]
    with pytest.raises(SpecError) as info:
        _sweep([{"family": "gemm", "dtypes": ["bf16"], "shapes": {"model": {
            **model, "tp": [3]}}}])
    assert info.value.field == "families[0].shapes.model.tp[0]"


def test_shipped_sweeps_expand():
    smoke = load_sweep(SWEEPS / "cpu-smoke.yaml").points("cpu")
    assert {p.op.family for p in smoke} == {"gemm", "attention", "memory"}
    assert {p.op.phase for p in smoke if p.op.family == "attention"} == {"prefill", "decode"}
    train = Counter(p.op.family for p in load_sweep(SWEEPS / "cpu-train.yaml").points("cpu"))
    assert train["gemm"] >= 300 and train["attention"] >= 100 and train["memory"] >= 100
    coll = load_sweep(SWEEPS / "cpu-collectives.yaml").points("cpu")
    sizes = sorted({p.op.size_bytes for p in coll})
    assert len(sizes) >= 8 and sizes[0] == 1024
    assert {p.backend for p in coll} == {"gloo"} and {p.op.group_size for p in coll} == {2}
    for name, fp8 in (("gpu-h100", True), ("gpu-a100", False)):
        points = load_sweep(SWEEPS / f"{name}.yaml").points("cuda")
        dtypes = {str(p.op.dtype) for p in points if p.op.family == "gemm"}
        assert ("fp8" in dtypes) is fp8 and {"bf16", "fp16"} <= dtypes
        colls = [p.op for p in points if p.op.family == "collective"]
        assert {o.group_size for o in colls} == {2, 4, 8, 16}
        assert min(o.size_bytes for o in colls) == 1024
        assert max(o.size_bytes for o in colls) >= 2 * 1024**3
        assert any(o.nodes == 2 for o in colls)
        phases = {p.op.phase for p in points if p.op.family == "attention"}
        assert phases == {"prefill", "decode"}


def test_sweep_files_are_plain_yaml():
    for path in SWEEPS.glob("*.yaml"):
        assert isinstance(yaml.safe_load(path.read_text(encoding="utf-8")), dict), path
