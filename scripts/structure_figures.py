"""Structure figures of the source tree: environment reads, Redis key spellings, imports.

    .venv/bin/python scripts/structure_figures.py [--root DIR] [--json]

Counts, over the production packages (tests and benchmarks excluded), from the code's
AST (docstrings and comments never count):

- ``env_reads``: ``os.environ`` / ``os.getenv`` uses outside the settings module
  (``foundation/settings/environment.py``), per file;
- ``key_spellings``: string literals or f-string pieces that spell a Redis key of the-loop
  (``...:inbox:...``, ``:delivery:``, ``:lock:`` ...) outside the stores' key modules
  (:data:`KEYS_MODULES`: each owns its key namespaces, ``foundation.redis.namespaces``),
  per file;
- ``cross_imports``: imports from ``webhook`` into ``workers`` and back, and anything
  ``graph`` imports from the project's other packages.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("graph", "foundation", "integrations", "runner", "the_loop", "webhook", "workers")
SETTINGS_MODULE = "foundation/settings/environment.py"
KEYS_MODULES = frozenset({
    "foundation/inbox/keys.py", "foundation/turns.py", "workers/state.py", "workers/ci.py",
    "workers/identities.py", "integrations/throttle.py", "integrations/github_cache.py"})
_KEY = re.compile(
    r":(inbox|inboxes|delivery|deliveries|ready|wake|lock|backoff|parked|head|state|events"
    r"|ci|sha|workers|reaper|writes|seen)(:|$)"
)


def _modules(root: Path) -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are docstrings."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _env_reads(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in {"environ", "getenv", "environb"}
        ):
            count += 1
    return count


def _key_spellings(tree: ast.AST) -> int:
    skip = _docstrings(tree)
    count = 0
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in skip and len(node.value) < 200 and _KEY.search(node.value)):
            count += 1
    return count


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def figures(root: Path = ROOT) -> dict[str, object]:
    """The three figures of the checkout at ``root`` as a JSON-ready dict (module docstring)."""
    env: Counter[str] = Counter()
    keys: Counter[str] = Counter()
    cross: list[str] = []
    for path in _modules(root):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), rel)
        if rel != SETTINGS_MODULE and (n := _env_reads(tree)):
            env[rel] = n
        if rel not in KEYS_MODULES and (n := _key_spellings(tree)):
            keys[rel] = n
        top = rel.split("/")[0]
        imported = _imports(tree)
        if top == "workers" and "webhook" in imported:
            cross.append(f"{rel} imports webhook")
        if top == "webhook" and "workers" in imported:
            cross.append(f"{rel} imports workers")
        if top == "graph":
            cross += [f"{rel} imports {p}" for p in sorted(imported & set(PACKAGES) - {"graph"})]
    return {
        "env_reads": {"total": sum(env.values()), "files": len(env), "by_file": dict(env)},
        "key_spellings": {"total": sum(keys.values()), "files": len(keys), "by_file": dict(keys)},
        "cross_imports": cross,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to measure")
    args = parser.parse_args(argv)
    result = figures(args.root.resolve())
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    for name in ("env_reads", "key_spellings"):
        item = result[name]
        assert isinstance(item, dict)
        print(f"{name}: {item['total']} in {item['files']} files")
        for file, n in sorted(item["by_file"].items()):
            print(f"  {file}: {n}")
    cross = result["cross_imports"]
    assert isinstance(cross, list)
    print(f"cross_imports: {len(cross)}")
    for line in cross:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
