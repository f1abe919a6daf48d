"""Keys a breaking change removed from ``cli-config.yaml``: where they lived and where
they went. The loader refuses a file that still has one (:class:`LegacyConfigError`);
``the-loop upgrade`` (:mod:`the_loop.upgrade`) moves them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from foundation.config.loader import MISSING, Path_, dotted, get_path, line_of, to_plain, walk_keys

#: Where ``ghBinary`` lived in version 1, in the order ``the-loop upgrade`` reads them
#: (the first value wins; any other ``ghBinary`` follows, under ``poller`` first, then in
#: document order).
LEGACY_GH_BINARY_PATHS: tuple[tuple[str, ...], ...] = (
    ("webhooks", "ghWebhook", "routing", "control", "ghBinary"),
    ("webhooks", "ghWebhook", "routing", "reactions", "ghBinary"),
    ("webhooks", "ghWebhook", "routing", "announce", "ghBinary"),
)
GH_BINARY_TARGET: tuple[str, ...] = ("integrations", "github", "cli", "binary")
LEGACY_KEY = "ghBinary"


@dataclass(frozen=True)
class LegacyKey:
    """A key a breaking change removed: where it is, its value, its replacement."""

    path: Path_
    value: Any
    line: int | None
    replacement: tuple[str, ...] = GH_BINARY_TARGET

    @property
    def key(self) -> str:
        return dotted(self.path)


def find_legacy_keys(doc: Any) -> list[LegacyKey]:
    """Every ``ghBinary`` in a cli-config document, in the stated order: ``routing.control``,
    ``routing.reactions``, ``routing.announce``, then any under ``poller``, then any other,
    each group in document order."""
    found: list[Path_] = []
    if not isinstance(doc, Mapping):
        return []
    for path in LEGACY_GH_BINARY_PATHS:
        if get_path(doc, path) is not MISSING:
            found.append(path)
    rest = [p for p in walk_keys(doc, ()) if p[-1] == LEGACY_KEY and p not in found]
    found += [p for p in rest if p[0] == "poller"]
    found += [p for p in rest if p[0] != "poller"]
    return [LegacyKey(p, to_plain(get_path(doc, p)), line_of(doc, p)) for p in found]

