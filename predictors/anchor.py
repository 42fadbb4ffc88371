# SPDX-License-Identifier: Apache-2.0
"""Measured curves as an anchor: the training table interpolated along one axis.

Some families are measured as dense 1-D sweeps: a collective is a curve of latency over message
size for each configuration (kind, group size, ranks per node, nodes, dtype), the way
nccl-tests reports it. Inside a measured curve, interpolating the table is hard to beat (the
``table`` baseline), so the anchored target (`predictors.model.Target.ANCHORED`)
starts from it: its trees learn ``ln(latency / anchor)``, the correction to the interpolated
table, from physics features (where the curve bends between protocols and bandwidth limits).

Between two measured points a table can be read two ways (`INTERPOLATIONS`): ``log_log``
(a power law between the points) or ``linear`` (latency affine in bytes between the points:
the alpha-beta model, exact on a curve of one protocol). Which one is kept is decided by the
data: the one with the lower leave-one-out MAPE over the table's own points (`AnchorTable.build`).
On nccl-tests grids (sizes 2x apart) linear wins clearly; on dense noisy grids the two tie.
Rows outside every measured curve (an unseen configuration, or a size beyond the measured
range) have no anchor and are priced by the roofline-ratio booster instead.

Training rows take their anchor leave-one-out (interpolated between their neighbours, not read
back), so the trees learn the error interpolation makes on a size it has not seen.
The table is stored beside the boosters as JSON (``anchor.json``), never pickled; the curves
are keyed on feature columns, so an anchor needs only the feature matrix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analytical.errors import LlmsimError
from predictors.features import ROOFLINE_FEATURE, feature_names

# family -> (axis column, key columns): the configuration a curve belongs to is every feature
# that is not derived from the axis value.
ANCHOR_COLUMNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "collective": ("log2_size_bytes", tuple(
        name for name in feature_names("collective")
        if name in ("group_size", "ranks_per_node", "nodes")
        or name.startswith(("kind_", "dtype_")))),
}
# The one feature the anchored booster sees beyond the family's schema.
ANCHOR_FEATURE = "log2_anchor_over_roofline"
ANCHOR_FILE = "anchor.json"


def _log_log(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """ln latency linear in log2 size: a power law between neighbours."""
    return float(np.interp(x, xs, ys))


def _linear(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Latency linear in bytes between neighbours (alpha-beta), returned as ln latency."""
    return float(np.log(np.interp(2.0 ** x, np.exp2(xs), np.exp(ys))))


# name -> f(axis value, curve axis values, curve ln latencies) -> ln latency; axis is log2 size.
INTERPOLATIONS: dict[str, Callable[[float, np.ndarray, np.ndarray], float]] = {
    "log_log": _log_log,
    "linear": _linear,
}
# What an anchor.json without an "interpolation" field (written before the choice existed) used.
LEGACY_INTERPOLATION = "log_log"


def has_anchor(family: str) -> bool:
    return family in ANCHOR_COLUMNS


@dataclass(frozen=True, slots=True)
class AnchorTable:
    """Per configuration key: sorted axis values and the mean ln(latency) at each, read
    between points by ``interpolation`` (a key of `INTERPOLATIONS`). ``loo_mape``: each
    interpolation's leave-one-out MAPE (%) on the table's points, the evidence for the choice
    (empty for a loaded table)."""

    family: str
    curves: dict[tuple[float, ...], tuple[np.ndarray, np.ndarray]]
    interpolation: str = LEGACY_INTERPOLATION
    loo_mape: dict[str, float] = field(default_factory=dict, compare=False)

    @classmethod
    def build(cls, family: str, features: np.ndarray, latency_s: np.ndarray, *,
              interpolation: str | None = None) -> AnchorTable:
        """The table of these rows; ``interpolation`` None picks the lower leave-one-out MAPE
        (ties go to the first of `INTERPOLATIONS`)."""
        if interpolation is not None and interpolation not in INTERPOLATIONS:
            raise LlmsimError(f"unknown interpolation {interpolation!r}; "
                              f"known: {', '.join(INTERPOLATIONS)}")
        axis, keys = _columns(family, features)
        log_latency = np.log(np.asarray(latency_s, dtype=np.float64))
        grouped: dict[tuple[float, ...], dict[float, list[float]]] = {}
        for key, x, y in zip(map(tuple, keys.tolist()), axis.tolist(), log_latency.tolist(),
                             strict=True):
            grouped.setdefault(key, {}).setdefault(x, []).append(y)
        curves = {}
        for key in sorted(grouped):
            points = grouped[key]
            xs = np.array(sorted(points), dtype=np.float64)
            curves[key] = (xs, np.array([float(np.mean(points[x])) for x in xs.tolist()]))
        loo = {name: _leave_one_out_mape(curves, name) for name in INTERPOLATIONS}
        if interpolation is None:
            interpolation = min(INTERPOLATIONS,
                                key=lambda name: np.inf if math.isnan(loo[name]) else loo[name])
        return cls(family=family, curves=curves, interpolation=interpolation, loo_mape=loo)

    def log_anchor(self, features: np.ndarray, *, leave_one_out: bool = False) -> np.ndarray:
        """ln(anchor seconds) per row; NaN where the row lies on no measured curve.

        ``leave_one_out`` (for the table's own training rows): a row's own point is skipped, so
        it is interpolated between its neighbours and a curve's end points get NaN.
        """
        axis, keys = _columns(self.family, features)
        read = INTERPOLATIONS[self.interpolation]
        out = np.full(len(axis), np.nan)
        for i, (key, x) in enumerate(zip(map(tuple, keys.tolist()), axis.tolist(), strict=True)):
            curve = self.curves.get(key)
            if curve is None:
                continue
            xs, ys = curve
            if leave_one_out:
                keep = xs != x
                xs, ys = xs[keep], ys[keep]
            if len(xs) < 2 or x < xs[0] or x > xs[-1]:
                continue
            out[i] = read(x, xs, ys)
        return out

    def anchor_feature(self, features: np.ndarray, log_anchor: np.ndarray) -> np.ndarray:
        """The feature matrix plus log2(anchor / roofline), the anchored booster's input."""
        roofline = features[:, feature_names(self.family).index(ROOFLINE_FEATURE)]
        return np.column_stack([features, log_anchor / np.log(2.0) - roofline])

    def to_json(self) -> str:
        """Floats by repr (exact round trip), curves in key order: bit-identical on reload."""
        doc = {"family": self.family, "axis": ANCHOR_COLUMNS[self.family][0],
               "key_columns": list(ANCHOR_COLUMNS[self.family][1]),
               "interpolation": self.interpolation,
               "curves": [{"key": list(key), "axis": xs.tolist(), "log_latency": ys.tolist()}
                          for key, (xs, ys) in self.curves.items()]}
        return json.dumps(doc, sort_keys=True) + "\n"

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / ANCHOR_FILE
        path.write_text(self.to_json())
        return path

    @classmethod
    def load(cls, folder: str | Path, family: str) -> AnchorTable:
        path = Path(folder) / ANCHOR_FILE
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise LlmsimError(f"{path}: missing (an anchored model carries its table)") from None
        except json.JSONDecodeError as exc:
            raise LlmsimError(f"{path}: not valid JSON ({exc})") from None
        if family not in ANCHOR_COLUMNS:
            raise LlmsimError(f"{path}: family {family!r} has no anchor axis")
        axis, key_columns = ANCHOR_COLUMNS[family]
        if doc.get("family") != family or doc.get("axis") != axis \
                or doc.get("key_columns") != list(key_columns):
            raise LlmsimError(f"{path}: axis/key_columns differ from this llmsim's {family} "
                              f"anchor ({axis} over {len(key_columns)} key columns); retrain")
        interpolation = doc.get("interpolation", LEGACY_INTERPOLATION)
        if interpolation not in INTERPOLATIONS:
            raise LlmsimError(f"{path}: interpolation {interpolation!r} is not one of this "
                              f"llmsim's ({', '.join(INTERPOLATIONS)}); retrain")
        curves = {}
        for i, curve in enumerate(doc.get("curves", [])):
            try:
                xs = np.array(curve["axis"], dtype=np.float64)
                ys = np.array(curve["log_latency"], dtype=np.float64)
                key = tuple(float(v) for v in curve["key"])
            except (KeyError, TypeError, ValueError) as exc:
                raise LlmsimError(f"{path}: curves[{i}]: {exc}") from None
            if len(xs) != len(ys) or len(key) != len(key_columns) or np.any(np.diff(xs) <= 0):
                raise LlmsimError(f"{path}: curves[{i}]: axis must increase and match "
                                  "log_latency in length; key must match key_columns")
            curves[key] = (xs, ys)
        return cls(family=family, curves=curves, interpolation=interpolation)


def _leave_one_out_mape(curves: dict[tuple[float, ...], tuple[np.ndarray, np.ndarray]],
                        interpolation: str) -> float:
    """MAPE (%) of reading each interior point of every curve from its two neighbours; NaN
    when no curve has three points."""
    read = INTERPOLATIONS[interpolation]
    errors = [abs(math.exp(read(xs[i], xs[[i - 1, i + 1]], ys[[i - 1, i + 1]]) - ys[i]) - 1.0)
              for xs, ys in curves.values() for i in range(1, len(xs) - 1)]
    return 100.0 * float(np.mean(errors)) if errors else float("nan")


def _columns(family: str, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if family not in ANCHOR_COLUMNS:
        raise LlmsimError(f"family {family!r} has no anchor axis")
    axis, keys = ANCHOR_COLUMNS[family]
    names = feature_names(family)
    return features[:, names.index(axis)], features[:, [names.index(k) for k in keys]]
