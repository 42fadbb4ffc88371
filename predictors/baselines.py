# SPDX-License-Identifier: Apache-2.0
"""The two baselines every model is scored against, on the same splits.

- `InterpolationBaseline`: what per-op lookup tables do. Distance-weighted k-nearest-neighbour
  interpolation of log-latency in log2-shape space, only among rows with the same categorical
  fields (dtype, phase, kind, causal, backward).
- `TableBaseline` (families measured as 1-D curves, `predictors.anchor`): what a per-op table
  keyed on the exact configuration does (nccl-tests tables for collectives): linear
  interpolation of log-latency over log2(size) between the two measured neighbours; rows on
  no measured curve (unseen configuration, size beyond the range) take the k-NN value.
- `RandomForestBaseline`: what Vidur does (a scikit-learn random forest per operator). It gets
  the same feature matrix as XGBoost and predicts log-latency.
Both are fitted in memory only; nothing here is saved (and never pickled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from analytical.ops import OpSpec, op_to_dict
from predictors.anchor import AnchorTable
from predictors.domain import categorical_fields

if TYPE_CHECKING:  # scikit-learn is imported where used (it is slow to import)
    from sklearn.neighbors import NearestNeighbors

GroupKey = tuple[tuple[str, object], ...]  # the categorical fields of a spec, in order


def _split_fields(op: OpSpec) -> tuple[GroupKey, list[float]]:
    """(categorical key, log2 numeric coordinates) of a spec."""
    cats = categorical_fields(op)
    coords = [math.log2(value) for name, value in op_to_dict(op).items() if name not in cats]
    return tuple(cats.items()), coords


class InterpolationBaseline:
    """k-NN (inverse-distance weighted) in log2-shape space, per categorical group."""

    name = "interp"

    def __init__(self, k: int = 4) -> None:
        self.k = k
        self._groups: dict[GroupKey, tuple[NearestNeighbors, np.ndarray]] = {}
        self._fallback: tuple[NearestNeighbors, np.ndarray] | None = None

    def fit(self, ops: Sequence[OpSpec], latency_s: np.ndarray) -> InterpolationBaseline:
        from sklearn.neighbors import NearestNeighbors

        grouped: dict[GroupKey, tuple[list[list[float]], list[float]]] = {}
        log_latency = np.log(np.asarray(latency_s, dtype=np.float64))
        for op, y in zip(ops, log_latency, strict=True):
            key, coords = _split_fields(op)
            grouped.setdefault(key, ([], []))
            grouped[key][0].append(coords)
            grouped[key][1].append(y)

        def index(coords: list[list[float]], values: list[float]
                  ) -> tuple[NearestNeighbors, np.ndarray]:
            points = np.array(coords)
            k = min(self.k, len(points))
            return NearestNeighbors(n_neighbors=k).fit(points), np.array(values)

        self._groups = {key: index(c, y) for key, (c, y) in grouped.items()}
        biggest = max(grouped, key=lambda key: len(grouped[key][1]))
        self._fallback = self._groups[biggest]
        return self

    def predict(self, ops: Sequence[OpSpec]) -> np.ndarray:
        out = np.empty(len(ops))
        by_key: dict[GroupKey, tuple[list[int], list[list[float]]]] = {}
        for i, op in enumerate(ops):
            key, coords = _split_fields(op)
            by_key.setdefault(key, ([], []))
            by_key[key][0].append(i)
            by_key[key][1].append(coords)
        for key, (rows, points) in by_key.items():
            group = self._groups.get(key, self._fallback)
            assert group is not None, "predict before fit"
            tree, values = group
            dist, nearest = tree.kneighbors(np.array(points))
            exact = dist[:, 0] == 0.0
            weights = 1.0 / np.where(dist == 0.0, 1.0, dist)
            blended = (weights * values[nearest]).sum(axis=1) / weights.sum(axis=1)
            out[rows] = np.where(exact, values[nearest[:, 0]], blended)
        seconds: np.ndarray = np.exp(out)
        return seconds


class TableBaseline:
    """Each measured curve read between its points as `AnchorTable` reads it (linear in bytes or
    log-log, whichever has the lower leave-one-out error); k-NN values where there is no curve."""

    name = "table"

    def __init__(self, family: str) -> None:
        self.family = family
        self._table: AnchorTable | None = None

    def fit(self, features: np.ndarray, latency_s: np.ndarray) -> TableBaseline:
        self._table = AnchorTable.build(self.family, features, latency_s)
        return self

    def predict(self, features: np.ndarray, fallback_s: np.ndarray) -> np.ndarray:
        assert self._table is not None, "predict before fit"
        log_anchor = self._table.log_anchor(features)
        return np.where(np.isnan(log_anchor), fallback_s, np.exp(log_anchor))


class RandomForestBaseline:
    """scikit-learn RandomForestRegressor on the XGBoost features, log-latency target."""

    name = "rf"

    def __init__(self, *, seed: int, nthread: int, n_estimators: int = 100) -> None:
        from sklearn.ensemble import RandomForestRegressor

        self._model = RandomForestRegressor(n_estimators=n_estimators, random_state=seed,
                                            n_jobs=nthread, max_features=0.5,
                                            min_samples_leaf=1)

    def fit(self, features: np.ndarray, latency_s: np.ndarray) -> RandomForestBaseline:
        self._model.fit(features, np.log(latency_s))
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        # one thread: the parallel tree average adds in a racy order (last-bit differences)
        self._model.set_params(n_jobs=1)
        seconds: np.ndarray = np.exp(self._model.predict(features))
        return seconds
