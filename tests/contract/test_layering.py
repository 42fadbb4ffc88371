# SPDX-License-Identifier: Apache-2.0
"""Imports only go down: analytical <- profiler <- predictors <- simulate (DESIGN.md)."""

from __future__ import annotations

import ast
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


def test_datasets_is_not_a_package() -> None:
    assert not (ROOT / "datasets" / "__init__.py").exists()
