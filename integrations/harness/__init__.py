"""Harness adapters: a coding-agent CLI's turn behind one Protocol (see :mod:`.base`)."""

from integrations.harness.base import (
    ADAPTERS,
    Harness,
    HarnessError,
    HarnessMissing,
    HarnessVersionError,
    TurnLimits,
    TurnOutcome,
    TurnRequest,
    _adapters,
    build_harness,
    check_harness,
)
from integrations.harness.process import ProcessResult, run_process

_adapters()  # fill ADAPTERS once the package is importable (the adapters import base)

__all__ = [
    "ADAPTERS",
    "Harness",
    "HarnessError",
    "HarnessMissing",
    "HarnessVersionError",
    "ProcessResult",
    "TurnLimits",
    "TurnOutcome",
    "TurnRequest",
    "build_harness",
    "check_harness",
    "run_process",
]
