"""The registry of harness adapters, and the two ways to get one: :func:`build_harness`
(the adapter the settings name) and :func:`check_harness` (the fail-closed start-up check
of its installed version).

The adapters (:mod:`.claude_code`, :mod:`.codex`, :mod:`.command`) import :mod:`.base`
and never this module, which imports them: the registry is filled at import, with no
import inside a function.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from integrations.harness.base import Harness, HarnessError, HarnessVersionError
from integrations.harness.claude_code import ClaudeCode
from integrations.harness.codex import Codex
from integrations.harness.command import Command

if TYPE_CHECKING:
    from foundation.settings import HarnessSettings
    from graph.model import Graph

__all__ = ["ADAPTERS", "build_harness", "check_harness", "matches_pin", "version_of"]

#: Adapter name (``harness.adapter``) -> class; ``none`` is not an adapter.
ADAPTERS: dict[str, type] = {"claude-code": ClaudeCode, "codex": Codex, "command": Command}


def build_harness(settings: HarnessSettings, mode: str = "process") -> Harness | None:
    """The adapter ``settings.adapter`` names, or ``None`` for ``none``; ``mode`` is
    ``runner.mode`` (``process``, or ``tmux``: each turn in a named tmux session).

    Raises:
        HarnessError: an unknown adapter name or mode.
    """
    if mode not in ("process", "tmux"):
        raise HarnessError(f"unknown runner mode {mode!r}: set runner.mode to process or tmux")
    if settings.adapter == "none":
        return None
    cls = ADAPTERS.get(settings.adapter)
    if cls is None:
        raise HarnessError(
            f"unknown harness adapter {settings.adapter!r}: set harness.adapter (or "
            f"THE_LOOP_HARNESS) to one of {', '.join(sorted(ADAPTERS))} or none")
    harness: Harness = cls(settings, mode)
    return harness


def check_harness(settings: HarnessSettings, graph: Graph) -> str | None:
    """The fail-closed start-up check of the harness a graph needs.

    A graph with agent nodes (``node.actor == "agent"``) and an adapter other than
    ``none`` must have its harness installed and at the pinned ``harness.version``.

    Returns:
        The first line ``--version`` printed, or ``None`` when nothing was checked
        (adapter ``none``, or a graph without agent nodes).

    Raises:
        HarnessMissing: the executable is not installed.
        HarnessVersionError: ``harness.version`` is unset (the message gives the line
            to add), or it is not the installed version as printed (:func:`matches_pin`;
            the message names both).
    """
    if settings.adapter == "none":
        return None
    if not any(node.actor == "agent" for node in graph.nodes.values()):
        return None
    harness = build_harness(settings)
    assert harness is not None
    printed = harness.probe()
    first = (printed.strip().splitlines() or [""])[0].strip()[:200]
    if not settings.version:
        raise HarnessVersionError(
            f"harness.version is not pinned: set harness.version: {json.dumps(first)} in "
            f"{settings.source} (what `{_probe_name(settings)} --version` printed), so an "
            "upgrade of the harness is a deliberate change")
    if not matches_pin(settings.version, printed):
        raise HarnessVersionError(
            f"harness {_probe_name(settings)} is version {first!r}, but harness.version "
            f"in {settings.source} pins {settings.version!r}: install the pinned version or "
            f"set harness.version: {json.dumps(first)}")
    return first


def version_of(printed: str) -> str:
    """The version as ``--version`` printed it: the first word with a digit on its
    first line (``codex-cli 0.171.0`` -> ``0.171.0``, ``2.1.332 (Claude Code)`` ->
    ``2.1.332``), else that whole line; what ``harness.version`` pins."""
    first = (printed.strip().splitlines() or [""])[0].strip()
    return next((w for w in first.split() if any(c.isdigit() for c in w)), first)[:200]


def matches_pin(pin: str, printed: str) -> bool:
    """Whether ``harness.version`` ``pin`` is what ``--version`` printed: its whole
    first line, or one of that line's words that holds a digit (so ``codex-cli`` or
    ``2.1.33`` pin nothing of ``codex-cli 2.1.332``)."""
    first = (printed.strip().splitlines() or [""])[0].strip()
    words = [w for w in first.split() if any(c.isdigit() for c in w)]
    return pin.strip() == first or pin.strip() in words


def _probe_name(settings: HarnessSettings) -> str:
    if settings.adapter == "command":
        return settings.argv[0] if settings.argv else "command"
    return settings.binary or settings.adapter
