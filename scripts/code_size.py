# SPDX-License-Identifier: Apache-2.0
"""Longest functions and largest modules of the llmsim packages, so the style limits
(STYLE.md: functions under ~60 lines, modules under ~400) are measured, not guessed.

Usage: python scripts/code_size.py [--top 10] [--max-function 60 --max-module 400 --check]

A function's length is ``end_lineno - lineno + 1`` from ``ast`` (decorators excluded, nested
functions counted in their parent and on their own); a module's length is its line count.
Without ``--check`` the script only reports and exits 0; with it, it exits 1 when a limit is
exceeded by a file not in ``ALLOWED_MODULES``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("analytical", "profiler", "predictors", "simulate")

# Data modules: tables of constants, exempt from the module-size limit (path relative to ROOT).
# None inside the packages today; tests/fuzz/fuzz_corpus.py is data but lies outside them.
ALLOWED_MODULES: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True, kw_only=True)
class Function:
    path: str
    line: int
    name: str
    lines: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Module:
    path: str
    lines: int


def _functions(tree: ast.AST, path: str) -> list[Function]:
    """Every def/async def in the tree, qualified by its enclosing classes and functions."""
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                end = child.end_lineno or child.lineno
                found.append(Function(path=path, line=child.lineno, name=name,
                                      lines=end - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def measure(root: Path = ROOT) -> tuple[list[Function], list[Module]]:
    """All functions and modules of the packages under ``root``."""
    functions: list[Function] = []
    modules: list[Module] = []
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            rel = file.relative_to(root).as_posix()
            text = file.read_text(encoding="utf-8")
            modules.append(Module(path=rel, lines=len(text.splitlines())))
            functions.extend(_functions(ast.parse(text, filename=rel), rel))
    return functions, modules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="rows per table (default 10)")
    parser.add_argument("--max-function", type=int, default=60)
    parser.add_argument("--max-module", type=int, default=400)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a function or a module not allow-listed is over its limit")
    args = parser.parse_args(argv)

    functions, modules = measure()
    functions.sort(key=lambda f: (-f.lines, f.path, f.line))
    modules.sort(key=lambda m: (-m.lines, m.path))
    print(f"longest functions ({len(functions)} in {len(modules)} modules):")
    for f in functions[:args.top]:
        print(f"  {f.lines:5d}  {f.path}:{f.line}  {f.name}")
    print("largest modules:")
    for m in modules[:args.top]:
        note = "  (allow-listed: data)" if m.path in ALLOWED_MODULES else ""
        print(f"  {m.lines:5d}  {m.path}{note}")

    long_functions = [f for f in functions if f.lines > args.max_function]
    big_modules = [m for m in modules
                   if m.lines > args.max_module and m.path not in ALLOWED_MODULES]
    print(f"over limits: {len(long_functions)} functions > {args.max_function} lines, "
          f"{len(big_modules)} modules > {args.max_module} lines")
    if args.check and (long_functions or big_modules):
        for f in long_functions:
            print(f"  function {f.path}:{f.line} {f.name}: {f.lines} lines", file=sys.stderr)
        for m in big_modules:
            print(f"  module {m.path}: {m.lines} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
