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


# -- floors: one name, one floor ------------------------------------------------------

#: Each production package and its floor, lowest first. A package imports only packages
#: on lower floors: the processes (floor 4) never import each other, the transports and
#: the receiver's floor-mates never reach up. ``docs/architecture.md`` draws the same.
FLOORS = {
    "graph": 1,         # the core: graph mechanics
    "foundation": 2,    # settings, config, events, protocols, observability, signing, hooks
    "integrations": 3,  # the transports: GitHub, Slack, Jira, harness adapters
    "webhook": 4,       # process: the receiver
    "workers": 4,       # process: the delivery worker
    "runner": 4,        # process: the agent runner
    "the_loop": 5,      # the application: CLI, composition root, entry points, dashboard, sandbox
}


def package_imports() -> dict[tuple[str, str], list[str]]:
    """``(importer, imported)`` package pairs (different packages) -> the ``file:line``
    places that make them, over every production module (lazy imports included)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for package in FLOORS:
        for path in _sources(package):
            for line, module in imported_modules(path):
                target = module.split(".")[0]
                if target in FLOORS and target != package:
                    edges.setdefault((package, target), []).append(
                        f"{path.relative_to(REPO_ROOT)}:{line} {module}")
    return edges


def test_every_production_package_has_a_floor() -> None:
    packages = {p.parent.name for p in REPO_ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages == set(FLOORS), "give each package a floor in FLOORS (and the docs' map)"
    assert set(PRODUCTION) == set(FLOORS)


def upward(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """The places of ``edges`` whose imported package is not on a lower floor."""
    return [f"{place} (floor {FLOORS[src]} -> {FLOORS[dst]})"
            for (src, dst), places in edges.items()
            if FLOORS[dst] >= FLOORS[src] for place in places]


def test_imports_point_only_to_lower_floors() -> None:
    edges = package_imports()
    assert ("the_loop", "workers") in edges  # the walk sees the application's imports
    found = upward(edges)
    assert found == [], "imports that do not point to a lower floor:\n" + "\n".join(found)


def test_the_floor_check_refuses_upward_and_sideways_imports() -> None:
    edges = {("integrations", "foundation"): ["a.py:1"], ("foundation", "the_loop"): ["b.py:2"],
             ("runner", "workers"): ["c.py:3"]}
    assert upward(edges) == ["b.py:2 (floor 2 -> 5)", "c.py:3 (floor 4 -> 4)"]


ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"


def drawn_map(text: str) -> tuple[dict[str, int], set[tuple[str, str]]]:
    """The floors table and the arrows of the first Mermaid drawing of the ``## The map``
    section of ``docs/architecture.md``: ``({package: floor}, {(importer, imported)})``."""
    section = text.split("## The map", 1)[1].split("\n## ", 1)[0]
    floors = {m.group(2): int(m.group(1))
              for m in re.finditer(r"^\| (\d) \| `(\w+)/` \|", section, re.M)}
    drawing = section.split("```mermaid", 1)[1].split("```", 1)[0]
    # A node is declared as ``id["package/<br/>..."]`` (``graph`` is a Mermaid keyword,
    # so ids are not package names).
    package = {m.group(1): m.group(2)
               for m in re.finditer(r'^\s*(\w+)\["(\w+)/', drawing, re.M)}
    arrows = {(package[m.group(1)], package[m.group(2)])
              for m in re.finditer(r"^\s*(\w+) --> (\w+)\s*$", drawing, re.M)}
    return floors, arrows


def test_the_architecture_map_is_the_code() -> None:
    floors, arrows = drawn_map(ARCHITECTURE.read_text(encoding="utf-8"))
    assert floors == FLOORS, "docs/architecture.md's floors table differs from FLOORS"
    actual = set(package_imports())
    assert arrows - actual == set(), f"drawn but not imported: {sorted(arrows - actual)}"
    assert actual - arrows == set(), f"imported but not drawn: {sorted(actual - arrows)}"


def test_the_map_reader_reads_floors_and_arrows() -> None:
    text = ("## The map\n\n| floor | package | holds |\n|---|---|---|\n| 1 | `graph/` | x |\n"
            '\n```mermaid\nflowchart TB\n    a["a/"]\n    core["graph/"]\n    a --> core\n```\n'
            "\n## Next\n| 2 | `b/` | y |\n")
    assert drawn_map(text) == ({"graph": 1}, {("a", "graph")})


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


# -- Redis keys: each namespace is spelled by the one store that owns it ---------------
#
# A store's key class declares its namespaces with foundation.redis.namespaces.owns and
# builds its keys with KeySpace.key("NAMESPACE", ...). Anywhere else, a key spelled by hand
# is an offender: a key name built in Python (f"{prefix}:...", f"{p}...", not
# ``{prefix}:...`` in a docstring) or in Lua (P .. 'inbox:'); a namespace passed to
# .key(...) or ":".join(...) outside its owner; a string (not a docstring) that holds
# ":NAMESPACE:", is ":NAMESPACE", or, for a namespace of two segments, holds the namespace.
_KEY_SPELLING = re.compile(r"""(?<!``)\{(?:self\.)?(?:settings\.)?(?:prefix|p)\}:?[a-z~]"""
                           r"""|\bP \.\. ['"]""")
#: A key name in Lua: 'inbox:' or .. 'lock:'.
_LUA_SPELLING = re.compile(r"""['"][a-z]+:['"]|\.\. *['"][a-z]+:""")


def _module_name(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            found.add(id(node.body[0].value))
    return found


def _spells(text: str, namespace: str) -> bool:
    """Whether the literal ``text`` spells a key of ``namespace`` (``":state:"``,
    ``":ready"``, ``"github:writes"``)."""
    return f":{namespace}:" in text or text == f":{namespace}" or (
        ":" in namespace and namespace in text)


def key_spellings(sources: list[tuple[str, Path]], owners: dict[str, str]) -> list[str]:
    """``file:line what`` for every key spelled outside its owner.

    Args:
        sources: ``(module name, path)`` of the Python modules and Lua scripts to read.
        owners: namespace -> owning module (:meth:`Namespaces.owners`).
    """
    found = []
    for module, path in sources:
        text = path.read_text()
        if path.suffix == ".lua":
            for number, line in enumerate(text.splitlines(), start=1):
                if _LUA_SPELLING.search(line.split("--", 1)[0]):
                    found.append(f"{path}:{number} Lua spells a key")
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if _KEY_SPELLING.search(line):
                found.append(f"{path}:{number} builds a key by hand")
        tree = ast.parse(text, str(path))
        docstrings = _docstrings(tree)
        foreign = [ns for ns, owner in owners.items() if owner != module]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                joined = node.func.attr == "join" and isinstance(node.func.value, ast.Constant) \
                    and node.func.value.value == ":"
                named = [a.value for a in ast.walk(node) if isinstance(a, ast.Constant)
                         and isinstance(a.value, str)] if joined else \
                    [node.args[0].value] if node.func.attr == "key" and node.args \
                    and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str) else []
                for ns in named:
                    if owners.get(ns, module) != module or (not joined and ns not in owners):
                        found.append(f"{path}:{node.lineno} key of {ns!r} "
                                     f"(owner: {owners.get(ns, 'none')})")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docstrings:
                found.extend(f"{path}:{node.lineno} spells {ns!r} (owner: {owners[ns]})"
                             for ns in foreign if _spells(node.value, ns))
    return found


def _key_owners() -> dict[str, str]:
    """Every key namespace -> its owning module, claimed by importing each production
    module that declares a key class (``@owns(...)``)."""
    import importlib

    from foundation.redis.namespaces import NAMESPACES

    for package in PRODUCTION:
        for path in _sources(package):
            tree = ast.parse(path.read_text(), str(path))
            if any(isinstance(d, ast.Call) and getattr(d.func, "id", None) == "owns"
                   for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                   for d in node.decorator_list):
                importlib.import_module(_module_name(path, REPO_ROOT))
    return dict(NAMESPACES.owners())


def test_each_key_namespace_is_spelled_by_one_module() -> None:
    """Every Redis key namespace is spelled in one production module, the store that owns
    it; no other module spells a key of it; Lua scripts (every store's ``scripts/``) get
    theirs through KEYS and ARGV."""
    owners = _key_owners()
    assert {"delivery", "state", "github:writes", "turn", "ci", "repository"} <= set(owners)
    sources = [(_module_name(path, REPO_ROOT), path)
               for package in PRODUCTION for path in _sources(package)]
    sources += [("", path) for package in PRODUCTION
                for path in sorted((REPO_ROOT / package).rglob("scripts/*.lua"))]
    assert len([p for _, p in sources if p.suffix == ".lua"]) >= 14
    found = [f.replace(f"{REPO_ROOT}/", "") for f in key_spellings(sources, owners)]
    assert found == []
    # ... and each owner spells the keys of every namespace it claims
    spelled: dict[str, str] = {}
    for module, path in sources:
        for node in ast.walk(ast.parse(path.read_text())) if path.suffix == ".py" else ():
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "key" \
                    and node.args and isinstance(node.args[0], ast.Constant):
                spelled[node.args[0].value] = module
    assert spelled == owners


def test_the_key_check_finds_a_key_spelled_outside_its_owner(tmp_path: Path) -> None:
    owners = {"state": "workers.state", "turn-lock": "foundation.turns",
              "github:writes": "integrations.throttle"}
    (tmp_path / "offender.py").write_text(
        'def keys(prefix, ref, space):\n'
        '    """``P:state:REF`` in a docstring is documentation."""\n'
        '    a = f"{prefix}:state:{ref}"\n'
        '    b = space.key("state", ref)\n'
        '    c = ":".join((prefix, "turn-lock", ref))\n'
        '    d = prefix + ":github:writes:" + ref\n'
        '    return a, b, c, d\n')
    (tmp_path / "offender.lua").write_text("return redis.call('GET', ARGV[1] .. 'lock:')\n")
    (tmp_path / "owner.py").write_text('def state(self, ref):\n'
                                       '    return self.key("state", ref)\n')
    found = key_spellings([("sample.offender", tmp_path / "offender.py"),
                           ("", tmp_path / "offender.lua"),
                           ("workers.state", tmp_path / "owner.py")], owners)
    lines = sorted({f.split(" ")[0].removeprefix(f"{tmp_path}/") for f in found})
    assert lines == ["offender.lua:1", "offender.py:3", "offender.py:4", "offender.py:5",
                     "offender.py:6"]
