# SPDX-License-Identifier: Apache-2.0
"""Paged KV cache bookkeeping (vLLM's block manager, counting blocks only)."""

from __future__ import annotations

from analytical.errors import InfeasibleError


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class BlockPool:
    """A fixed number of KV blocks of `block_size` tokens; tracks peak and time-weighted use."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks <= 0:
            raise InfeasibleError(f"no KV-cache blocks left after weights ({num_blocks})",
                                  details={"kv_blocks": float(num_blocks)})
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.used = 0
        self.peak = 0

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    def can_allocate(self, blocks: int) -> bool:
        return blocks <= self.free

    def allocate(self, blocks: int) -> None:
        if blocks > self.free:
            raise RuntimeError(f"KV pool overdrawn: {blocks} > {self.free} free")
        self.used += blocks
        self.peak = max(self.peak, self.used)

    def release(self, blocks: int) -> None:
        self.used -= blocks
        if self.used < 0:
            raise RuntimeError("KV pool released more blocks than allocated")

    @property
    def utilisation(self) -> float:
        return self.used / self.num_blocks
