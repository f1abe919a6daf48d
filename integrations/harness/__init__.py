"""Harness adapters: a coding-agent CLI's turn behind one Protocol (see :mod:`.base`);
the registry of adapters is :mod:`.factory`, the runner's modes :mod:`.modes`."""

from integrations.harness.base import (
    Harness,
    HarnessError,
    HarnessMissing,
    HarnessVersionError,
    TurnLimits,
    TurnOutcome,
    TurnRequest,
)
from integrations.harness.factory import ADAPTERS, build_harness, check_harness
from integrations.harness.process import ProcessResult, run_process

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
