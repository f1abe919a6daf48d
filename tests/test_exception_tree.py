"""Every exception class the project defines derives from ``graph.errors.LoopError``."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from graph.errors import LoopError
from tests.conftest import REPO_ROOT

#: The project's packages (``[tool.setuptools.packages.find]`` in pyproject.toml).
PACKAGES = ("graph", "foundation", "integrations", "webhook", "workers", "runner", "the_loop")
#: Test doubles: their errors are not the product's (the fake GitHub's git failures).
DOUBLES = ("the_loop/sandbox/fakegithub",)


def exception_classes() -> dict[str, type[BaseException]]:
    """``path:Class`` -> class, for every exception class defined in the packages'
    modules (found by parsing the source, then imported to follow the bases)."""
    found: dict[str, type[BaseException]] = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if any(path.is_relative_to(REPO_ROOT / d) for d in DOUBLES):
                continue
            names = [n.name for n in ast.walk(ast.parse(path.read_text()))
                     if isinstance(n, ast.ClassDef)]
            if not names:
                continue
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            module = importlib.import_module(".".join(parts).removesuffix(".__init__"))
            for name in names:
                cls = getattr(module, name, None)
                if (isinstance(cls, type) and issubclass(cls, BaseException)
                        and cls.__module__ == module.__name__):
                    found[f"{Path(*parts)}.py:{name}"] = cls
    return found


def test_every_exception_class_derives_from_loop_error() -> None:
    classes = exception_classes()
    assert len(classes) > 30  # the walk found the project's classes
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, LoopError))
    assert outside == [], f"derive these from graph.errors.LoopError: {outside}"



def test_exception_class_names_are_unique() -> None:
    seen: dict[str, list[str]] = {}
    for where, cls in exception_classes().items():
        seen.setdefault(cls.__name__, []).append(where)
    assert {name: at for name, at in seen.items() if len(at) > 1} == {}


def test_the_tree_drawn_in_graph_errors_names_every_class() -> None:
    import graph.errors

    drawing = graph.errors.__doc__ or ""
    missing = sorted({cls.__name__ for cls in exception_classes().values()
                      if cls.__name__ not in drawing})
    assert missing == [], f"add these to the tree in graph/errors.py: {missing}"
