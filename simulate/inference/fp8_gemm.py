# SPDX-License-Identifier: Apache-2.0
"""An engine's fp8 GEMM priced as its bf16 twin (same m, n, k) times a measured time ratio.

The store's fp8 GEMM rows are TensorRT-LLM's kernels (AIConfigurator); vLLM runs its fp8 linear
layers with its own CUTLASS kernel (``vllm/_custom_ops.py`` cutlass_scaled_mm, per-token
activation and per-channel weight scales on Hopper for ``--quantization fp8``), whose speed-up
over bf16 differs by m. `Fp8GemmRatios` holds what an engine's YAML (``fp8_gemm_vs_bf16``) says
about it: shape-free (m, ratio) points for small m (a published table), and optionally, above
them, per-(n, k) ratio curves from a measurement file (`load_ratio_table`): the nearest measured
(n, k) in log space, interpolated in log m, flat beyond the measured m (`nearest_shape_ratio`,
which `simulate.torch_kernels` reads for torchao's rowwise forward too). `DenseCost` asks the
chain for the bf16 twin and multiplies.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.ops import GemmSpec, OpSpec

Curve = tuple[tuple[int, float], ...]  # (m, fp8 time / bf16 time), m ascending


@dataclass(frozen=True, slots=True, kw_only=True)
class Fp8GemmRatios:
    """fp8 over bf16 GEMM time: ``points`` up to their last m (any shape), then ``shapes``
    ((n, k, curve) measured per weight shape) above it. Empty: the chain's fp8 answer."""

    points: Curve = ()
    shapes: tuple[tuple[int, int, Curve], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.points or self.shapes)

    def ratio(self, op: OpSpec) -> float | None:
        """The ratio for ``op`` (an fp8 GEMM of batch 1), or None: price it as the chain does."""
        if not isinstance(op, GemmSpec) or op.dtype != DType.FP8 or op.batch != 1:
            return None
        if self.points and op.m <= self.points[-1][0]:
            return _interp(op.m, self.points, log=False)
        if not self.shapes:
            return None
        return nearest_shape_ratio(self.shapes, n=op.n, k=op.k, m=op.m)


def nearest_shape_ratio(shapes: tuple[tuple[int, int, Curve], ...], *, n: int, k: int,
                        m: int) -> float:
    """The ratio at ``m`` of the measured (n, k) nearest to ``n``, ``k`` in log space,
    interpolated in log m and flat beyond the measured m."""
    _, _, curve = min(shapes, key=lambda s: math.hypot(math.log(s[0] / n), math.log(s[1] / k)))
    return _interp(m, curve, log=True)


def _interp(m: int, curve: Curve, *, log: bool) -> float:
    xs = [math.log(x) if log else x for x, _ in curve]
    return float(np.interp(math.log(m) if log else m, xs, [r for _, r in curve]))


def file_fingerprint(path: Path) -> str:
    """First 16 hex digits of the file's SHA-256: what an engine YAML pins a table to."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@functools.cache
def load_ratio_table(path: Path, *, fingerprint: str, bf16: str, fp8: str,
                     min_m: int = 1) -> tuple[tuple[int, int, Curve], ...]:
    """Per-(n, k) curves of the ``fp8`` kernel's time over the ``bf16`` kernel's, for m >=
    ``min_m``, from a CSV with columns m, n, k, kernel, seconds (``scripts/gpu_fp8_gemm.py``;
    a shape measured twice: the mean ratio). The file must match ``fingerprint`` (a changed
    measurement is a changed preset: exit 2 naming the file otherwise)."""
    if not path.is_file():
        raise SpecError("fp8_gemm_vs_bf16.table", f"{path} not found")
    if (got := file_fingerprint(path)) != fingerprint:
        raise SpecError("fp8_gemm_vs_bf16.table",
                        f"{path.name} has fingerprint {got}, the preset pins {fingerprint}")
    times: dict[tuple[int, int, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if int(row["m"]) >= min_m and row["kernel"] in (bf16, fp8):
                key = (int(row["n"]), int(row["k"]), int(row["m"]))
                times[key][row["kernel"]].append(float(row["seconds"]))
    curves: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
    for (n, k, m), by_kernel in sorted(times.items()):
        if by_kernel[bf16] and by_kernel[fp8]:
            curves[(n, k)].append((m, float(np.mean(by_kernel[fp8]) / np.mean(by_kernel[bf16]))))
    return tuple((n, k, tuple(c)) for (n, k), c in sorted(curves.items()))


def ratios_from(points: Sequence[Sequence[float]],
                shapes: tuple[tuple[int, int, Curve], ...] = ()) -> Fp8GemmRatios:
    """`Fp8GemmRatios` from a YAML's (m, ratio) pairs and a loaded table."""
    return Fp8GemmRatios(points=tuple((int(m), float(r)) for m, r in points), shapes=shapes)
