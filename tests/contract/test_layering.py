# SPDX-License-Identifier: Apache-2.0
"""Imports only go down: analytical <- profiler <- predictors <- simulate (DESIGN.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {
    "analytical": set(),
    "profiler": {"analytical"},
    "predictors": {"analytical", "profiler"},
    "simulate": {"analytical", "profiler", "predictors"},
}


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(ALLOWED)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_upward_imports(package: str) -> None:
    violations = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imported_packages(path) - ALLOWED[package] - {package}
        if bad:
            violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not violations, "upward imports:\n" + "\n".join(violations)


def test_analytical_never_imports_torch() -> None:
    """The vocabulary layer is pure: no module of analytical/ imports torch, at the top or
    inside a function (measuring hardware is `profiler.calibrate`'s job)."""
    found = []
    for path in sorted((ROOT / "analytical").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "torch" for n in names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"torch imported in analytical/: {found}"


def test_analytical_imports_with_torch_blocked() -> None:
    """Every analytical module imports in a process where ``import torch`` fails."""
    modules = [f"analytical.{p.stem}" for p in sorted((ROOT / "analytical").glob("*.py"))
               if p.stem != "__init__"]
    code = ("import sys; sys.modules['torch'] = None\n"
            f"import importlib\nfor m in {modules!r}: importlib.import_module(m)\n"
            "assert 'torch' not in [k for k, v in sys.modules.items() if v is not None]")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_datasets_is_not_a_package() -> None:
    assert not (ROOT / "datasets" / "__init__.py").exists()
