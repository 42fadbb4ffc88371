# SPDX-License-Identifier: Apache-2.0
"""The transfer predictor on a synthetic three-GPU store with a known law: fit, leave one GPU
out, save and reload in a fresh process, schema checks, MLflow and the engine chain."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analytical.dtypes import DType
from analytical.errors import LlmsimError, SpecError
from analytical.hardware import get_hardware
from analytical.ops import GemmSpec, op_to_dict
from predictors.evaluate import ErrorMetrics, error_metrics
from predictors.transfer import DEFAULT_PARAMS, TransferConfig, TransferModel, fit_transfer
from predictors.transfer_data import load_transfer_data, stack_of, version_of
from predictors.transfer_eval import ALL, FoldResult, leave_one_out
from predictors.transfer_features import ideal_seconds
from predictors.transfer_tracking import gate

GPUS = ("a100-sxm-80gb", "h100-sxm", "b200")
CONFIG = TransferConfig(seed=0, nthread=2, params=replace(DEFAULT_PARAMS, max_rounds=200))


def law_seconds(op: GemmSpec, hw) -> float:
    """A GEMM law in the GPU's own units: compute at 70% of the dtype's peak scaled by the
    busy fraction of 128x128 tile waves over the SMs, memory at 80% of the warm-L2 bound
    (the L2-resident share at the YAML's measured L2 bandwidth, the rest at HBM's; one weight
    repeated, `predictors.transfer_harness.resident_share`), plus 5 us."""
    from predictors.transfer_features import warm_memory_s
    from predictors.transfer_harness import resident_share

    tiles = -(-op.m // 128) * -(-op.n // 128)
    waves = tiles / hw.compute_units
    busy = waves / np.ceil(waves)
    compute = op.flops / (0.7 * hw.peak_flops(op.dtype) * busy)
    memory = warm_memory_s(op.bytes, hw, resident_share(op, hw, 1)) / 0.8
    return max(compute, memory) + 5e-6


def synthetic_frame() -> pd.DataFrame:
    rows = []
    sizes = [16, 96, 512, 1536, 4096, 12288]
    for name in GPUS:
        hw = get_hardware(name)
        for m, n, k, dtype in itertools.product(sizes, sizes, sizes[1:], ("bf16", "fp16")):
            op = GemmSpec(m=m, n=n, k=k, dtype=DType(dtype))
            rows.append({**op_to_dict(op), "op_key": op.key, "hardware": name,
                         "provenance": "imported:synthetic-1.0/kernels-2.1",
                         "median_s": law_seconds(op, hw)})
    return pd.DataFrame(rows)


class FakeStore:
    """What `load_transfer_data` reads of `profiler.store.Store`."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame

    def frame(self, family: str, *, status: str = "ok") -> pd.DataFrame:
        return self._frame if family == "gemm" else self._frame.iloc[:0]


@pytest.fixture(scope="module")
def data():
    return load_transfer_data(FakeStore(synthetic_frame()), "gemm", cap=300, seed=0)


@pytest.fixture(scope="module")
def model(data):
    return fit_transfer(data, CONFIG)


def test_stack_names():
    assert stack_of("imported:aiconfigurator-0.12.0/trtllm-1.3.0rc20") == "trtllm"
    assert stack_of("imported:aiconfigurator-0.12.0/nccl-2.27.3") == "nccl"
    assert stack_of("imported:vidur@7d47513") == "vidur"
    assert stack_of("profiled") == "profiled"
    assert version_of("imported:aiconfigurator-0.12.0/trtllm-1.3.0rc20") == 1.03
    assert version_of("imported:aiconfigurator-0.12.0/nccl-2.27.3") == 2.27
    assert version_of("imported:vidur@7d47513") == version_of("profiled") == 0.0


def test_a_stack_release_is_told_apart_and_an_unseen_gpu_is_asked_as_the_newest():
    """One GPU measured with an older release of the same stack that is 2x slower: the
    model must price that release apart (it is a column, not folded into the stack) and
    answer as the newest release by default."""
    frame = synthetic_frame()
    old = frame["hardware"] == "a100-sxm-80gb"
    frame.loc[old, "provenance"] = "imported:synthetic-1.0/kernels-2.0"
    frame.loc[old, "median_s"] *= 2.0
    data = load_transfer_data(FakeStore(frame), "gemm", cap=300, seed=0)
    model = fit_transfer(data, CONFIG)
    assert model.stack_versions == {"kernels": [2.0, 2.01]}
    assert [model.release("kernels", v) for v in (None, 1.0, 2.004, 2.006, 3.0)] == [
        2.01, 2.0, 2.0, 2.01, 2.01]
    hw, ops = get_hardware("a100-sxm-80gb"), list(data.gpus["a100-sxm-80gb"].ops[:40])
    newest = model.predict(ops, hw)
    assert np.array_equal(newest, model.predict(ops, hw, versions=[2.01] * len(ops)))
    older = model.predict(ops, hw, versions=[2.0] * len(ops))
    assert 1.5 < float(np.median(older / newest)) < 2.5  # 2x; ~1.0 if folded into the stack


def test_sample_is_capped_stratified_and_seeded(data):
    assert list(data.gpus) == sorted(GPUS)
    for rows in data.gpus.values():
        assert len(rows) == pytest.approx(300, abs=2)
        dtypes = {op.dtype for op in rows.ops}
        assert dtypes == {DType.BF16, DType.FP16}  # both strata drawn
        assert rows.rows_available == 6 * 6 * 5 * 2
    again = load_transfer_data(FakeStore(synthetic_frame()), "gemm", cap=300, seed=0)
    assert str(again.fingerprint) == str(data.fingerprint)
    other = load_transfer_data(FakeStore(synthetic_frame()), "gemm", cap=300, seed=1)
    assert str(other.fingerprint) != str(data.fingerprint)


def test_unseen_gpu_follows_the_law(model):
    """H200 has a YAML and no rows: the model must follow the law there, far better than a
    plain vendor-peak roofline does."""
    h200 = get_hardware("h200")
    ops = [GemmSpec(m=m, n=n, k=k) for m, n, k in itertools.product(
        [32, 700, 3000], [1024, 5000], [2048, 8192])]
    truth = np.array([law_seconds(op, h200) for op in ops])
    predicted = model.predict(ops, h200)
    assert error_metrics(truth, predicted).mape < 15.0
    assert model.gpus == tuple(sorted(GPUS)) and model.default_stack == "kernels"


def test_leave_one_out_scores_every_gpu(data):
    folds = leave_one_out(data, CONFIG)
    assert [f.heldout for f in folds] == sorted(GPUS)
    for fold in folds:
        assert fold.heldout not in fold.train_gpus and len(fold.train_gpus) == 2
        assert fold.transfer[ALL].n == len(data.gpus[fold.heldout])
        assert fold.roofline[ALL].n == fold.transfer[ALL].n
        assert fold.transfer[ALL].mape < 25.0  # the law is the same in every GPU's units
        # the denominator alone (vendor peaks + floor) misses the law's 70%/80% efficiencies
        # by 20-30%; the trees learn them, so they must beat it
        assert fold.denominator[ALL].n == fold.transfer[ALL].n
        assert fold.denominator[ALL].mape > fold.transfer[ALL].mape
    with pytest.raises(LlmsimError, match="rows for 'h200'"):
        leave_one_out(data, CONFIG, gpus=["h200"])


def test_fit_is_deterministic(data, model):
    again = fit_transfer(data, CONFIG)
    ops = list(data.gpus["b200"].ops[:50])
    hw = get_hardware("b200")
    # same machine, same test: the raw predictions may be compared exactly
    assert np.array_equal(again.predict(ops, hw), model.predict(ops, hw))


def test_reload_in_a_fresh_process(model, data, tmp_path):
    folder = model.save(tmp_path / "m")
    doc = json.loads((folder / "schema.json").read_text())
    assert doc["gpus"] == sorted(GPUS) and doc["kind"] == "transfer"
    # the floor is stored in cycles; a GPU without a clock is asked at the training median
    # (A100 1,410, H100 and B200 1,980 MHz)
    assert doc["reference_clock_hz"] == pytest.approx(1.98e9)
    assert all(float.fromhex(v) > 1e3 for v in doc["floor_cycles"].values())
    assert (folder / "model.ubj").exists() and not list(folder.glob("*.pkl"))
    ops = list(data.gpus["h100-sxm"].ops[:20])
    expected = model.predict(ops, get_hardware("h100-sxm"))
    code = ("import json, sys; from analytical.hardware import get_hardware; "
            "from analytical.ops import op_from_dict; "
            "from predictors.transfer import TransferModel; "
            f"m = TransferModel.load({str(folder)!r}); "
            "ops = [op_from_dict('gemm', d) for d in json.loads(sys.stdin.read())]; "
            "print(json.dumps(m.predict(ops, get_hardware('h100-sxm')).tolist()))")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(
        [op_to_dict(o) for o in ops]), capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parents[2])
    assert np.allclose(json.loads(out.stdout), expected, rtol=1e-6)


def test_schema_mismatch_is_refused(model, tmp_path):
    folder = model.save(tmp_path / "m")
    doc = json.loads((folder / "schema.json").read_text())
    (folder / "schema.json").write_text(json.dumps({**doc, "schema_version": 0}))
    with pytest.raises(LlmsimError, match="llmsim train transfer --op gemm"):
        TransferModel.load(folder)
    (folder / "schema.json").write_text(json.dumps({**doc, "features": doc["features"][1:]}))
    with pytest.raises(LlmsimError, match="feature names differ"):
        TransferModel.load(folder)


def test_domain_declines_other_vendors_and_dtypes(model):
    op = GemmSpec(m=64, n=64, k=64)
    assert model.outside_domain(op, get_hardware("h200")) is None
    assert model.outside_domain(op, get_hardware("mi300x")) == "vendor=amd"
    assert model.outside_domain(op, get_hardware("cpu")) == "kind=cpu"
    assert model.outside_domain(replace(op, dtype=DType.FP8), get_hardware("h200")) \
        == "dtype=fp8"


@pytest.fixture()
def fake_store(monkeypatch):
    import contextlib

    import predictors.transfer_pipeline as pipeline

    frame = synthetic_frame()
    monkeypatch.setattr(pipeline, "open_store",
                        lambda db=None: contextlib.nullcontext(FakeStore(frame)))
    return frame


def test_cli_trains_logs_and_writes_the_table(llmsim_home, fake_store, tmp_path, capsys):
    from predictors.transfer_tracking import clear_cache, load_transfer
    from simulate.cli.main import main

    clear_cache()
    common = ["train", "transfer", "--op", "gemm", "--rows-per-gpu", "150"]
    assert main([*common, "--leave-out", "b200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["models"][0]["gpus"] == ["a100-sxm-80gb", "h100-sxm"]
    assert out["models"][0]["champion"] is True, out["models"][0]["gate"]  # beats the roofline
    fold = [r for r in out["leave_one_out"] if r["stack"].startswith(ALL)]
    assert [r["heldout"] for r in fold] == ["b200"] and fold[0]["n"] == 150
    assert fold[0]["denominator_mape"] > fold[0]["transfer_mape"]
    assert "residuals" not in out
    assert main([*common, "--leave-out", "b200", "--no-log", "--residuals", "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["residuals"]
    assert {g["heldout"] for g in groups} == {"b200"}
    assert sum(g["n"] for g in groups) == 150  # every scored row in exactly one group
    readme = tmp_path / "README.md"
    readme.write_text("intro\n")
    assert main([*common, "--loo", "--write-readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("intro\n") and "transfer-table:begin" in text
    assert text.count("| gemm | ") == len(GPUS)  # one stack: one row per fold
    assert load_transfer("gemm").gpus == tuple(sorted(GPUS))  # three GPUs beat two
    assert main([*common, "--leave-out", "h200"]) == 2
    assert "no gemm rows for 'h200'" in capsys.readouterr().err
    assert main([*common, "--write-readme", str(readme)]) == 2


class _DecliningChampion:
    """A per-hardware champion whose training rows held no bf16 GEMM."""

    def outside_domain(self, op: object) -> str:
        return "dtype=bf16"


def test_engine_chain_uses_the_transfer_model(llmsim_home, fake_store):
    from predictors.transfer_tracking import clear_cache
    from simulate.cli.main import main
    from simulate.engines import ENGINE_ORDER, EngineChain

    clear_cache()
    assert main(["train", "transfer", "--op", "gemm", "--rows-per-gpu", "150"]) == 0
    assert EngineChain(get_hardware("h200"), use_store=False).estimate(
        GemmSpec(m=8, n=8, k=8)).engine == "roofline"  # no evaluation, no champion alias
    assert main(["train", "transfer", "--op", "gemm", "--rows-per-gpu", "150", "--loo"]) == 0
    assert ENGINE_ORDER.index("xgboost") < ENGINE_ORDER.index("xgboost-transfer") \
        < ENGINE_ORDER.index("roofline")
    op = GemmSpec(m=512, n=4096, k=4096)
    chain = EngineChain(get_hardware("h200"), use_store=False)  # a YAML and no rows
    estimate = chain.estimate(op)
    assert estimate.engine == "xgboost-transfer" and chain.available["xgboost-transfer"]
    assert estimate.stack == "kernels"  # whose timing: graph replay takes that stack's cost off
    assert estimate.latency_s == pytest.approx(law_seconds(op, get_hardware("h200")), rel=0.2)
    declining = EngineChain(get_hardware("h200"), use_store=False)
    declining._predictors["gemm"] = _DecliningChampion()  # this GPU has a GEMM champion
    kept = declining.estimate(op)  # what it declines stays with the roofline, not the transfer
    assert kept.engine == "roofline" and "champion never trained on dtype=bf16" in kept.detail
    amd = EngineChain(get_hardware("mi300x"), use_store=False).estimate(op)
    assert amd.engine == "roofline" and "vendor=amd" in amd.detail
    off = EngineChain(get_hardware("h200"), use_store=False, use_predictors=False)
    assert off.estimate(op).engine == "roofline"


def _fold(gpu: str, ours: float, roof: float, n: int) -> FoldResult:
    def metrics(mape: float) -> ErrorMetrics:
        return ErrorMetrics(n=n, mape=mape, median_ape=mape, p90_ape=mape, max_ape=mape)

    return FoldResult(family="collective", heldout=gpu, train_gpus=(), train_rows=0, fit_s=0.0,
                      transfer={ALL: metrics(ours)}, roofline={ALL: metrics(roof)})


def test_fold_metrics_log_the_denominator_where_scored():
    from predictors.transfer_tracking import fold_metrics

    old = _fold("a", 10.0, 20.0, 5)  # a fold from before the denominator was scored
    new = replace(old, heldout="b", denominator={ALL: old.roofline[ALL]})
    got = fold_metrics([old, new])
    assert got["loo.b.all.denominator.mape"] == 20.0
    assert "loo.a.all.denominator.mape" not in got and got["loo.a.all.transfer.mape"] == 10.0


def test_gate_counts_each_gpu_once():
    # One GPU with many rows where both engines are far off must not decide for the others:
    # pooled over rows the transfer model "wins" here (54% vs 81%), per GPU it loses on 2 of 3.
    folds = [_fold("pcie", 60.0, 100.0, 3000), _fold("a", 30.0, 20.0, 500),
             _fold("b", 40.0, 25.0, 500)]
    passes, why = gate(folds)
    assert not passes and "median" in why and "3 GPUs" in why
    assert gate([_fold("a", 10.0, 20.0, 5), _fold("b", 12.0, 30.0, 5)])[0]
    assert gate([])[0] is False


def test_target_is_relative_to_the_datasheet_roofline():
    # The normaliser uses vendor peaks only: changing a YAML's (guessed) efficiency factor
    # does not move it; a dtype the GPU lacks is refused as the roofline refuses it.
    hw = get_hardware("a100-sxm-80gb")
    op = GemmSpec(m=4096, n=4096, k=4096, dtype=DType.BF16)
    derated = replace(hw, efficiency=replace(hw.efficiency, gemm=0.1, memory=0.1))
    assert ideal_seconds([op], hw)[0] == ideal_seconds([op], derated)[0] == pytest.approx(
        op.flops / hw.peak_flops(DType.BF16))
    with pytest.raises(SpecError):
        ideal_seconds([replace(op, dtype=DType.FP8)], hw)


def test_warm_l2_serves_the_resident_share_from_l2():
    """Repeated launches keep what fits in L2 there: a GEMM whose operands fit in L40S's L2
    reads them at its measured 5.2 TB/s (6x its GDDR6), one twice the L2's size half from
    each; a GPU without a published L2 bandwidth keeps its DRAM bound, and memory ops (eager
    PyTorch in the store) keep the cold roofline."""
    from analytical.ops import MemoryBoundSpec, MemoryOpKind
    from predictors.transfer_features import warm_memory_s

    l40s = get_hardware("l40s")
    small = GemmSpec(m=16, n=4096, k=4096, dtype=DType.BF16)  # 34 MB of operands
    assert warm_memory_s(small.bytes, l40s) == pytest.approx(small.bytes / 5.2e12)
    assert warm_memory_s(2 * l40s.l2_bytes, l40s) == pytest.approx(
        l40s.l2_bytes / 5.2e12 + l40s.l2_bytes / 864e9)
    assert warm_memory_s(small.bytes, replace(l40s, l2_bw_bytes_per_s=0.0)) == pytest.approx(
        small.bytes / 864e9)
    assert ideal_seconds([small], l40s)[0] == pytest.approx(small.bytes / 5.2e12)
    norm = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=16, cols=4096)
    assert ideal_seconds([norm], l40s)[0] == pytest.approx(norm.bytes / 864e9)


def test_gemm_harness_copies_set_the_resident_share():
    """aiconfigurator's TensorRT-LLM 1.3 collector cycles through max(1, min(5, ceil(L2 /
    weight))) weight copies, its 1.0 collector through 5, our profiler empties the L2 first,
    Vidur times 20 blocks' weights in turn, another stack repeats one weight; what the round
    touches against the L2 (full below it, none from 1.4x it) sets the share the GEMM
    denominator reads at L2 speed."""
    from predictors.transfer_harness import FLUSHED, gemm_copies, harness_copies, resident_share

    l40s, a100 = get_hardware("l40s"), get_hardware("a100-sxm-80gb")
    fits = GemmSpec(m=16, n=4096, k=2048, dtype=DType.BF16)  # 16.8 MB weight: 5 copies fit
    over = GemmSpec(m=16, n=8192, k=4096, dtype=DType.BF16)  # 67 MB: 2 copies, 134 MB
    assert gemm_copies(fits, l40s, "trtllm", 1.03) == 5
    assert gemm_copies(over, l40s, "trtllm", 1.03) == 2
    assert gemm_copies(GemmSpec(m=16, n=16384, k=8192, dtype=DType.BF16), l40s, "trtllm",
                       1.03) == 1
    assert gemm_copies(over, l40s, "trtllm", 1.0) == 5
    assert gemm_copies(over, l40s, "profiled", 0.0) == FLUSHED
    assert gemm_copies(over, l40s, "vidur", 0.0) == FLUSHED  # 20 blocks between two uses
    assert gemm_copies(over, l40s, "kernels", 2.1) == 1
    assert resident_share(fits, l40s, 5) == 1.0
    assert resident_share(fits, a100, 5) == 0.0  # 84 MB against A100's 40 MB
    assert resident_share(over, l40s, 2) == 0.0
    assert resident_share(over, l40s, 1) == 1.0  # one 67 MB weight in a 96 MB L2
    edge = GemmSpec(m=16, n=12288, k=4096, dtype=DType.BF16)  # one 101 MB weight
    assert 0.0 < resident_share(edge, l40s, 1) < 1.0
    assert resident_share(over, l40s, FLUSHED) == 0.0
    copies = harness_copies("gemm", [fits, over], l40s, ["trtllm", "trtllm"], [1.03, 1.03])
    seconds = ideal_seconds([fits, over], l40s, copies)
    assert seconds[0] == pytest.approx(fits.bytes / 5.2e12)
    assert seconds[1] == pytest.approx(over.bytes / 864e9)
    assert ideal_seconds([over], l40s)[0] == pytest.approx(over.bytes / 5.2e12)  # 1 copy


def _rows(gpus, stacks, ops, latency):
    from predictors.transfer import Rows

    n = len(ops)
    return Rows(gpu=np.array(gpus), ops=tuple(ops), stacks=np.array(stacks),
                versions=np.zeros(n), features=np.zeros((n, 1)), latency_s=np.array(latency),
                ideal_s=np.zeros(n), clock_hz=np.zeros(n))


def test_floor_is_per_stack_and_dtype_and_an_unseen_dtype_borrows_the_nearest():
    from predictors.transfer import floors, launch_floor

    bf16, fp8, fp4 = (GemmSpec(m=8, n=8, k=8, dtype=d) for d in (DType.BF16, DType.FP8,
                                                                  DType.FP4))
    rows = _rows(["a", "a", "b", "b", "a"], ["trt", "trt", "trt", "trt", "vidur"],
                 [bf16, fp8, bf16, fp8, bf16], [2e-6, 12e-6, 3e-6, 13e-6, 11e-6])
    floor = launch_floor("gemm", rows, np.ones(5))  # at 1 Hz the cycles are seconds
    # the smallest GPU's: a GPU with no tiny shapes in its sample overstates a floor
    assert floor == pytest.approx({"trt/bf16": 2e-6, "trt/fp8": 12e-6, "vidur/bf16": 11e-6})
    got = floors(floor, [bf16, fp4, bf16, fp8], ["trt", "trt", "vidur", "vidur"])
    # fp4 has no floor of its own: the same stack's fp8 (4 bits from it, bf16 is 12); an
    # unseen (stack, dtype) pair with no same-stack dtype near it takes that stack's nearest
    np.testing.assert_allclose(got, [2e-6, 12e-6, 11e-6, 11e-6])
    assert launch_floor("collective", rows, np.ones(5)) == {}


def test_floor_is_in_cycles_at_each_gpus_boost_clock():
    """A launch-bound kernel takes a number of SM cycles: measured on a 2 GHz GPU at 2 us and a
    1 GHz GPU at 5 us, the floor is 4,000 cycles (the smaller), i.e. 4 us on a 1 GHz GPU and
    2 us at 2 GHz; a GPU whose YAML states no clock is asked at the training median."""
    from dataclasses import replace

    from predictors.transfer import TransferModel, launch_floor

    op = GemmSpec(m=8, n=8, k=8, dtype=DType.BF16)
    rows = _rows(["fast", "slow"], ["trt", "trt"], [op, op], [2e-6, 5e-6])
    floor = launch_floor("gemm", rows, np.array([2e9, 1e9]))
    assert floor == pytest.approx({"trt/bf16": 4000.0})
    model = TransferModel.__new__(TransferModel)
    model.floor_cycles, model.reference_clock_hz = floor, 1e9
    hw = get_hardware("l40s")
    assert hw.boost_clock_hz == 2.52e9
    assert model.floor_seconds([op], ["trt"], hw)[0] == pytest.approx(4000 / 2.52e9)
    unstated = replace(hw, boost_clock_hz=0.0)
    assert model.floor_seconds([op], ["trt"], unstated)[0] == pytest.approx(4e-6)


def test_flash_attention_traffic_and_unsplit_decode_bound():
    """K/V re-read once per 128-query tile (causal: half the keys on average); a decode whose
    batch x KV heads covers a quarter of the SMs draws a quarter of the bandwidth."""
    from analytical.ops import AttentionSpec, Phase
    from predictors.transfer_features import transfer_feature_names, transfer_matrix

    hw = get_hardware("h100-sxm")  # 132 SMs
    names = transfer_feature_names("attention")
    col = {n: names.index(n) for n in ("log2_flash_kv_traffic_s", "log2_unsplit_decode_s",
                                       "log2_memory_s")}
    short = AttentionSpec(batch=1, q_len=128, kv_len=4096, heads=8, kv_heads=8, head_dim=128,
                          causal=False)
    long = replace(short, q_len=1024)
    causal = replace(long, causal=True)
    x = transfer_matrix("attention", [short, long, causal], hw)
    kv = col["log2_flash_kv_traffic_s"]
    assert x[1, kv] - x[0, kv] == pytest.approx(3.0)  # 8 query tiles, 8x the K/V traffic
    assert x[1, kv] > x[2, kv]  # causal reads fewer keys per query
    decode = AttentionSpec(batch=33, q_len=1, kv_len=4096, heads=8, kv_heads=1, head_dim=128,
                           phase=Phase.DECODE)
    d = transfer_matrix("attention", [decode], hw)[0]
    assert d[col["log2_unsplit_decode_s"]] - d[col["log2_memory_s"]] == pytest.approx(2.0)


def test_residual_groups_split_bias_by_band_and_fold_small_groups():
    from predictors.transfer_residuals import latency_band, residual_groups

    ops = [GemmSpec(m=64, n=64, k=64)] * 30 + [GemmSpec(m=64, n=64, k=64, dtype=DType.FP8)] * 5
    measured = np.array([5e-6] * 20 + [2e-3] * 10 + [5e-6] * 5)
    # tiny bf16 rows 50% too slow, large ones 20% too fast, the 5 fp8 rows exact
    predicted = measured * np.array([1.5] * 20 + [0.8] * 10 + [1.0] * 5)
    groups = residual_groups(ops, ["trtllm"] * 35, measured, predicted)
    got = {(g["dtype"], g["band"]): (g["n"], round(g["mape"], 6), round(g["signed_median"], 6))
           for g in groups}
    assert got == {("bf16", "<10us"): (20, 50.0, 50.0), ("bf16", "other"): (10, 20.0, -20.0),
                   ("fp8", "other"): (5, 0.0, 0.0)}
    assert [latency_band(t) for t in (9.9e-6, 10e-6, 5e-5, 1e-3)] == [
        "<10us", "10-30us", "30-100us", ">=1ms"]


class _AnswersAll:
    """A transfer model that would price any op at 1 ms."""

    default_stack = "trtllm"

    def outside_domain(self, op: object, hw: object) -> None:
        return None

    def predict(self, ops: list[object], hw: object) -> list[float]:
        return [1e-3] * len(ops)


def test_the_chain_takes_transfer_answers_for_gemms_only(monkeypatch):
    # Attention and memory-bound time is the framework's kernel choice, which simulate.efficiency
    # models on the roofline; a GEMM is cuBLAS everywhere (transfer_answer.CHAIN_FAMILIES).
    import predictors.transfer_tracking as tracking
    from analytical.ops import AttentionSpec, MemoryBoundSpec, MemoryOpKind
    from predictors.transfer_answer import transfer_answers

    monkeypatch.setattr(tracking, "load_transfer", lambda family, **_: _AnswersAll())
    hw = get_hardware("gb200")
    gemm = GemmSpec(m=512, n=4096, k=4096)
    assert transfer_answers("gemm", [gemm], hw).seconds == {gemm.key: 1e-3}
    attention = AttentionSpec(batch=1, q_len=4096, kv_len=4096, heads=32, kv_heads=8,
                              head_dim=128)
    norm = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=4096, cols=4096)
    for family, op in (("attention", attention), ("memory", norm)):
        answer = transfer_answers(family, [op], hw)
        assert not answer.loaded and not answer.seconds


def test_collective_rows_carry_nccls_transport() -> None:
    """The transport one-hot tells a P2P-less PCIe box (L40S: SHM) from one with PCIe
    switches (A100 PCIe), which the links alone do not."""
    from analytical.hardware import get_hardware
    from analytical.ops import CollectiveKind, CollectiveSpec
    from predictors.transfer_features import transfer_feature_names, transfer_matrix

    names = transfer_feature_names("collective")
    op = CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=1 << 24, group_size=4,
                        ranks_per_node=4)
    cols = [names.index(f"transport_{t}") for t in ("nvlink", "pcie_p2p", "shm")]
    rows = {gpu: transfer_matrix("collective", [op], get_hardware(gpu))[0][cols].tolist()
            for gpu in ("l40s", "a100-pcie-80gb", "h100-sxm")}
    assert rows == {"l40s": [0.0, 0.0, 1.0], "a100-pcie-80gb": [0.0, 1.0, 0.0],
                    "h100-sxm": [1.0, 0.0, 0.0]}


def test_a_held_out_gpu_is_not_trained_on_copies_of_its_rows() -> None:
    """Another GPU's table whose shared op keys carry the held-out GPU's latencies to the bit
    is the same measurement under another name (Vidur's one send/recv table for two systems):
    `copies_of` marks all of it. A table where single rows coincide (whole-microsecond
    timings) or another stack's rows are measurements of their own."""
    from analytical.ops import CollectiveKind, CollectiveSpec
    from predictors.transfer import Rows
    from predictors.transfer_eval import copies_of

    sizes = [1 << (10 + i) for i in range(10)]
    ops = [CollectiveSpec(kind=CollectiveKind.SEND_RECV, size_bytes=b, group_size=2,
                          ranks_per_node=1) for b in sizes]
    t = [1e-5 * (i + 1) for i in range(10)]
    other = [x if i == 0 else 2 * x for i, x in enumerate(t)]  # one coincidence in ten
    gpu = ["a100-pcie-80gb"] * 10 + ["h100-nvl"] * 10 + ["a40"] * 10 + ["h100-sxm"] * 10
    stacks = ["vidur"] * 30 + ["nccl"] * 10
    rows = Rows(gpu=np.array(gpu), ops=tuple(ops * 4), stacks=np.array(stacks),
                versions=np.zeros(40), features=np.zeros((40, 1)),
                latency_s=np.array(t + t + other + t), ideal_s=np.ones(40),
                clock_hz=np.zeros(40))
    marked = copies_of(rows, "a100-pcie-80gb")
    assert marked.tolist() == [False] * 10 + [True] * 10 + [False] * 20
    assert not copies_of(rows, "a40").any()


def test_flash_tiles_against_the_sms_shared_memory():
    """A 128-query Q tile and 64-key K/V tiles in the SM's shared memory (by compute
    capability): at head_dim 256 in bf16 a 100 KB Ada SM holds the Q tile and less than one K/V
    tile pair, a 228 KB Hopper SM 2.5625; fp8 halves every tile; no compute capability: NaN."""
    from analytical.ops import AttentionSpec
    from predictors.transfer_features import transfer_feature_names, transfer_matrix

    names = transfer_feature_names("attention")
    tiles, resident = names.index("smem_kv_tiles"), names.index("smem_resident_ctas")
    op = AttentionSpec(batch=1, q_len=2048, kv_len=2048, heads=8, kv_heads=8, head_dim=256)
    ada, hopper = (transfer_matrix("attention", [op], get_hardware(g))[0]
                   for g in ("l40s", "h100-sxm"))
    assert ada[tiles] == pytest.approx((100 - 64) / 64)
    assert hopper[tiles] == pytest.approx((228 - 64) / 64)
    assert ada[resident] == 1.0
    fp8 = transfer_matrix("attention", [replace(op, dtype=DType.FP8)], get_hardware("h100-sxm"))
    assert fp8[0, tiles] == pytest.approx((228 - 32) / 32)
    no_cc = replace(get_hardware("h100-sxm"), topology=None)
    assert np.isnan(transfer_matrix("attention", [op], no_cc)[0, tiles])



def test_decode_kernel_follows_tensorrt_llms_dispatch():
    """Below SM 10.0 TensorRT-LLM runs masked MHA, not XQA, for vanilla MHA and for more than 32
    query heads per KV head (kernelUtils.cpp); from it, trtllm-gen for every group (attentionOp.h).
    Below compute capability 9.0 it dequantizes an fp8 KV cache to 16 bits before the MMA
    (xqa/mha.cu); prefill rows have neither."""
    from analytical.ops import AttentionSpec, Phase
    from predictors.transfer_features import transfer_feature_names, transfer_matrix

    names = transfer_feature_names("attention")
    cols = [names.index("decode_masked_mha"), names.index("kv_fp8_dequantized")]

    def kernel(gpu: str, heads: int, dtype: DType, phase: Phase = Phase.DECODE) -> list[float]:
        op = AttentionSpec(batch=8, q_len=1 if phase == Phase.DECODE else 512, kv_len=4096,
                           heads=heads, kv_heads=1, head_dim=128, phase=phase, dtype=dtype)
        return transfer_matrix("attention", [op], get_hardware(gpu))[0][cols].tolist()

    assert kernel("l40s", 8, DType.FP8) == [0.0, 1.0]
    assert kernel("h100-sxm", 8, DType.FP8) == [0.0, 0.0]
    assert kernel("l40s", 8, DType.BF16) == [0.0, 0.0]
    assert kernel("h100-sxm", 1, DType.BF16) == [1.0, 0.0]
    assert kernel("h100-sxm", 64, DType.BF16) == [1.0, 0.0]
    assert kernel("h100-sxm", 32, DType.BF16) == [0.0, 0.0]
    assert kernel("b200", 64, DType.BF16) == [0.0, 0.0]
    assert kernel("l40s", 8, DType.FP8, Phase.PREFILL) == [0.0, 0.0]


def test_an_ada_fp8_context_tile_that_spills_is_priced_at_the_16_bit_peak():
    """TensorRT-LLM's sm89 e4m3 context tiles (fmha_v2 setup.py: 128 x 128 up to head_dim 64,
    64 x 32 above, four warps along the queries) keep 368, 164, 236 and 308 registers per thread
    live at head_dim 64, 128, 192 and 256: over the 255 a thread has at 64 and 256, so those
    rows' denominator takes the bf16 peak; not on Hopper, not in bf16, not for decode."""
    from analytical.ops import AttentionSpec, Phase
    from predictors.transfer_kernels import fp8_context_spills, qmma_tile_registers

    assert [qmma_tile_registers(d, 1.0) for d in (64, 128, 192, 256)] == [368, 164, 236, 308]
    l40s, h100 = get_hardware("l40s"), get_hardware("h100-sxm")

    def op(head_dim: int, dtype: DType = DType.FP8, phase: Phase = Phase.PREFILL):
        q = 1 if phase == Phase.DECODE else 8192
        return AttentionSpec(batch=4, q_len=q, kv_len=8192, heads=32, kv_heads=8,
                             head_dim=head_dim, phase=phase, dtype=dtype)

    assert [fp8_context_spills(op(d), l40s) for d in (64, 128, 192, 256)] == [
        True, False, False, True]
    assert not fp8_context_spills(op(64), h100)
    assert not fp8_context_spills(op(64, DType.BF16), l40s)
    assert not fp8_context_spills(op(64, phase=Phase.DECODE), l40s)
    spills, holds = op(64), op(128)
    assert ideal_seconds([spills], l40s)[0] == pytest.approx(spills.flops / l40s.peak_flops_bf16)
    assert ideal_seconds([holds], l40s)[0] == pytest.approx(holds.flops / l40s.peak_flops_fp8)
    assert ideal_seconds([spills], h100)[0] == pytest.approx(spills.flops / h100.peak_flops_fp8)


def test_rows_faster_than_their_dram_traffic_are_left_out():
    """A GEMM or attention row faster than its bytes beyond the L2 take from DRAM at the
    datasheet bandwidth did not move them (aiconfigurator's K-only A100 KV cache): left out;
    a row that may serve its bytes from L2, or a memory op, is kept."""
    from predictors.transfer_data import below_dram_bound

    hw = get_hardware("a100-sxm-80gb")
    big = 2e9  # bytes, far beyond the 40 MB L2: at least ~0.96 ms at 2,039 GB/s
    frame = pd.DataFrame({"bytes": [big, big, hw.l2_bytes / 2],
                          "median_s": [0.64e-3, 1.1e-3, 1e-6]})
    assert below_dram_bound(frame, "attention", hw).tolist() == [True, False, False]
    assert not below_dram_bound(frame, "memory", hw).any()

def _collective_data(offset: dict[str, float]):
    """Collective rows at NCCL's model times a per-GPU factor (what a machine or harness adds
    to NCCL's model), on four GPUs."""
    from analytical.nccl import nccl_time
    from analytical.ops import CollectiveKind, CollectiveSpec

    rows = []
    for name, factor in offset.items():
        hw = get_hardware(name)
        for size, group, kind in itertools.product([1 << b for b in range(10, 29, 2)], (2, 4, 8),
                                                   (CollectiveKind.ALL_REDUCE,
                                                    CollectiveKind.ALL_GATHER)):
            op = CollectiveSpec(kind=kind, size_bytes=size, group_size=group,
                                ranks_per_node=group)
            rows.append({**op_to_dict(op), "op_key": op.key, "hardware": name,
                         "provenance": "imported:synthetic-1.0/nccl-2.27.3",
                         "median_s": factor * nccl_time(op, hw)})
    frame = pd.DataFrame(rows)

    class Store:
        def frame(self, family: str, *, status: str = "ok") -> pd.DataFrame:
            return frame if family == "collective" else frame.iloc[:0]

    return load_transfer_data(Store(), "collective", cap=300, seed=0)


def test_the_collective_correction_is_shrunk_where_it_does_not_transfer() -> None:
    """Nested leave-one-GPU-out keeps the whole correction where every GPU shares it (all
    1.5x NCCL's model) and shrinks it where each machine adds its own (0.6x-1.7x)."""
    from predictors.transfer import all_rows
    from predictors.transfer_eval import correction_weight, fit_shrunk

    gpus = ("a100-sxm-80gb", "h100-sxm", "b200", "l40s")
    shared = _collective_data(dict.fromkeys(gpus, 1.5))
    assert correction_weight(shared, all_rows(shared), CONFIG) == 1.0
    own = _collective_data(dict(zip(gpus, (1.7, 0.6, 1.6, 0.7), strict=True)))
    rows = all_rows(own)
    assert correction_weight(own, rows, CONFIG) < 1.0
    # the weight is chosen without the GPU a fold holds out, and travels with the model
    model = fit_shrunk(own, CONFIG, rows=rows, leave_out=("h100-sxm",))
    assert model.gpus == tuple(sorted(set(gpus) - {"h100-sxm"}))
    assert model.correction_weight == correction_weight(
        own, rows.select(rows.gpu != "h100-sxm"), CONFIG)


def test_the_correction_share_is_the_smallest_within_one_standard_error() -> None:
    """A correction that every inner fold agrees on is kept; one whose gain over a smaller share
    is within the folds' spread gives way to the smaller share."""
    from predictors.transfer_eval import WEIGHTS, parsimonious_weight

    agreed = np.array([[0.30, 0.20, 0.12, 0.06, 0.02]] * 3) + np.array([[0.0], [0.01], [0.02]])
    assert parsimonious_weight(agreed) == 1.0
    # the whole correction is best on average (0.20 against 0.24 without it), but one fold
    # gains 0.26 and the other two lose 0.06 and 0.08
    noisy = np.array([[0.40, 0.34, 0.28, 0.22, 0.14],
                      [0.16, 0.18, 0.19, 0.20, 0.22],
                      [0.16, 0.17, 0.19, 0.21, 0.24]])
    assert float(np.argmin(noisy.mean(axis=0))) == 4
    assert parsimonious_weight(noisy) == WEIGHTS[0]


def test_the_correction_weight_is_saved_and_scales_the_log_ratio(model, data, tmp_path):
    ops = list(data.gpus["b200"].ops[:20])
    hw = get_hardware("b200")
    full = model.predict(ops, hw)
    loaded = TransferModel.load(model.save(tmp_path / "m"))
    loaded.correction_weight = 0.0
    bare = loaded.predict(ops, hw)  # the denominator alone
    loaded.correction_weight = 0.5
    again = TransferModel.load(loaded.save(tmp_path / "half"))
    assert again.correction_weight == 0.5
    assert np.allclose(again.predict(ops, hw), np.sqrt(full * bare), rtol=1e-9)


def test_outcome_reports_the_below_bound_counts_the_data_computed():
    """`TransferData.below_bound` is counted once by `load_transfer_data`; the outcome's record
    and its summary read it rather than recounting the GPUs' rows."""
    from types import SimpleNamespace

    from predictors.transfer_data import TransferData
    from predictors.transfer_pipeline import TransferOutcome

    data = TransferData(family="attention", gpus={}, skipped={"x": "left out"}, cap=1, seed=0,
                        fingerprint="f", below_bound={"a100-sxm-80gb": 294})
    model = SimpleNamespace(family="attention", gpus=("h100-sxm",), rows=0, stacks=("trtllm",),
                            default_stack="trtllm", n_trees=1)
    out = TransferOutcome(model=model, data=data)
    assert out.as_dict()["below_dram_bound"] == {"a100-sxm-80gb": 294}
    assert "skipped: x: left out; a100-sxm-80gb: 294 rows below their DRAM bound;" in \
        out.summary()
