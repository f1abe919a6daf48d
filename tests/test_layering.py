"""Which package may import which: checked on the source's syntax trees (every import
statement, lazy ones inside functions included). Dependencies point inward.

``graph/`` is the core, the graph's mechanics only: it imports no web framework, Redis,
queue, HTTP client, GitHub or Slack library, no ``subprocess``, none of the project's other
packages, and reads no environment variable. The receiver and the worker meet only in the
delivery protocol.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# -- graph/: the core ------------------------------------------------------------------

GRAPH = sorted((REPO_ROOT / "graph").rglob("*.py"))

#: Top-level modules ``graph/`` must never import.
GRAPH_FORBIDDEN = frozenset({
    "flask", "redis", "rq", "requests", "github", "slack_sdk", "subprocess",
    "webhook", "workers", "runner", "integrations", "foundation", "the_loop",
})


def imported(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (lazy and TYPE_CHECKING imports
    included; relative imports resolve inside their own package)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "__import__" and node.args \
                and isinstance(node.args[0], ast.Constant):
            names.add(str(node.args[0].value).split(".")[0])
    return names


ENVIRONMENT = frozenset({"environ", "environb", "getenv", "putenv"})


def reads_environment(path: Path) -> list[int]:
    """Lines of ``path`` that touch ``os.environ``, ``os.getenv`` or ``os.putenv``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        attribute = isinstance(node, ast.Attribute) and node.attr in ENVIRONMENT
        from_os = isinstance(node, ast.ImportFrom) and node.module == "os" and any(
            a.name in ENVIRONMENT for a in node.names)
        if attribute or from_os:
            lines.append(node.lineno)
    return lines


def test_the_graph_package_has_modules_to_check():
    assert {p.name for p in GRAPH} >= {"model.py", "compile.py", "walk.py", "effects.py"}


@pytest.mark.parametrize("path", GRAPH, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_graph_imports_only_the_standard_library_its_own_modules_and_pure_libraries(path):
    bad = sorted(imported(path) & GRAPH_FORBIDDEN)
    assert not bad, f"{path.relative_to(REPO_ROOT)} imports {', '.join(bad)}: graph/ is the core"


@pytest.mark.parametrize("path", GRAPH, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_graph_reads_no_environment_variable(path):
    lines = reads_environment(path)
    assert not lines, (f"{path.relative_to(REPO_ROOT)} reads the environment at line(s) "
                       f"{', '.join(map(str, lines))}: settings are the drivers' concern")


def test_the_checks_see_what_they_forbid(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom redis import Redis\n"
                      "def f():\n    import foundation.hooks\n    return os.environ['X']\n")
    assert {"redis", "foundation"} <= imported(module)
    assert reads_environment(module) == [5]


# -- the receiver, the worker and the protocol --------------------------------------

PRODUCTION = ("graph", "foundation", "integrations", "runner", "the_loop", "webhook", "workers")


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
    # The receiver and the worker meet only in the delivery protocol (foundation.inbox).
    ("webhook", ("workers",)),
    ("workers", ("webhook",)),
    # The protocol and the logging setup belong to neither process.
    ("foundation/inbox", ("webhook", "workers", "the_loop.cli")),
    ("foundation/observability", ("webhook", "workers", "foundation.inbox")),
])
def test_import_direction(package: str, forbidden: tuple[str, ...]) -> None:
    assert offenders(package, forbidden) == []


# A key name built in Python (f"{prefix}:...", f"{p}...", not ``{prefix}:...`` in a
# docstring) or in Lua (P .. 'inbox:').
_KEY_SPELLING = re.compile(r"""(?<!``)\{(?:self\.)?(?:settings\.)?(?:prefix|p)\}:?[a-z~]"""
                           r"""|\bP \.\. ['"]""")


def test_redis_keys_are_spelled_only_in_the_protocol() -> None:
    """Every Redis key name of the-loop is spelled in ``foundation/inbox/keys.py``; Lua
    scripts get theirs through KEYS and ARGV."""
    found = []
    for package in PRODUCTION:
        for path in _sources(package):
            if path == REPO_ROOT / "foundation" / "inbox" / "keys.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if _KEY_SPELLING.search(line):
                    found.append(f"{path.relative_to(REPO_ROOT)}:{number}")
    for path in sorted((REPO_ROOT / "foundation" / "inbox" / "scripts").glob("*.lua")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("--", 1)[0]
            if re.search(r"""['"][a-z]+:['"]|\.\. *['"][a-z]+:""", code):
                found.append(f"{path.relative_to(REPO_ROOT)}:{number}")
    assert found == []
