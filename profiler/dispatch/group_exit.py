# SPDX-License-Identifier: Apache-2.0
"""Leaving a torch.distributed process group without killing a peer.

Why: a gloo collective (a barrier included) can return on one rank before its peer has read the
last message. If that rank then destroys the group and closes its sockets, the peer aborts with
SIGABRT on the closed connection. This was seen in CI under load. The rendezvous TCPStore is
not gloo: a rank increments a counter there only after its own last collective has returned, so
when the counter reaches the world size no gloo traffic is in flight and closing is safe.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["leave_process_group"]

_EXIT_KEY = "llmsim/group-exit"


def leave_process_group(dist: Any, *, clean: bool, timeout_s: float = 120.0) -> None:
    """Destroy the default group; when `clean`, first wait for every rank in the store.

    `clean` is False when this rank is leaving on an exception: its peers may be gone, so it
    must not wait for them.
    """
    if not dist.is_initialized():
        return
    if clean:
        from torch.distributed.distributed_c10d import _get_default_store  # noqa: PLC0415

        store = _get_default_store()
        world = dist.get_world_size()
        store.add(_EXIT_KEY, 1)
        deadline = time.monotonic() + timeout_s
        while store.add(_EXIT_KEY, 0) < world and time.monotonic() < deadline:
            time.sleep(0.005)
    dist.destroy_process_group()
