# SPDX-License-Identifier: Apache-2.0
"""The llmsim version: the installed distribution's, else pyproject.toml's (a plain clone)."""

from __future__ import annotations

import importlib.metadata
import tomllib

from analytical.paths import REPO_ROOT


def llmsim_version() -> str:
    pyproject = REPO_ROOT / "pyproject.toml"
    if pyproject.is_file():  # a checkout: its own version, even beside an older install
        with pyproject.open("rb") as handle:
            return str(tomllib.load(handle).get("project", {}).get("version", "unknown"))
    try:
        return importlib.metadata.version("llmsim")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
