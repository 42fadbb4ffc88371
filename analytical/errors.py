# SPDX-License-Identifier: Apache-2.0
"""The one family of domain errors llmsim raises for bad input.

The CLI catches `LlmsimError` once, prints its one-line message and exits 2; anything else is an
internal error (exit 1). Each error names where the problem is (a file, a field path) so that a
user can fix the input without reading a traceback.
"""

from __future__ import annotations


class LlmsimError(Exception):
    """Base class: a problem with the user's input or environment, not a bug in llmsim."""


class SpecError(LlmsimError, ValueError):
    """A field of a spec, scenario, sweep, hardware or model file is missing or invalid.

    Args:
        field: dotted path of the offending field, e.g. ``training.parallel.tp``.
        reason: what is wrong and, where possible, what would be accepted.
        source: the file the value came from, if any.
    """

    def __init__(self, field: str, reason: str, *, source: str | None = None) -> None:
        self.field = field
        self.reason = reason
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}: {reason}")


class UnknownNameError(LlmsimError, KeyError):
    """A lookup by name (GPU, model, operator family, engine) missed; lists the known names."""

    def __init__(self, what: str, name: str, known: list[str] | tuple[str, ...]) -> None:
        self.what = what
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(f"unknown {what} {name!r}; known: {', '.join(self.known) or '(none)'}")

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class InfeasibleError(LlmsimError):
    """A configuration cannot run (does not fit in memory, impossible layout); carries numbers."""

    def __init__(self, message: str, *, details: dict[str, float] | None = None) -> None:
        self.details = dict(details or {})
        super().__init__(message)
