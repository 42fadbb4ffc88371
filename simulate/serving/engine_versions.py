# SPDX-License-Identifier: Apache-2.0
"""Which release of a serving engine a scenario names, and the defaults that release had.

An engine's file (``datasets/engines/<engine>.yaml``) holds the newest code's defaults; its
``versions`` entry says from which release they hold (``newest.from``) and lists older release
ranges (``older``), each with only the settings that differ, read at the release tags. Users plan
with the release they run (vLLM 0.6 ran the V0 engine: prefill-first steps, 256 sequences), so
``serving.engine_version`` picks the range; an empty or unversioned string ("NIM 1.8.0": NIM
publishes no engine release per NIM version) takes the newest. A release below the oldest range,
or in a gap no tag was read for, is refused (one line naming the ranges; a ``refused`` entry of the
file adds why, e.g. defaults that llmsim's settings cannot express): silently using other defaults
is what this module exists to stop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from analytical.errors import SpecError

Release = tuple[int, int, int]
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.\-+]?(?:post|rc|dev|a|b)\d*)*")


def parse_release(text: str) -> Release | None:
    """'0.6.3.post1' -> (0, 6, 3); 'v0.11.0rc1' -> (0, 11, 0) (a pre-release runs its release's
    code); '' or a string that is no engine release ('NIM 1.8.0') -> None (unversioned)."""
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseRange:
    """Releases ``first`` <= r < ``below`` (no ``below``: all later) and what differs in them."""

    label: str
    first: Release
    below: Release | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    # {above_tokens: N, settings: {...}}: when the model's max_model_len exceeds N (vLLM V0
    # turned chunked prefill on for long-context models)
    long_context: Mapping[str, Any] = field(default_factory=dict)

    def covers(self, release: Release) -> bool:
        return self.first <= release and (self.below is None or release < self.below)


@dataclass(frozen=True, slots=True, kw_only=True)
class RefusedRange:
    """Releases ``first`` <= r < ``below`` that are refused, and the one-line ``reason``."""

    first: Release
    below: Release
    reason: str

    def covers(self, release: Release) -> bool:
        return self.first <= release < self.below


def _release(text: Any, where: str) -> Release:
    release = parse_release(str(text))
    if release is None:
        raise SpecError(where, f"{text!r} is not a release number")
    return release


def release_ranges(data: Mapping[str, Any], engine: str) -> tuple[ReleaseRange, ...]:
    """The engine file's ranges, newest first (a file without ``versions``: one open range)."""
    versions = data.get("versions") or {}
    newest = versions.get("newest") or {}
    ranges = [ReleaseRange(label=str(newest.get("label", data.get("version", ""))),
                           first=_release(newest.get("from", "0"), f"{engine}.versions.newest"))]
    for i, entry in enumerate(versions.get("older") or ()):
        where = f"{engine}.versions.older[{i}]"
        ranges.append(ReleaseRange(
            label=str(entry["label"]), first=_release(entry["from"], where),
            below=_release(entry["below"], where), settings=dict(entry.get("settings") or {}),
            long_context=dict(entry.get("long_context") or {})))
    return tuple(ranges)


def refused_ranges(data: Mapping[str, Any], engine: str) -> tuple[RefusedRange, ...]:
    """The file's ``versions.refused`` entries: releases refused with a stated reason."""
    versions = data.get("versions") or {}
    out = []
    supported = release_ranges(data, engine)
    for i, entry in enumerate(versions.get("refused") or ()):
        where = f"{engine}.versions.refused[{i}]"
        refused = RefusedRange(first=_release(entry.get("from"), where),
                               below=_release(entry.get("below"), where),
                               reason=" ".join(str(entry.get("reason") or "").split()))
        # A refusal must say why, span some release, and not contradict a read range.
        if not refused.reason:
            raise SpecError(f"{where}.reason", "a refused range states its reason")
        if not refused.first < refused.below:
            raise SpecError(f"{where}.below", "must be above `from`")
        overlap = next((r.label for r in supported if r.covers(refused.first)
                        or refused.covers(r.first)), None)
        if overlap is not None:
            raise SpecError(where, f"overlaps the supported range {overlap!r}")
        out.append(refused)
    return tuple(out)


def release_range(data: Mapping[str, Any], engine: str, version: str) -> ReleaseRange:
    """The range of ``version`` ("" or unversioned: the newest); a release no range covers is
    refused naming the supported ranges (and the file's reason, where it gives one)."""
    ranges = release_ranges(data, engine)
    release = parse_release(version)
    if release is None:
        return ranges[0]
    for candidate in ranges:
        if candidate.covers(release):
            return candidate
    known = "; ".join(r.label for r in ranges)
    why = next((r.reason for r in refused_ranges(data, engine) if r.covers(release)),
               "not a release whose defaults were read")
    raise SpecError("serving.engine_version",
                    f"{engine} {version!r} is refused: {why}; "
                    f"supported: {known} (leave it empty for the newest)")


def versioned_data(data: Mapping[str, Any], engine: str, version: str,
                   max_model_len: int = 0) -> tuple[str, dict[str, Any]]:
    """The range's label and the engine file with that range's settings in place (whole
    entries replaced), plus its long-context settings when ``max_model_len`` exceeds them."""
    chosen = release_range(data, engine, version)
    merged = {**data, **chosen.settings}
    long_ctx = chosen.long_context
    if long_ctx and max_model_len > int(long_ctx["above_tokens"]):
        merged.update(long_ctx.get("settings") or {})
    return chosen.label, merged
