# SPDX-License-Identifier: Apache-2.0
"""What the store holds: one `Measurement` per (operator, fingerprint, backend, provenance).

`point_key` is the row identity: a resumed sweep skips keys already stored and importing or
merging twice stores nothing twice. The DuckDB side lives in `profiler.store`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from analytical.errors import LlmsimError, SpecError
from analytical.ops import OpSpec
from profiler.fingerprint import Fingerprint
from profiler.timing import Timing


class Status(StrEnum):
    OK = "ok"
    OOM = "oom"
    ERROR = "error"
    TIMEOUT = "timeout"
    UNSUPPORTED = "unsupported"


class StoreError(LlmsimError):
    """The store file cannot be used: locked, corrupt, or of another schema version."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One measured (or imported) operator point."""

    op: OpSpec
    fingerprint: Fingerprint
    backend: str  # "torch.matmul", "sdpa.flash", "gloo", "nccl", "trtllm/torch_flow", ...
    status: Status
    timing: Timing | None  # None unless status == OK
    error: str = ""
    run_id: str = ""
    provenance: str = "profiled"  # or "imported:<source>"

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            raise SpecError("Measurement.status", f"expected a Status, got {self.status!r}")
        if self.status == Status.OK and self.timing is None:
            raise SpecError("Measurement.timing", "status ok needs a timing")
        if self.status != Status.OK and self.timing is not None:
            raise SpecError("Measurement.timing", f"status {self.status} must have no timing")
        if not self.backend:
            raise SpecError("Measurement.backend", "must be non-empty")
        if self.provenance != "profiled" and not self.provenance.startswith("imported:"):
            raise SpecError("Measurement.provenance",
                            f"expected 'profiled' or 'imported:<source>', got {self.provenance!r}")


def point_key(op: OpSpec, fingerprint: Fingerprint, backend: str,
              provenance: str = "profiled") -> str:
    """32 hex digits of sha256 over (op key, fingerprint id, backend, provenance)."""
    text = "\x1f".join((op.key, fingerprint.id, backend, provenance))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def shard_path(db_path: str | Path, worker: str) -> Path:
    """Where worker ``worker`` writes its shard of ``db_path``: ``<db>.shards/<worker>.duckdb``."""
    db_path = Path(db_path)
    return db_path.with_name(db_path.name + ".shards") / f"{worker}.duckdb"
