"""Which package may import which: checked on the source's syntax trees (every import
statement, lazy ones inside functions included)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PRODUCTION = ("graph", "integrations", "the_loop", "webhook", "workers")


def _sources(package: str) -> Iterator[Path]:
    yield from sorted((REPO_ROOT / package).rglob("*.py"))


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every absolute import in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    """``file:line module`` for each import from ``package`` of a forbidden package."""
    found = []
    for path in _sources(package):
        for line, module in imported_modules(path):
            if module.split(".")[0] in forbidden or any(
                    module == f or module.startswith(f"{f}.") for f in forbidden):
                found.append(f"{path.relative_to(REPO_ROOT)}:{line} {module}")
    return found


@pytest.mark.parametrize(("package", "forbidden"), [
    # The receiver and the worker meet only in the delivery protocol (the_loop.inbox).
    ("webhook", ("workers",)),
    ("workers", ("webhook",)),
    # The protocol and the logging setup belong to neither process.
    ("the_loop/inbox", ("webhook", "workers", "the_loop.cli")),
    ("the_loop/observability", ("webhook", "workers", "the_loop.inbox")),
])
def test_import_direction(package: str, forbidden: tuple[str, ...]) -> None:
    assert offenders(package, forbidden) == []


# A key name built in Python (f"{prefix}:...", f"{p}...", not ``{prefix}:...`` in a
# docstring) or in Lua (P .. 'inbox:').
_KEY_SPELLING = re.compile(r"""(?<!``)\{(?:self\.)?(?:settings\.)?(?:prefix|p)\}:?[a-z~]"""
                           r"""|\bP \.\. ['"]""")


def test_redis_keys_are_spelled_only_in_the_protocol() -> None:
    """Every Redis key name of the-loop is spelled in ``the_loop/inbox/keys.py``; Lua
    scripts get theirs through KEYS and ARGV."""
    found = []
    for package in PRODUCTION:
        for path in _sources(package):
            if path == REPO_ROOT / "the_loop" / "inbox" / "keys.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if _KEY_SPELLING.search(line):
                    found.append(f"{path.relative_to(REPO_ROOT)}:{number}")
    for path in sorted((REPO_ROOT / "the_loop" / "inbox" / "scripts").glob("*.lua")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("--", 1)[0]
            if re.search(r"""['"][a-z]+:['"]|\.\. *['"][a-z]+:""", code):
                found.append(f"{path.relative_to(REPO_ROOT)}:{number}")
    assert found == []
