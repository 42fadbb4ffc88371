# SPDX-License-Identifier: Apache-2.0
"""Write the curated subset of imported sets to ``datasets/measurements/<source>/``.

The curated files are what a fresh clone loads (``llmsim db import-parquet
datasets/measurements``) without the published originals. To stay small they keep one kernel
family per operator: AIConfigurator's TensorRT-LLM ``torch_flow`` GEMMs and attention (every
GPU, every dtype it measured) and all NCCL collectives; Vidur's rows are kept whole. Each
source folder gets the source's LICENSE copied beside the data.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from profiler.importers import aiconfigurator, sources, vidur
from profiler.store import Store
from profiler.store_parquet import export_parquet

_AIC = f"imported:{aiconfigurator.SOURCE}"
# source -> [(families, SQL condition on the family table t)]
CURATED: dict[str, list[tuple[tuple[str, ...], str]]] = {
    "aiconfigurator": [
        (("gemm", "attention"),
         f"t.provenance LIKE '{_AIC}/trtllm-%' AND t.backend = 'trtllm/torch_flow'"),
        (("collective",), f"t.provenance LIKE '{_AIC}/nccl-%'"),
    ],
    "vidur": [(("gemm", "memory", "collective"), f"t.provenance = '{vidur.PROVENANCE}'")],
}
_LICENSES = {"aiconfigurator": Path("aiconfigurator") / "LICENSE",
             "vidur": Path("vidur") / "LICENSE"}


def write_curated(store: Store, out_dir: str | Path, *, data_dir: str | Path,
                  source: str = "all") -> list[Path]:
    """Export the curated rows of ``source`` from ``store``; returns the files written.

    Old Parquet files of the source are replaced; the LICENSE is copied from ``data_dir``
    when it is there.
    """
    out_dir = Path(out_dir)
    data_dir = Path(data_dir)
    written: list[Path] = []
    for name in sources(source):
        target = out_dir / name
        for old in target.rglob("*.parquet") if target.is_dir() else ():
            old.unlink()
        for families, where in CURATED[name]:
            written += export_parquet(store, target, where=where, families=families)
        license_file = data_dir / _LICENSES[name]
        if license_file.is_file():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(license_file, target / "LICENSE")
            written.append(target / "LICENSE")
    return written
