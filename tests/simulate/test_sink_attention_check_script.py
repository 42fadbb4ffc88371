# SPDX-License-Identifier: Apache-2.0
"""`scripts/sink_attention_check.py`: GPT-OSS attention as priced against cuDNN's measured
sink kernels (the ops it prices and the interpolation of the measured times)."""

from __future__ import annotations

import pytest
from script_loader import load_script

check = load_script("sink_attention_check")


def test_sliding_layer_ops_keep_the_window_pairs():
    ops = check.layer_ops("sliding", 4096, batch=4)
    pairs = sum(op.batch * op.score_pairs for op in ops)
    # query p (1-based) sees min(p, 128) keys: 128 * 129 / 2 + (4096 - 128) * 128 per sequence
    assert pairs == 4 * (128 * 129 / 2 + (4096 - 128) * 128)
    full, = check.layer_ops("full", 4096, batch=4)
    assert full.causal and full.batch == 4 and full.heads == 64 and full.head_dim == 64


def test_measured_time_is_interpolated_between_points_and_exact_on_them():
    t = check.measured_ms("gb200", "full", 8192)
    assert t == pytest.approx(check.MEASURED_MS[("gb200", "full", 8192)])
    mid = check.measured_ms("gb200", "full", 4096)
    assert check.MEASURED_MS[("gb200", "full", 2048)] < mid < t
    with pytest.raises(ValueError):
        check.measured_ms("gb200", "full", 65536)


def test_rows_cover_every_point_and_the_corpus_shape():
    out = check.rows()
    assert len(out) == len(check.MEASURED_MS) + 2
    assert all("model" in line for line in out)
