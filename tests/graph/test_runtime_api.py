"""The runtime's public API: nothing outside ``graph/runtime/`` reaches into a ``Runtime``'s
privates, the clients inside it (the plan runner, the operator verbs) do not either, and
the delivery worker's seam (``state=`` of ``enrol``/``advance``) loads a work item's
state once per delivery."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from graph.runtime import UNLOADED, Runtime, RuntimeAPI, Unloaded
from graph.state import MemoryStateStore, WorkItemState
from tests.conftest import REPO_ROOT
from tests.graph.test_runtime import REF, REPO, REQUIREMENTS, setup

# -- no private access from outside the package -------------------------------------------

#: Where the code that drives a runtime lives: the production packages, the tests, the
#: benchmarks and scripts.
SCANNED = ("graph", "foundation", "integrations", "webhook", "workers", "runner", "the_loop",
           "tests", "benchmarks", "scripts")

#: The package itself, whose modules implement the runtime's steps.
PACKAGE = REPO_ROOT / "graph" / "runtime"

#: Modules inside the package that are clients of the runtime: they use its public API only.
CLIENTS = ("waves.py", "operator.py", "rebuild.py")

#: The last name of an expression that holds a runtime: ``rt``, ``runtime``,
#: ``self.runtime``, ``self.rt``, ``agent.runtime``, ``self._runtime``, ``copy.runtime``...
RUNTIME_NAME = re.compile(r"^_*(rt|runtime|[a-z0-9_]*_runtime|[a-z0-9_]*_rt)\d*$")


def _holds_runtime(node: ast.expr) -> bool:
    """Whether ``node`` is spelled as a runtime: a name or attribute matching
    :data:`RUNTIME_NAME`, or a ``Runtime(...)`` call."""
    if isinstance(node, ast.Name):
        return bool(RUNTIME_NAME.match(node.id))
    if isinstance(node, ast.Attribute):
        return bool(RUNTIME_NAME.match(node.attr))
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name == "Runtime"
    return False


def private_uses(source: str, filename: str = "<snippet>") -> list[str]:
    """Every ``X._name`` in ``source`` where ``X`` holds a runtime (dunders excepted), as
    ``"<filename>:<line>: <X>._name"``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and _holds_runtime(node.value)):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def scanned_files() -> list[Path]:
    """Every .py file of :data:`SCANNED` outside the runtime package, and its client
    modules :data:`CLIENTS`."""
    files = [path for top in SCANNED for path in sorted((REPO_ROOT / top).rglob("*.py"))
             if PACKAGE not in path.parents]
    return files + [PACKAGE / name for name in CLIENTS]


def test_nothing_outside_the_runtime_package_uses_a_private_of_a_runtime():
    offences = []
    for path in scanned_files():
        offences += private_uses(path.read_text(encoding="utf-8"),
                                 str(path.relative_to(REPO_ROOT)))
    assert not offences, "private runtime access (use a public method):\n" + "\n".join(
        offences)


def test_the_scan_covers_the_callers_and_the_package_clients():
    names = {str(p.relative_to(REPO_ROOT)) for p in scanned_files()}
    assert {"the_loop/cli/drivers.py", "workers/routes/drive.py", "graph/runtime/waves.py",
            "graph/runtime/operator.py", "tests/graph/test_runtime.py"} <= names
    assert "graph/runtime/walk.py" not in names


@pytest.mark.parametrize("snippet", [
    "rt._walk(state, item, config, None, None)",
    "runtime._run(node, 'exit', state, item, config, None, None)",
    "self.runtime._park(state, item, config, chain, result)",
    "self.rt._log(state, 'x', {}, None)",
    "agent.runtime._publish(state, item, config, node, ())",
    "self._runtime._check_graph(state)",
    "local.runtime._settle",
    "Runtime(graph, store)._enter(state, 'n', via='x')",
])
def test_the_scan_finds_a_private_use(snippet):
    assert private_uses(snippet), snippet


@pytest.mark.parametrize("snippet", [
    "rt.park(state, item, config, chain, result)",
    "runtime.run_boundary(node, 'exit', state, item, config, None, None, record=False)",
    "self.runtime.store.save(state)",
    "rt.__class__",
    "store._items",
    "self._runtime.enrol(item, config, None)",
])
def test_the_scan_leaves_public_uses_alone(snippet):
    assert not private_uses(snippet), snippet


def test_runtime_implements_every_method_of_the_public_api():
    members = [n for n in vars(RuntimeAPI) if not n.startswith("_")]
    assert {"park", "record", "escalate", "publish", "log", "enter", "run_boundary",
            "settle", "load"} <= set(members)
    for name in members:
        assert callable(getattr(Runtime, name)), name


# -- no import circle among the core's modules ---------------------------------------------


def graph_imports() -> dict[str, set[str]]:
    """Module -> the ``graph`` modules it imports (lazy and ``TYPE_CHECKING`` imports
    included). Importing ``a.b.c`` runs ``a.b``'s ``__init__`` first, so it counts as
    importing that package too, unless the importer is inside it."""
    files = {}
    for path in (REPO_ROOT / "graph").rglob("*.py"):
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files]
                named = subs if len(subs) == len(node.names) else [base, *subs]
            else:
                continue
            for target in (t for t in named if t in files and t != module):
                edges[module].add(target)
                parts = target.split(".")
                for k in range(1, len(parts)):
                    ancestor = ".".join(parts[:k])
                    if ancestor in files and not module.startswith(ancestor + ".") \
                            and module != ancestor:
                        edges[module].add(ancestor)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_among_the_graph_modules():
    assert circles(graph_imports()) == []


def test_the_circle_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# -- the delivery worker's seam: state loaded once per delivery ------------------------------


class CountingStore(MemoryStateStore):
    """A memory store that counts its ``load`` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    def load(self, ref: str) -> WorkItemState | None:
        self.loads += 1
        return super().load(ref)


def counted():
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    store = CountingStore()
    return config, item, Runtime(rt.graph, store), store


def test_unloaded_is_a_readable_sentinel():
    assert isinstance(UNLOADED, Unloaded)
    assert repr(UNLOADED) == "UNLOADED"


def test_unloaded_state_is_loaded_as_before():
    config, item, rt, store = counted()
    assert rt.advance(item, config, None) is None  # not enrolled
    assert store.loads == 1
    first = rt.enrol(item, config, None, state=UNLOADED)
    assert store.loads == 2 and first.state is not None
    again = rt.enrol(item, config, None)  # enrolled: simply advanced, not enrolled twice
    assert store.loads == 3 and again.node == first.node
    types = [e.type for e in store.events(REF)]
    assert types.count("work-item.enrolled") == 1


def test_state_none_is_a_work_item_that_is_not_enrolled():
    config, item, rt, store = counted()
    assert rt.advance(item, config, None, state=None) is None
    assert store.loads == 0 and store.load(REF) is None
    store.loads = 0
    result = rt.enrol(item, config, None, state=None)
    assert store.loads == 0
    assert result.state is not None and result.state.ref == REF
    enrolled = next(e for e in store.events(REF) if e.type == "work-item.enrolled")
    assert enrolled.data["node"] == rt.graph.start
    assert store.loads == 0  # reading the log above loads no state


def test_a_passed_state_is_used_as_loaded_and_not_loaded_again():
    config, item, rt, store = counted()
    rt.enrol(item, config, None)
    state = rt.load(item, config)
    assert state is not None
    store.loads = 0
    result = rt.advance(item, config, None, state=state)
    assert store.loads == 0
    assert result is not None and result.state is state
    store.loads = 0
    again = rt.enrol(item, config, None, state=state)  # enrolled: advanced, not enrolled
    assert store.loads == 0 and again.state is state
    assert [e.type for e in store.events(REF)].count("work-item.enrolled") == 1
