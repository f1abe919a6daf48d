"""The line-command reader, kept importable here: it lives in :mod:`foundation.commands`
(neutral ground, read by the hooks and the worker alike)."""

from foundation.commands import (
    COMMANDS,
    MAX_BODY_CHARS,
    MAX_QUOTE_DEPTH,
    carries_command,
    commands,
    rendered,
)

__all__ = ["COMMANDS", "MAX_BODY_CHARS", "MAX_QUOTE_DEPTH", "carries_command", "commands",
           "rendered"]
