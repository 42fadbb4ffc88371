# SPDX-License-Identifier: Apache-2.0
"""What software each training-corpus ``framework_version`` ran, where a row's behaviour
depends on it and the row itself does not say (read by `simulate.validate.published`)."""

from __future__ import annotations

# The Transformer Engine each ``framework_version`` ran, whose TP-overlap defaults the run had
# (`simulate.tp_overlap.rs_gemm_margin`); unlisted: `TrainingSpec`'s (TE 2.x).
TE_VERSIONS: dict[str, str] = {
    # README model table committed f2e5db40 (2024-07-15), before TE 2.0 (tag v2.0, 2025-02-12)
    "Megatron-Core r0.8.0": "1",
    # NeMo's Dockerfile.ci at 4c73f776 ("24.07 perf", 2024-08-14): TE_TAG 7d576ed2 = 1.8.0.dev0
    "NeMo 24.07": "1.8",
    # Megatron-Bridge pyproject.toml at 00b7660b: transformer-engine>=2.9.0a0,<2.10.0
    "Megatron-Bridge, NeMo 25.11": "2.9",
}
