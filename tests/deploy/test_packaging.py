"""What `pip install .` ships: every source folder is a package setuptools finds, and the
data files the code opens at run time travel with it."""

from __future__ import annotations

import tomllib

from setuptools import find_packages

from tests.conftest import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def test_every_source_folder_is_a_package_setuptools_finds():
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    found = set(find_packages(where=str(REPO_ROOT), include=include))
    folders = set()
    for root in {name.rstrip("*").rstrip(".") for name in include}:
        for source in (REPO_ROOT / root).rglob("*.py"):
            if "__pycache__" not in source.parts:
                folders.add(".".join(source.parent.relative_to(REPO_ROOT).parts))
    assert folders - found == set(), "add an __init__.py so the folder is installed"


def test_run_time_data_files_are_package_data():
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["*"]
    suffixes = {p.removeprefix("*") for p in patterns if p.startswith("*.")}
    data = [p for p in REPO_ROOT.glob("[!.]*/**/*.*")
            if p.suffix in {".lua", ".json", ".yaml", ".mjs", ".md", ".html", ".css", ".js"}
            and p.parts[len(REPO_ROOT.parts)] in {"graph", "the_loop", "webhook", "workers",
                                                  "integrations"}]
    assert data, "the packages ship Lua scripts, schemas and the default graph"
    assert {p.suffix for p in data} <= suffixes
