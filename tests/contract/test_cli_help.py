# SPDX-License-Identifier: Apache-2.0
"""Every command and sub-command answers --help, through the installed entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from simulate.cli.main import COMMANDS, cli

LLMSIM = [sys.executable, "-m", "simulate.cli.main"]


def _all_paths() -> list[list[str]]:
    paths: list[list[str]] = [[]]
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        paths.append([name])
        if isinstance(command, click.Group):
            paths.extend([name, sub] for sub in command.list_commands(ctx))
    return paths


@pytest.mark.parametrize("path", _all_paths(), ids=lambda p: " ".join(p) or "llmsim")
def test_help(path: list[str]) -> None:
    result = subprocess.run([*LLMSIM, *path, "--help"], capture_output=True, text=True,
                            timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout


def test_unknown_command_exits_2() -> None:
    result = subprocess.run([*LLMSIM, "no-such-command"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "no-such-command" in result.stderr
