"""The hidden marker by which the-loop recognises its own comments.

Every comment the-loop writes ends with ``<!-- the-loop effect=<id> -->``. The effect id
is derived from the work item, the node visit and the hook, so posting is idempotent
(look for the marker before posting again) and the-loop's own comments never drive a gate.
"""

from __future__ import annotations

import re

MARKER_RE = re.compile(r"<!-- the-loop effect=([A-Za-z0-9:/#._@-]+) -->")


def effect_id(ref: str, node: str, visit: int, hook: str) -> str:
    """Stable id of one side effect: ``<ref>/<node>/<visit>/<hook>``."""
    return f"{ref}/{node}/{visit}/{hook}"


def marker(effect: str) -> str:
    """The hidden HTML comment carrying ``effect``."""
    return f"<!-- the-loop effect={effect} -->"


def find_effect(body: str | None) -> str | None:
    """The effect id in ``body``'s marker, or ``None`` if it carries none."""
    if not body:
        return None
    match = MARKER_RE.search(body)
    return match.group(1) if match else None


def is_own(body: str | None) -> bool:
    """Whether ``body`` carries the-loop's marker."""
    return find_effect(body) is not None
