# SPDX-License-Identifier: Apache-2.0
"""Splits (disjoint, deterministic, the promised regions), metrics and baselines."""

from __future__ import annotations

import numpy as np
import pytest

from analytical.errors import LlmsimError
from analytical.ops import AttentionSpec, GemmSpec, MemoryBoundSpec, MemoryOpKind
from predictors.baselines import InterpolationBaseline
from predictors.dataset import fingerprint, pick_provenance, training_data
from predictors.evaluate import error_metrics, mape_gap, plot_predicted_vs_measured
from predictors.splits import evaluation_splits, largest_split, random_split, shape_region_split


def _gemms():
    return [GemmSpec(m=m, n=n, k=k) for m in (16, 256, 4096) for n in (512, 1024, 2048, 4096)
            for k in (512, 1024, 2048, 8192, 16384)]


def test_random_split_is_seeded_and_disjoint():
    a, b = random_split(100, seed=3), random_split(100, seed=3)
    assert np.array_equal(a.test, b.test) and len(a.test) == 20 and len(a.train) == 80
    assert not set(a.test) & set(a.train)
    assert not np.array_equal(a.test, random_split(100, seed=4).test)


def test_largest_split_holds_out_the_top_flops():
    ops = _gemms()
    split = largest_split(ops)
    flops = np.array([op.flops for op in ops])
    assert len(split.test) == round(0.2 * len(ops))
    assert flops[split.test].min() >= flops[split.train].max()


def test_gemm_shape_split_has_unseen_nk_pairs():
    ops = _gemms()
    split = shape_region_split(ops, seed=0)
    pairs = lambda idx: {(ops[i].n, ops[i].k) for i in idx}  # noqa: E731
    assert pairs(split.test) and not pairs(split.test) & pairs(split.train)
    assert len(pairs(split.test)) == 4  # 20% of the 20 distinct pairs


def test_attention_splits_hold_out_head_configs_and_interior_kv_len():
    configs = [(8, 8, 128), (32, 8, 128), (32, 4, 128), (16, 16, 64), (64, 8, 128)]
    lengths = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
    ops = [AttentionSpec(batch=1, q_len=1, kv_len=t, heads=h, kv_heads=kv, head_dim=d)
           for h, kv, d in configs for t in lengths]
    splits = {s.name: s for s in evaluation_splits(ops, seed=1)}
    assert list(splits) == ["random", "heldout_large", "heldout_shape", "heldout_seq"]
    config = lambda idx: {(ops[i].heads, ops[i].kv_heads, ops[i].head_dim) for i in idx}  # noqa: E731
    shape = splits["heldout_shape"]
    assert len(config(shape.test)) == 1  # 20% of 5 configurations, every length of it
    assert not config(shape.test) & config(shape.train) and len(shape.test) == len(lengths)
    seq = splits["heldout_seq"]
    held = {ops[i].kv_len for i in seq.test}
    assert held and 128 not in held and 65536 not in held
    assert not held & {ops[i].kv_len for i in seq.train}
    assert len(held) == 2 and len(seq.test) == 2 * len(configs)


def test_a_shape_region_of_a_handful_of_rows_takes_more_shapes():
    # as our H100/H200 sweeps: every kind at three hidden sizes, the loss and the embedding
    # also at two vocabulary sizes; a vocabulary size alone is 4 of 124 rows
    ops = [MemoryBoundSpec(kind=kind, rows=r, cols=c)
           for kind in (MemoryOpKind.ADD, MemoryOpKind.RMSNORM, MemoryOpKind.SILU)
           for r in (1024, 8192, 32768) for c in (4096, 8192, 14336) for _ in range(4)]
    ops += [MemoryBoundSpec(kind=MemoryOpKind.EMBEDDING, rows=r, cols=c)
            for r in (1024, 8192) for c in (16032, 128256)]
    rare_first = 0
    for seed in range(8):
        split = shape_region_split(ops, seed=seed)
        held = {ops[i].cols for i in split.test}
        assert len(split.test) >= 0.1 * len(ops)
        assert not held & {ops[i].cols for i in split.train}
        if 16032 in held:
            rare_first += 1
            assert len(held) == 2
        else:
            assert len(held) == 1  # one interior hidden size already holds 36 rows
    assert rare_first  # some seed picks the vocabulary size first


def test_error_metrics_closed_form():
    m = error_metrics(np.array([1.0, 2.0, 4.0]), np.array([1.1, 2.0, 3.0]))
    assert m.n == 3
    assert m.mape == pytest.approx((10 + 0 + 25) / 3)
    assert m.median_ape == pytest.approx(10.0)
    assert m.p90_ape == pytest.approx(22.0)  # numpy linear interpolation between 10 and 25
    assert m.max_ape == pytest.approx(25.0)
    with pytest.raises(LlmsimError, match="positive"):
        error_metrics(np.array([0.0]), np.array([1.0]))


def test_interpolation_baseline_exact_and_between():
    ops = [GemmSpec(m=256, n=1024, k=k) for k in (1024, 4096)]
    base = InterpolationBaseline(k=2).fit(ops, np.array([1e-5, 4e-5]))
    assert base.predict(ops[:1])[0] == pytest.approx(1e-5)
    # k = 2048 sits half-way in log2 space: geometric mean of the neighbours
    mid = base.predict([GemmSpec(m=256, n=1024, k=2048)])[0]
    assert mid == pytest.approx(2e-5)


def test_fingerprint_and_dataset(gemm_frame):
    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    assert data.fingerprint.rows == len(gemm_frame) == len(data)
    shuffled = training_data(gemm_frame.sample(frac=1.0, random_state=1), hardware="h100-sxm",
                             family="gemm")
    assert shuffled.fingerprint == data.fingerprint  # order-independent
    changed = data.latency_s.copy()
    changed[0] *= 1.0000001
    assert fingerprint([op.key for op in data.ops], changed) != data.fingerprint
    doubled = gemm_frame.iloc[[0, 0]].assign(median_s=[1e-5, 3e-5])
    folded = training_data(doubled, hardware="h100-sxm", family="gemm")
    assert len(folded) == 1 and folded.duplicates_folded == 1
    assert folded.latency_s[0] == pytest.approx(2e-5)


def test_provenance_choice(gemm_frame):
    two = gemm_frame.assign(provenance=["a"] * 100 + ["b"] * (len(gemm_frame) - 100))
    assert pick_provenance(two) == "b"
    with pytest.raises(LlmsimError, match="available: b"):
        pick_provenance(two, "c")
    # coverage first: "a" holds fewer rows but two dtypes, "b" one
    dtypes = ["fp8"] * 50 + ["bf16"] * 50 + ["bf16"] * (len(gemm_frame) - 100)
    assert pick_provenance(two.assign(dtype=dtypes), family="gemm") == "a"
    assert pick_provenance(two, family="gemm") == "b"  # equal coverage: the most rows
    same = gemm_frame.assign(provenance=["x-1.0"] * 100 + ["x-2.0"] * (len(gemm_frame) - 100))
    half = same.iloc[: 200]
    assert pick_provenance(half, family="gemm") == "x-2.0"  # equal rows: the later name


def test_plot_writes_png(tmp_path):
    y = np.array([1e-5, 2e-5, 3e-5])
    path = plot_predicted_vs_measured(tmp_path / "p.png", {"random": (y, y * 1.1)}, title="t")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_mape_gap_is_the_difference_and_its_interval_moves_shapes_whole():
    measured = np.ones(6)
    model = np.array([1.1, 1.1, 1.1, 1.1, 1.1, 1.1])  # 10% everywhere
    base = np.array([1.2, 1.2, 1.2, 1.2, 1.0, 1.0])  # 20% on four rows, 0% on two
    shapes = np.array([0, 0, 1, 1, 2, 2])
    gap = mape_gap(measured, model, base, shapes, seed=0, draws=4000)
    assert gap.gap == pytest.approx(10.0 - 80.0 / 6)  # 10% vs 13.33%
    assert gap.clusters == 3
    # a draw is a mean over 3 shapes (gaps -10, -10, +10 points): between -10 and +10, and
    # with 3 shapes the interval is wide; it contains the gap
    assert -10.0 - 1e-9 <= gap.low < gap.gap < gap.high <= 10.0 + 1e-9
    assert gap == mape_gap(measured, model, base, shapes, seed=0, draws=4000)  # seeded
    # the same errors on 600 independent rows (a shape each): a far narrower interval
    many = mape_gap(np.ones(600), np.full(600, 1.1), np.tile(base, 100), np.arange(600))
    assert many.high - many.low < gap.high - gap.low


def test_train_all_counts_the_group_training_would_use(tmp_path):
    """`llmsim train all` sizes each (hardware, family) by the provenance group training picks
    (coverage first), not by the largest: a big one-dtype group loses to a small two-dtype
    one, so the pair is skipped when the small group is under --min-rows."""
    from analytical.dtypes import DType
    from predictors.pipeline import trainable_groups
    from profiler.fingerprint import Fingerprint
    from profiler.store import Measurement, Status, Store
    from profiler.timing import summarize

    gpu = Fingerprint(hardware="h100-sxm", device_name="Test GPU", device_count=1)

    def rows(provenance: str, dtypes: tuple[str, ...], sizes: range):
        return [Measurement(op=GemmSpec(m=s, n=512, k=512, dtype=DType(d)), fingerprint=gpu,
                            backend="test", status=Status.OK, timing=summarize([s * 1e-7]),
                            provenance=provenance)
                for d in dtypes for s in sizes]

    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        store.insert(rows("imported:big", ("bf16",), range(1, 81)))
        store.insert(rows("imported:wide", ("bf16", "fp8"), range(1, 16)))
    assert trainable_groups(db, min_rows=20) == [("h100-sxm", "gemm", 30)]
    assert trainable_groups(db, min_rows=31) == []
