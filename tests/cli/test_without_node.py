"""The commands that only read a graph run without Node or Mermaid's npm packages (an
install by ``pip install .`` alone); the ones that run its exit chains refuse at start-up,
naming the fix, when the shipped graph's diagram checks could not run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from foundation.hooks import lint_artifacts as la
from tests.conftest import publish_test_key
from the_loop.cli import main
from the_loop.stores import FileStateStore

ROOT = Path(__file__).resolve().parents[2]
THE_LOOP = Path(sys.executable).with_name("the-loop")
REF = "local:no-node"
REQUIREMENTS = "# Requirements\n\n## Problem\n\nSlow.\n\n## Requirements\n\n- fast\n"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Alice, github: alice}\n"


def without_node(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``the-loop ARGS`` as installed, with a PATH holding no ``node`` and the parser's
    directory pointed at an empty one; this tree's code, none of this environment's
    the-loop variables."""
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")}
    env.update(PATH=str(empty), HOME=str(tmp_path), THE_LOOP_ENV_FILE="",
               PYTHONPATH=os.pathsep.join(
                   p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    env[la.PARSER_ENV] = str(empty)
    return subprocess.run([str(THE_LOOP), *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False, cwd=tmp_path)


def test_graph_export_and_validate_run_without_node_and_export_is_unchanged(tmp_path):
    """Given an install with no Node on PATH and no npm packages where
    THE_LOOP_MERMAID_PARSER points
    When `graph export` and `graph validate` run on the shipped graph (which asks for
    diagram checks)
    Then both succeed, export prints the same bytes as where the parser is installed, and
    validate warns that the processes running its hooks would refuse, naming the fix."""
    for fmt in ("json", "mermaid"):
        bare = without_node(tmp_path, "graph", "export", "--format", fmt)
        assert bare.returncode == 0, bare.stderr
        assert bare.stdout == CliRunner().invoke(main, ["graph", "export", "--format",
                                                        fmt]).output
    text = without_node(tmp_path, "graph", "validate")
    assert text.returncode == 0, text.stderr
    assert text.stdout == CliRunner().invoke(main, ["graph", "validate"]).output
    assert "node 'design': exit[1]: hook 'lint-artifacts'" in text.stderr
    assert "Node.js" in text.stderr and "make venv" in text.stderr
    assert la.PARSER_ENV in text.stderr
    doc = json.loads(without_node(tmp_path, "graph", "validate", "--json").stdout)
    assert (doc["ok"], doc["status"]) == (True, "valid")
    assert [w for w in doc["warnings"] if "'lint-artifacts'" in w] == doc["warnings"]
    assert len(doc["warnings"]) == 1 and "check --recompute" in doc["warnings"][0]


def test_graph_validate_warns_nothing_where_the_parser_is_installed():
    doc = json.loads(CliRunner().invoke(main, ["graph", "validate", "--json"]).output)
    assert doc["warnings"] == []


@pytest.fixture
def checkout(tmp_path):
    repo = tmp_path / "repo"
    (repo / "specs/no-node").mkdir(parents=True)
    (repo / ".the-loop").mkdir()
    (repo / ".the-loop/collaborators.yaml").write_text(COLLABORATORS)
    (repo / "specs/no-node/requirements.md").write_text(REQUIREMENTS)
    publish_test_key(repo)
    return repo


@pytest.fixture
def no_parser(tmp_path, monkeypatch):
    """The parser's directory pointed at an empty one."""
    empty = tmp_path / "no-parser"
    empty.mkdir()
    monkeypatch.setenv(la.PARSER_ENV, str(empty))
    return empty


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_run_refuses_naming_the_fix_and_writes_no_state(checkout, no_parser):
    out = cli("run", "--work-item", REF, "--repo", str(checkout), "--json")
    assert out.exit_code == 1
    doc = json.loads(out.output)
    assert (doc["action"], doc["ok"], doc["status"]) == ("run", False, "tools-missing")
    error = doc["error"]
    assert "node 'design': exit[1]: hook 'lint-artifacts'" in error
    assert f"{no_parser}/node_modules" in error and la.PARSER_ENV in error
    assert "make venv" in error and "npm ci" in error
    assert not FileStateStore(checkout / ".the-loop/state").state_path(REF).exists()
    plain = cli("run", "--work-item", REF, "--repo", str(checkout))
    assert plain.exit_code == 1 and plain.output.startswith("Error: ")
    assert "make venv" in plain.output


def test_check_reads_without_the_parser_and_recompute_refuses(checkout, monkeypatch,
                                                               no_parser):
    """Given a work item run to its first gate where the parser is installed
    When the parser is gone
    Then `check` still evaluates it (the gate is unmet), `check --recompute` and `decide`
    refuse naming the fix."""
    monkeypatch.delenv(la.PARSER_ENV)
    assert cli("run", "--work-item", REF, "--repo", str(checkout)).exit_code == 0
    monkeypatch.setenv(la.PARSER_ENV, str(no_parser))
    doc = json.loads(cli("check", "--work-item", REF, "--repo", str(checkout),
                         "--json").output)
    assert doc["status"] == "unmet" and doc["node"] == "requirements-approval"
    assert any("gate requirements-approval is unmet" in p for p in doc["problems"])
    for args in (("check", "--work-item", REF, "--recompute"),
                 ("decide", REF, "approve", "--by", "alice")):
        out = cli(*args, "--repo", str(checkout), "--json")
        assert out.exit_code == 1
        doc = json.loads(out.output)
        assert (doc["action"], doc["status"]) == (args[0], "tools-missing")
        assert "'lint-artifacts'" in doc["error"] and la.PARSER_ENV in doc["error"]
