# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures for the predictor tests: a synthetic GEMM store frame with a known law."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.ops import GemmSpec, op_to_dict
from predictors.train import TrainConfig

HARDWARE = "h100-sxm"
PROVENANCE = "synthetic"


def synthetic_gemm_frame(seed: int = 0) -> pd.DataFrame:
    """~340 bf16/fp8 GEMMs; latency = max(compute at 70% peak, memory at 80% BW) + 6 us,
    times a deterministic +-3% wiggle."""
    hw = get_hardware(HARDWARE)
    rng = np.random.default_rng(seed)
    rows = []
    sizes_m = [16, 64, 256, 1024, 4096]
    sizes_nk = [512, 1024, 2048, 4096, 8192, 14336]
    for m, n, k, dtype in itertools.product(sizes_m, sizes_nk, sizes_nk[:4], ["bf16", "fp8"]):
        op = GemmSpec(m=m, n=n, k=k, dtype=DType(dtype))
        compute = op.flops / (0.7 * hw.peak_flops(op.dtype))
        memory = op.bytes / (0.8 * hw.memory_bw_bytes_per_s)
        latency = (max(compute, memory) + 6e-6) * (1 + 0.03 * np.sin(m + n / 7 + k / 13))
        rows.append({**op_to_dict(op), "op_key": op.key, "hardware": HARDWARE,
                     "provenance": PROVENANCE, "backend": "synthetic",
                     "median_s": latency * (1 + 0.001 * rng.standard_normal())})
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def gemm_frame() -> pd.DataFrame:
    return synthetic_gemm_frame()


@pytest.fixture(scope="session")
def fast_config() -> TrainConfig:
    # one inner fold (search_valid_rows=0): the multi-fold search is tested on the anchored model
    return TrainConfig(seed=0, nthread=2, n_configs=2, max_rounds=150, early_stopping_rounds=20,
                       rf_trees=10, search_valid_rows=0)


@pytest.fixture()
def llmsim_home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path / "home"


def synthetic_collective_frame() -> pd.DataFrame:
    """all_reduce and all_gather on 2, 4 and 8 ranks of one node, 1 KiB to 256 MiB in
    sqrt(2) steps (nccl-tests style). Two protocols, as in NCCL: a low-latency one (4 us +
    bus bytes / 40 GB/s) and a bandwidth one (alpha(ranks) + bus bytes / 300 GB/s); the
    latency is their smooth minimum (a p=4 norm of the two). Neither log-log nor linear
    interpolation between grid points follows the switch, in a way a model can learn."""
    from analytical.ops import CollectiveKind, CollectiveSpec

    rows = []
    sizes = sorted({int(round(2 ** (10 + i / 2))) // 16 * 16 for i in range(37)})
    for kind, ranks, size in itertools.product(
            (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER), (2, 4, 8), sizes):
        op = CollectiveSpec(kind=kind, size_bytes=size, group_size=ranks, ranks_per_node=ranks)
        low_latency = 4e-6 + op.bytes / 40e9
        bandwidth = 12e-6 * (1 + 0.1 * np.log2(ranks)) + op.bytes / 300e9
        latency = (low_latency ** -4 + bandwidth ** -4) ** -0.25
        rows.append({**op_to_dict(op), "op_key": op.key, "hardware": HARDWARE,
                     "provenance": PROVENANCE, "backend": "synthetic", "median_s": latency})
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def collective_frame() -> pd.DataFrame:
    return synthetic_collective_frame()


_FRESH_PREDICT = (
    "import sys, json\n"
    "from analytical.hardware import get_hardware\n"
    "from analytical.ops import op_from_dict\n"
    "from predictors.model import LatencyModel\n"
    "m = LatencyModel.load(sys.argv[1])\n"
    "ops = [op_from_dict(m.family, d) for d in json.loads(sys.argv[2])]\n"
    "print(json.dumps([v.hex() for v in m.predict(ops, get_hardware(sys.argv[3])).tolist()]))\n"
)


@pytest.fixture(scope="session")
def predict_in_fresh_process():
    """Load a saved model folder in a new Python process and return its predictions, exact
    (floats travel as hex), to prove a reload is bit-identical."""
    from analytical.ops import op_to_dict

    root = Path(__file__).resolve().parents[2]

    def run(folder, ops, hardware: str = HARDWARE) -> np.ndarray:
        out = subprocess.run([sys.executable, "-c", _FRESH_PREDICT, str(folder),
                              json.dumps([op_to_dict(op) for op in ops]), hardware],
                             capture_output=True, text=True, check=True, cwd=root, timeout=120)
        return np.array([float.fromhex(v) for v in json.loads(out.stdout)])

    return run
