# SPDX-License-Identifier: Apache-2.0
"""Fixtures shared across the test packages."""

from __future__ import annotations

import pytest

from analytical.hardware import get_hardware


@pytest.fixture
def isolated_hardware_home(tmp_path, monkeypatch):
    """An empty ``$LLMSIM_HOME`` and no extra hardware path, with the hardware cache cleared
    before and after: calibrated files of the user's home or of another test never leak in."""
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMSIM_HARDWARE_PATH", raising=False)
    get_hardware.cache_clear()
    yield
    get_hardware.cache_clear()
