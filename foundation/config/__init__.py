"""The configuration files, outside the graph core.

* :mod:`foundation.config.deployment` — ``cli-config.yaml`` (*how*: transports, credential
  variable names, routing, queue, state, classifier endpoint, harness, runner); its
  ``harness`` and ``runner`` types are the settings' sections too.
* :mod:`foundation.config.repository` — ``.the-loop/harness-config.yaml`` (*what*) and
  ``.the-loop/collaborators.yaml`` (*who*).
* :mod:`foundation.config.loader` — YAML with line numbers, JSON Schema validation, the
  errors that name file, key, line and fix.
* :mod:`foundation.config.legacy` — keys a breaking change removed (shared with
  ``the-loop upgrade``).
"""

from __future__ import annotations

from foundation.config.deployment import CliConfig, load_cli_config
from foundation.config.loader import CLI_CONFIG, COLLABORATORS, HARNESS_CONFIG, KINDS
from foundation.config.repository import (
    Collaborators,
    HarnessConfig,
    load_collaborators,
    load_harness_config,
)


def load_config(
    kind: str, text: str | None, source: str
) -> CliConfig | HarnessConfig | Collaborators:
    """Load ``text`` as a file of ``kind`` (one of :data:`KINDS`), named ``source``.

    Raises:
        ValueError: an unknown ``kind``.
        ConfigFileError: as the kind's loader.
    """
    if kind == CLI_CONFIG:
        return load_cli_config(text, source)
    if kind == HARNESS_CONFIG:
        return load_harness_config(text, source)
    if kind == COLLABORATORS:
        return load_collaborators(text, source)
    raise ValueError(f"unknown config kind {kind!r}; expected one of {', '.join(KINDS)}")


__all__ = ["load_config"]
