# SPDX-License-Identifier: Apache-2.0
"""What a worker process keeps between the tasks of one search run: engine chains and
evaluators, whose caches make a layer shape cost one estimate per worker.

Entries are keyed on what built them (GPU, `simulate.engines.EngineOptions`, model) and scoped to
one run: a task of another run (a new `new_run_id`) empties the cache first, so two unrelated
searches in one process never share answers (a store written in between is read again).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

__all__ = ["RunScopedCache", "new_run_id"]

T = TypeVar("T")


def new_run_id() -> str:
    """A fresh id for one search run, carried by each of its tasks."""
    return uuid.uuid4().hex


class RunScopedCache:
    """Values built once per key for the tasks of the current run."""

    def __init__(self) -> None:
        self._run: str | None = None
        self._items: dict[Hashable, Any] = {}

    def get(self, run: str, key: Hashable, make: Callable[[], T]) -> T:
        if run != self._run:
            self._items.clear()
            self._run = run
        if key not in self._items:
            self._items[key] = make()
        return self._items[key]  # type: ignore[no-any-return]
