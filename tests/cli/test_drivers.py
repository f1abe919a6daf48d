"""``the-loop run``, ``check`` and ``graph force`` on a local checkout (file state)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from click.testing import CliRunner

from graph.compile import parse_graph
from the_loop.cli import main
from the_loop.graphs import default_graph_path
from the_loop.stores import FileStateStore, seal_of

REF = "github:acme/widgets#7"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"
DESIGN = "# D\n\n## Overview\n\nx\n\n## Security design\n\ny\n"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Alice, github: alice}\n"


def cli(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "specs/7").mkdir(parents=True)
    (tmp_path / ".the-loop").mkdir()
    (tmp_path / ".the-loop/collaborators.yaml").write_text(COLLABORATORS)
    (tmp_path / "specs/7/requirements.md").write_text(REQUIREMENTS)
    return tmp_path


def state_file(repo):
    return FileStateStore(repo / ".the-loop/state").state_path(REF)


def test_run_advances_until_a_gate_waits(checkout):
    out = cli("run", "--work-item", REF, "--repo", str(checkout), "--json")
    doc = json.loads(out.output)
    assert out.exit_code == 0
    assert (doc["schemaVersion"], doc["action"], doc["ok"]) == (1, "run", True)
    assert doc["status"] == "waiting" and doc["node"] == "requirements-approval"
    assert doc["moves"] == [{"from": "requirements", "to": "requirements-approval",
                             "on": "pass"}]


def test_run_exits_non_zero_when_blocked(tmp_path):
    out = cli("run", "--work-item", "local:thing", "--repo", str(tmp_path))
    assert out.exit_code == 1 and "specs/thing/requirements.md does not exist" in out.output


def test_check_exits_non_zero_while_a_gate_is_unmet_and_never_advances(checkout):
    cli("run", "--work-item", REF, "--repo", str(checkout))
    before = state_file(checkout).read_text()
    out = cli("check", "--work-item", REF, "--repo", str(checkout), "--json")
    doc = json.loads(out.output)
    assert out.exit_code == 1 and doc["ok"] is False and doc["status"] == "unmet"
    assert any("gate requirements-approval is unmet" in p for p in doc["problems"])
    assert state_file(checkout).read_text() == before


def test_recompute_ignores_tampered_state(checkout):
    """Given a work item whose graph-state claims tasks, reached by editing the state file
    When CI runs `the-loop check --recompute`
    Then it re-derives the verdicts from the artifacts, reports requirements-approval
      unmet (no recorded approval), and fails."""
    cli("run", "--work-item", REF, "--repo", str(checkout))
    path = state_file(checkout)
    tampered = json.loads(path.read_text())
    tampered.update(current_node="tasks", status="waiting",
                    outcomes={"requirements": "pass", "requirements-approval": "approved",
                              "design": "pass", "design-approval": "approved"})
    tampered.pop("seal")
    tampered["seal"] = seal_of(tampered, None)  # re-sealed: the unkeyed seal is no signature
    path.write_text(json.dumps(tampered))
    (checkout / "specs/7/design.md").write_text(DESIGN)
    trusting = cli("check", "--work-item", REF, "--repo", str(checkout), "--json")
    assert json.loads(trusting.output)["node"] == "tasks"
    out = cli("check", "--work-item", REF, "--repo", str(checkout), "--recompute", "--json")
    doc = json.loads(out.output)
    assert out.exit_code == 1
    verdicts = {v["node"]: v["verdict"] for v in doc["verdicts"]}
    assert verdicts == {"requirements": "met", "requirements-approval": "unmet"}
    assert any("state says tasks but the artifacts stop at requirements-approval" in p
               for p in doc["problems"])


def test_recompute_passes_when_the_artifacts_record_the_approvals(checkout):
    cli("run", "--work-item", REF, "--repo", str(checkout))
    for name, text in (("requirements.md", REQUIREMENTS), ("design.md", DESIGN)):
        (checkout / "specs/7" / name).write_text(
            text + "\n## Review comments\n\n### 2026-11-30 — @alice — approved\n")
    out = cli("check", "--work-item", REF, "--repo", str(checkout), "--recompute", "--json")
    verdicts = {v["node"]: v["verdict"] for v in json.loads(out.output)["verdicts"]}
    assert verdicts["requirements-approval"] == "met" and verdicts["design-approval"] == "met"
    assert verdicts["tasks"] == "unmet"  # tasks.md does not exist yet


def test_force_is_recorded_and_recompute_still_reports_the_bypassed_gate(checkout):
    cli("run", "--work-item", REF, "--repo", str(checkout))
    refused = cli("graph", "force", "--work-item", REF, "--to", "nowhere", "--reason", "x",
                  "--repo", str(checkout))
    assert refused.exit_code != 0 and "valid ids: requirements" in refused.output
    missing = cli("graph", "force", "--work-item", REF, "--to", "design",
                  "--repo", str(checkout))
    assert missing.exit_code != 0 and "--reason" in missing.output
    out = cli("graph", "force", "--work-item", REF, "--to", "design", "--reason",
              "reviewed offline", "--repo", str(checkout), "--json")
    doc = json.loads(out.output)
    assert out.exit_code == 0 and doc["status"] == "forced"
    assert doc["bypassed"] == ["requirements-approval"]
    (checkout / "specs/7/design.md").write_text(DESIGN)
    check = cli("check", "--work-item", REF, "--repo", str(checkout), "--recompute", "--json")
    assert check.exit_code == 1
    assert {v["node"]: v["verdict"] for v in json.loads(check.output)["verdicts"]}[
        "requirements-approval"] == "unmet"
    plain = cli("check", "--work-item", REF, "--repo", str(checkout), "--json")
    assert any("bypassed by a forced move" in p for p in json.loads(plain.output)["problems"])


def test_export_overlay_is_deterministic_and_marks_the_path(checkout):
    cli("run", "--work-item", REF, "--repo", str(checkout))
    args = ["graph", "export", "--work-item", REF, "--repo", str(checkout)]
    first = cli(*args, "--format", "json").output
    assert first == cli(*args, "--format", "json").output
    overlay = json.loads(first)["overlay"]
    assert overlay["current"] == "requirements-approval"
    assert overlay["visited"] == ["requirements", "requirements-approval"]
    mermaid = cli(*args, "--format", "mermaid").output
    assert "class n_requirements_approval current" in mermaid
    assert mermaid == cli(*args, "--format", "mermaid").output


def test_default_graph_validates_against_the_shipped_json_schema():
    schema = json.loads((default_graph_path().parent / "graph.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    doc = parse_graph(default_graph_path().read_text(), "pdlc.yaml")
    jsonschema.validate(doc, schema)
    doc["nodes"][0]["colour"] = "red"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)


def test_malformed_ref_is_a_clear_error(tmp_path):
    out = cli("run", "--work-item", "not a ref!", "--repo", str(tmp_path))
    assert out.exit_code != 0 and "github:OWNER/REPO#N" in out.output


def test_recompute_reports_an_approval_whose_artifact_changed_since_as_unmet(checkout):
    """Given requirements.md recording an approval bound to its reviewed content
    When someone changes the requirements afterwards (not a review-record entry)
    Then `the-loop check --recompute` reports requirements-approval unmet."""
    from the_loop.hooks.review import append_entry, fingerprint

    cli("run", "--work-item", REF, "--repo", str(checkout))
    path = checkout / "specs/7/requirements.md"
    path.write_text(append_entry(REQUIREMENTS, date="2026-11-30", login="alice",
                                 outcome="approved", reviewed=fingerprint(REQUIREMENTS)))
    args = ("check", "--work-item", REF, "--repo", str(checkout), "--recompute", "--json")
    verdicts = {v["node"]: v["verdict"] for v in json.loads(cli(*args).output)["verdicts"]}
    assert verdicts["requirements-approval"] == "met"
    path.write_text(path.read_text().replace("\ny\n", "\ny, and more\n", 1))
    out = cli(*args)
    doc = json.loads(out.output)
    assert out.exit_code == 1
    verdicts = {v["node"]: v["verdict"] for v in doc["verdicts"]}
    assert verdicts["requirements-approval"] == "unmet"
    assert any("the artifact changed after it" in p for p in doc["problems"])
