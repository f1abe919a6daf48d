"""The one error every settings problem raises."""

from __future__ import annotations

from graph.errors import LoopError


class SettingsError(LoopError, ValueError):
    """A setting is missing or invalid, found at start-up.

    The message names the environment variable (or the ``cli-config.yaml`` file, line
    and key) and how to fix it; it never contains a secret value.
    """
