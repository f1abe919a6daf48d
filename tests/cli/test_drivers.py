"""``the-loop run``, ``check`` and ``graph force`` on a local checkout (file state)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from click.testing import CliRunner

from graph.compile import parse_graph
from tests.conftest import publish_test_key, signed_review
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
    publish_test_key(tmp_path)  # the offline check has the public key only
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
    for name, text, gate in (("requirements.md", REQUIREMENTS, "requirements-approval"),
                             ("design.md", DESIGN, "design-approval")):
        (checkout / "specs/7" / name).write_text(signed_review(
            text, work_item=REF, path=f"specs/7/{name}", gate=gate))
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
    cli("run", "--work-item", REF, "--repo", str(checkout))
    path = checkout / "specs/7/requirements.md"
    path.write_text(signed_review(REQUIREMENTS, work_item=REF, path="specs/7/requirements.md"))
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


# -- signed review records ----------------------------------------------------------------

REQ_PATH = "specs/7/requirements.md"


def recompute(checkout):
    out = cli("check", "--work-item", REF, "--repo", str(checkout), "--recompute", "--json")
    doc = json.loads(out.output)
    verdicts = {v["node"]: v for v in doc["verdicts"]}
    return out.exit_code, verdicts["requirements-approval"], doc["problems"]


@pytest.mark.parametrize("login", ["mallory", "alice"], ids=["non-approver", "approver"])
def test_recompute_does_not_count_a_hand_written_approval(checkout, login):
    """Given requirements.md holding a hand-written `### date — @login — approved` entry
    (by a non-approver, and in an approver's name), with no signature
    When CI runs `the-loop check --recompute`
    Then the gate is unmet, the entry is reported as not counted, and the check fails;
    the report names the line, never the entry's text."""
    cli("run", "--work-item", REF, "--repo", str(checkout))
    (checkout / REQ_PATH).write_text(
        REQUIREMENTS + f"\n## Review comments\n\n### 2026-11-30 — @{login} — approved\n")
    code, gate, problems = recompute(checkout)
    assert code == 1 and gate["verdict"] == "unmet"
    [finding] = gate["findings"]
    assert finding["code"] == "record-unsigned" and "line 13" in finding["text"]
    assert login not in finding["text"]
    assert any("not counted: it carries no signature" in p for p in problems)


def _altered_heading(text):
    return text.replace("— changes requested", "— approved")


def _altered_record(text):
    import base64

    line = next(x for x in text.splitlines() if "the-loop record=" in x)
    encoded = line.split("record=")[1].split(" ")[0]
    body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    forged = base64.urlsafe_b64encode(
        body.replace(b'"changes-requested"', b'"approved"')).rstrip(b"=").decode()
    return _altered_heading(text).replace(encoded, forged)


@pytest.mark.parametrize("alter,problem", [(_altered_heading, "record-altered"),
                                           (_altered_record, "record-bad-signature")],
                         ids=["heading", "signed-record"])
def test_recompute_rejects_an_altered_signed_entry(checkout, alter, problem):
    """Given a signed `changes requested` entry whose outcome was then changed to
    `approved` (in the visible heading only, or in the signed record too)
    When `the-loop check --recompute` runs
    Then the entry does not count (the gate is unmet) and is reported as altered."""
    cli("run", "--work-item", REF, "--repo", str(checkout))
    signed = signed_review(REQUIREMENTS, work_item=REF, path=REQ_PATH,
                           outcome="changes-requested")
    (checkout / REQ_PATH).write_text(alter(signed))
    code, gate, problems = recompute(checkout)
    assert code == 1 and gate["verdict"] == "unmet"
    assert [f["code"] for f in gate["findings"]] == [problem]


def test_recompute_counts_only_a_published_key_and_an_approver_authorized_now(checkout):
    """A signed approval counts; signed by a key not published in .the-loop/keys/, or by
    someone no longer in the approver role, it is reported and does not."""
    from graph.signing import Signer

    cli("run", "--work-item", REF, "--repo", str(checkout))
    (checkout / REQ_PATH).write_text(signed_review(REQUIREMENTS, work_item=REF,
                                                   path=REQ_PATH))
    code, gate, _ = recompute(checkout)
    assert gate["verdict"] == "met" and gate["findings"] == []
    (checkout / REQ_PATH).write_text(signed_review(REQUIREMENTS, work_item=REF,
                                                   path=REQ_PATH, signer=Signer.generate()))
    code, gate, _ = recompute(checkout)
    assert gate["verdict"] == "unmet"
    assert [f["code"] for f in gate["findings"]] == ["record-unknown-key"]
    (checkout / REQ_PATH).write_text(signed_review(REQUIREMENTS, work_item=REF,
                                                   path=REQ_PATH, login="bob"))
    code, gate, _ = recompute(checkout)
    assert gate["verdict"] == "unmet"
    assert [f["code"] for f in gate["findings"]] == ["record-unauthorized"]


def test_recompute_does_not_count_an_entry_copied_from_another_work_item(checkout):
    cli("run", "--work-item", REF, "--repo", str(checkout))
    (checkout / REQ_PATH).write_text(signed_review(
        REQUIREMENTS, work_item="github:acme/widgets#8", path=REQ_PATH))
    code, gate, _ = recompute(checkout)
    assert code == 1 and [f["code"] for f in gate["findings"]] == ["record-elsewhere"]


def test_decide_signs_the_entry_it_writes_and_recompute_counts_it(checkout, tmp_path,
                                                                 monkeypatch):
    """`the-loop keys generate` makes the key; with THE_LOOP_SIGNING_KEY_FILE set,
    `the-loop decide` writes a signed entry that `check --recompute` (public key only)
    counts. The private key is never printed."""
    key = tmp_path / "keys" / "signing.pem"
    out = cli("keys", "generate", "--out", str(key), "--publish", str(checkout), "--json")
    doc = json.loads(out.output)
    assert out.exit_code == 0 and key.stat().st_mode & 0o777 == 0o600
    assert "PRIVATE" not in out.output and doc["key_id"].startswith("ed25519-")
    assert "BEGIN PUBLIC KEY" in (checkout / ".the-loop/keys/records.pub").read_text()
    assert cli("keys", "generate", "--out", str(key)).exit_code != 0  # never overwritten
    monkeypatch.setenv("THE_LOOP_SIGNING_KEY_FILE", str(key))
    cli("run", "--work-item", REF, "--repo", str(checkout))
    decided = cli("decide", REF, "approve", "--by", "alice", "--repo", str(checkout))
    assert "requirements-approval -> design (on approved)" in decided.output
    text = (checkout / REQ_PATH).read_text()
    assert "— @alice — approved" in text and "the-loop record=" in text
    monkeypatch.delenv("THE_LOOP_SIGNING_KEY_FILE")
    code, gate, problems = recompute(checkout)
    assert gate["verdict"] == "met" and gate["findings"] == []
