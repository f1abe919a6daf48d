"""A gate decision counts once, for what was reviewed (issue 19), through the worker on
the in-process fake GitHub: deliveries of one source, edits, deletions, reviews and
their dismissal, ``approvals: N``, approvals bound to the artifacts, drafts, and
reactions only on command lines. Every test asserts the transitions, the decisions and
the writes the fake received (no write is an assertion too)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import SHARED_INBOX
from foundation.settings import WorkerSettings
from graph.markers import find_effect
from graph.ports import Transport
from graph.state import Past
from tests.conftest import act_as, gh_label, load_payload
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.events import parse_delivery
from workers.state import RedisStateStore

REPO = "Codertocat/Hello-World"
REF1, REF2 = f"github:{REPO}#1", f"github:{REPO}#2"
COLLABORATORS = ("version: 1\nroles:\n  approver:\n"
                 "    - {name: Coder, github: Codertocat, slack: U1}\n"
                 "    - {name: Octo, github: octocat, slack: U2}\n")
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"
DESIGN = "# D\n\n## Overview\n\nx\n\n## Security design\n\ny\n"
REACTIONS = (("enabled", True), ("started", "eyes"), ("completed", "hooray"),
             ("error", "confused"))


class RecordingSlack(Transport):
    """A Slack that records each direct message (``channel``)."""

    name = "slack"
    transport = "test"
    operations = frozenset({"post-message"})

    def __init__(self) -> None:
        self.sent: list[str] = []

    def post_message(self, *, channel: str, text: str,
                     blocks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        self.sent.append(channel)
        return {"ok": True, "ts": str(len(self.sent))}


def two_approvers_graph(tmp_path: Path) -> Path:
    text = (Path(__file__).parents[2] / "graph" / "pdlc.yaml").read_text()
    text = text.replace("  - id: requirements-approval\n", "  - id: requirements-approval\n"
                        "    approvals: 2\n", 1)
    path = tmp_path / "two-approvers.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def make(redis_ns, tmp_path):
    built = []

    def build(*, harness: str | None = None, graph: Path | None = None):
        built.append(1)  # each build its own keys (the namespace's token stays in them)
        prefix = f"{redis_ns.prefix}-{len(built)}"
        gh = FakeGitHub()
        gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
        if harness:
            gh.add_file(REPO, ".the-loop/harness-config.yaml", harness, ref="master")
        gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
        slack = RecordingSlack()
        settings = WorkerSettings(prefix=prefix, queue=redis_ns.queue_name,
                                  reactions=REACTIONS)
        processor = build_processor(settings, redis_ns.client, load_graph(graph),
                                    lambda _i: gh, integrations={"slack": slack})
        queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                              prefix=prefix)

        def deliver(event, payload, delivery=None):
            body = json.dumps(payload).encode()
            parsed = parse_delivery({
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": delivery or f"{redis_ns.token}-{uuid.uuid4()}",
                "Content-Type": "application/json"}, body)
            assert queue.enqueue(parsed)
            return processor.drain(parsed.work_item or SHARED_INBOX)

        return gh, slack, RedisStateStore(redis_ns.client, prefix), deliver

    return build


def labelled(p: dict[str, Any]) -> dict[str, Any]:
    item = p.get("issue") or p.get("pull_request")
    if item is not None:
        item.setdefault("labels", []).append(gh_label("the-loop"))
    return p


def enrol(deliver) -> None:
    p = labelled(load_payload("issues", "labeled"))
    p["label"] = gh_label("the-loop")
    deliver("issues", p)


def comment(body, login="Codertocat", *, cid=None, action="created"):
    p = labelled(load_payload("issue_comment", action))
    act_as(p, login)
    p["comment"]["body"] = body
    if cid is not None:
        p["comment"]["id"] = cid
    return p


def marks(gh, number=1):
    return [find_effect(c["body"]) or "" for c in gh.comments(REPO, number)]


def status_body(gh, number=1):
    [status] = [c["body"] for c in gh.comments(REPO, number)
                if (find_effect(c["body"]) or "").endswith("/status")]
    return status


def writes_after(gh, before):
    return gh.actions[len(before):]


def at_design_approval(gh, deliver, store):
    """Enrol #1 with design.md already there: one approval takes it through design to
    design-approval, which then waits."""
    gh.add_file(REPO, "specs/1/design.md", DESIGN, ref="master")
    enrol(deliver)
    deliver("issue_comment", comment("/approve", cid=501))
    state = store.load(REF1)
    assert state.current_node == "design-approval" and state.status == "waiting"
    return state


# -- 1. one source decides at most one gate visit ---------------------------------------


def test_the_same_comment_under_two_delivery_ids_decides_one_gate_once(make):
    gh, slack, store, deliver = make()
    at_design_approval(gh, deliver, store)
    before = gh.actions
    deliver("issue_comment", comment("/approve", cid=501))  # GitHub's second subscription
    state = store.load(REF1)
    assert state.current_node == "design-approval" and state.status == "waiting"
    assert [(d["node"], d["sources"]) for d in Past.read(store, REF1).decisions] == [
        ("requirements-approval", ["issue_comment:501"])]
    assert [m for m in marks(gh) if m.endswith("/decision")] == [
        f"{REF1}/requirements-approval/1/decision"]
    assert writes_after(gh, before) == []  # no reaction, no comment, no label


def test_a_comment_created_before_the_visit_began_never_decides_it(make):
    gh, slack, store, deliver = make()
    at_design_approval(gh, deliver, store)
    early = comment("/approve", cid=777)
    early["comment"]["created_at"] = "2019-05-15T15:20:21Z"
    before = gh.actions
    deliver("issue_comment", early)
    assert store.load(REF1).current_node == "design-approval"
    assert len(Past.read(store, REF1).decisions) == 1 and writes_after(gh, before) == []


# -- 2. edits and deletions ---------------------------------------------------------------


def test_editing_an_old_approve_while_the_next_gate_waits_decides_nothing(make):
    for harness in (None, "version: 1\ngates: {actOnEdits: true}\n"):
        gh, slack, store, deliver = make(harness=harness)
        at_design_approval(gh, deliver, store)
        before = gh.actions
        edited = comment("/approve\nthanks", cid=501, action="edited")
        deliver("issue_comment", edited)
        state = store.load(REF1)
        assert state.current_node == "design-approval"
        assert len(Past.read(store, REF1).decisions) == 1
        assert writes_after(gh, before) == []


def test_a_typo_fixed_by_its_author_counts_only_with_act_on_edits(make):
    gh, slack, store, deliver = make()
    enrol(deliver)
    deliver("issue_comment", comment("/aprove", cid=601))
    fixed = comment("/approve", cid=601, action="edited")
    before = gh.actions
    deliver("issue_comment", fixed)
    assert store.load(REF1).current_node == "requirements-approval"
    assert not [a for a in writes_after(gh, before) if ":add-reaction:" in a]

    gh, slack, store, deliver = make(harness="version: 1\ngates: {actOnEdits: true}\n")
    enrol(deliver)
    deliver("issue_comment", comment("/aprove", cid=601))
    # Made during this visit (one made before it began, a second earlier, never counts).
    fixed = comment("/approve", cid=601, action="edited")
    deliver("issue_comment", fixed)
    state = store.load(REF1)
    assert state.current_node == "design"
    assert [d["sources"] for d in Past.read(store, REF1).decisions] == [["issue_comment:601"]]
    deliver("issue_comment", fixed)  # the same edit again: once only
    assert len(Past.read(store, REF1).decisions) == 1


def test_a_deleted_comment_that_decided_nothing_is_ignored_silently(make):
    gh, slack, store, deliver = make()
    enrol(deliver)
    deliver("issue_comment", comment("looks good so far", cid=701))
    before, logged = gh.actions, len(store.events(REF1))
    deleted = labelled(load_payload("issue_comment", "deleted"))
    deleted["comment"]["id"] = 701
    handled = deliver("issue_comment", deleted)
    assert handled[-1].detail == "it decided nothing: ignored"
    assert writes_after(gh, before) == [] and len(store.events(REF1)) == logged


# -- 3. reviews ---------------------------------------------------------------------------


def pull_request(gh, deliver, store, *, draft=False, action="labeled"):
    pr = labelled(load_payload("pull_request", "labeled"))
    pr["label"] = gh_label("the-loop")
    pr["action"] = action
    if action not in ("labeled", "unlabeled"):
        del pr["label"]  # only a label change names one (GitHub's payload schema)
    pr["pull_request"]["draft"] = draft
    head = pr["pull_request"]["head"]
    if not gh.repo(REPO).pulls.get(2):
        gh.add_pull(REPO, 2, head_sha=head["sha"], head_ref=head["ref"], draft=draft)
        for ref in (head["sha"], head["ref"]):
            gh.add_file(REPO, "specs/2/requirements.md", REQUIREMENTS, ref=ref)
    deliver("pull_request", pr)
    return pr


def review(pr, state="approved", login="Codertocat", rid=801, action="submitted"):
    p = labelled(load_payload("pull_request_review", "submitted"))
    p["action"] = action
    p["pull_request"]["draft"] = pr["pull_request"]["draft"]
    p["review"].update(id=rid, state=state, commit_id=pr["pull_request"]["head"]["sha"])
    p["pull_request"]["head"]["sha"] = pr["pull_request"]["head"]["sha"]
    act_as(p, login)
    return p


def test_a_dismissed_approval_reopens_its_gate_loudly(make):
    gh, slack, store, deliver = make()
    pr = pull_request(gh, deliver, store)
    deliver("pull_request_review", review(pr))
    assert store.load(REF2).current_node == "design"
    before = gh.actions
    dismissed = review(pr, state="dismissed", action="dismissed")
    deliver("pull_request_review", dismissed)
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.status == "waiting"
    assert state.visits["requirements-approval"] == 2
    assert Past.read(store, REF2).decisions[0]["invalidated"]["via"] == "reopened"
    reopened = [e for e in store.events(REF2) if e.type == "gate.reopened"]
    assert reopened and reopened[-1].data["code"] == "review-dismissed"
    assert "that approved gate `requirements-approval`" in status_body(gh, 2)
    new = writes_after(gh, before)
    assert f"{REPO}#2:add-label:phase:requirements-approval" in new
    assert any(":update-check-run:" in a or ":create-check-run:" in a for a in new)
    assert f"{REF2}/requirements-approval/2/request-review" in marks(gh, 2)
    assert not [m for m in marks(gh, 2) if "/withdrawn/" in m]
    # Dismissed again (a second delivery): nothing more.
    before = gh.actions
    deliver("pull_request_review", dismissed)
    assert store.load(REF2).visits["requirements-approval"] == 2
    assert writes_after(gh, before) == []


def test_a_later_changes_requested_by_the_approver_reopens_the_gate(make):
    gh, slack, store, deliver = make()
    pr = pull_request(gh, deliver, store)
    deliver("pull_request_review", review(pr))
    assert store.load(REF2).current_node == "design"
    deliver("pull_request_review", review(pr, state="changes_requested", rid=802))
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.status == "waiting"
    assert [e.data["code"] for e in store.events(REF2) if e.type == "gate.reopened"] == [
        "changes-requested"]


def test_a_dismissal_after_a_later_gate_passed_is_recorded_and_announced(make):
    gh, slack, store, deliver = make()
    pr = pull_request(gh, deliver, store)
    head = pr["pull_request"]["head"]
    for ref in (head["sha"], head["ref"]):
        gh.add_file(REPO, "specs/2/design.md", DESIGN, ref=ref)
    deliver("pull_request_review", review(pr))
    # The push of the-loop's own review record (the branch's new head) lets design pass.
    for path in ("specs/2/requirements.md", "specs/2/design.md"):
        gh.add_file(REPO, path, gh.get_file(REPO, path, ref=head["ref"])["text"],
                    ref="d" * 40)
    gh.repo(REPO).pulls[2]["head_sha"] = "d" * 40
    deliver("pull_request", synchronize(pr, "d" * 40))
    assert store.load(REF2).current_node == "design-approval"
    deliver("issue_comment", {**comment("/approve", cid=901),
                              "issue": {**comment("x")["issue"], "number": 2,
                                        "pull_request": {"url": "x"}}})
    assert store.load(REF2).current_node == "tasks"
    deliver("pull_request_review", review(pr, state="dismissed", action="dismissed"))
    state = store.load(REF2)
    assert state.current_node == "tasks"  # a later gate passed: the item stays
    assert [e.data.get("retracted") for e in store.events(REF2) if e.type == "note"] == [True]
    assert f"{REF2}/withdrawn/review:801" in marks(gh, 2)
    assert "the work item has passed a later gate since" in status_body(gh, 2)


def test_two_approvers_are_needed_and_changes_requested_wins(make, tmp_path):
    gh, slack, store, deliver = make(graph=two_approvers_graph(tmp_path))
    enrol(deliver)
    deliver("issue_comment", comment("/approve", cid=1001))
    deliver("issue_comment", comment("/approve", cid=1002))  # the same person again
    state = store.load(REF1)
    assert state.current_node == "requirements-approval" and Past.read(store, REF1).decisions == []
    assert "1 of 2 approvals so far (@Codertocat)" in status_body(gh)
    deliver("issue_comment", comment("/approve", login="octocat", cid=1003))
    state = store.load(REF1)
    assert state.current_node == "design"
    [decision] = Past.read(store, REF1).decisions
    assert sorted(decision["approvers"]) == ["Codertocat", "octocat"]
    assert sorted(decision["sources"]) == ["issue_comment:1002", "issue_comment:1003"]

    gh, slack, store, deliver = make(graph=two_approvers_graph(tmp_path))
    enrol(deliver)
    deliver("issue_comment", comment("/approve", cid=1101))
    deliver("issue_comment", comment("/request-changes", login="octocat", cid=1102))
    state = store.load(REF1)
    assert Past.read(store, REF1).decisions[-1]["outcome"] == "changes-requested"
    assert Past.read(store, REF1).decisions[-1]["sources"] == ["issue_comment:1102"]
    # back to requirements, which waits for the rejected artifact to be repaired (it does
    # not pass again unchanged); the gate is not asked again meanwhile
    assert [h["node"] for h in Past.read(store, REF1).history][-2:] == [
        "requirements-approval", "requirements"]
    assert state.current_node == "requirements" and state.status == "waiting"
    assert state.visits["requirements-approval"] == 1


# -- 4. approvals bound to what was approved ----------------------------------------------


def synchronize(pr, sha, gh=None):
    # As GitHub sends it: the head before and after the push, no label; ``gh``: the
    # push moved the fake's pull request head to ``sha`` too.
    if gh is not None:
        gh.repo(REPO).pulls[2]["head_sha"] = sha
    p = {k: v for k, v in pr.items() if k != "label"}
    p.update(action="synchronize", before=pr["pull_request"]["head"]["sha"], after=sha)
    p["pull_request"] = {**pr["pull_request"], "head": {**pr["pull_request"]["head"],
                                                        "sha": sha}}
    return p


def test_an_approved_artifact_changed_by_a_push_returns_the_item_to_its_gate(make):
    gh, slack, store, deliver = make()
    pr = pull_request(gh, deliver, store)
    deliver("pull_request_review", review(pr))
    state = store.load(REF2)
    assert state.current_node == "design"
    [decision] = Past.read(store, REF2).decisions
    bound = decision["artifacts"]["specs/2/requirements.md"]
    assert decision["head_sha"] == pr["pull_request"]["head"]["sha"]
    # Read after the review record was committed (the rest of the delivery reads the new
    # head); the fingerprint, not the blob, ignores that entry.
    assert bound["blob_sha"] == gh.get_file(REPO, "specs/2/requirements.md",
                                            ref=pr["pull_request"]["head"]["ref"])["sha"]
    # The-loop's own review entry on the branch changes nothing that counts.
    recorded = gh.get_file(REPO, "specs/2/requirements.md",
                           ref=pr["pull_request"]["head"]["ref"])["text"]
    gh.add_file(REPO, "specs/2/requirements.md", recorded, ref="a" * 40)
    deliver("pull_request", synchronize(pr, "a" * 40, gh))
    assert store.load(REF2).current_node == "design"
    # Anyone else's change to the approved artifact asks for approval again.
    gh.add_file(REPO, "specs/2/requirements.md", recorded.replace("\ny\n", "\nz\n"),
                ref="b" * 40)
    deliver("pull_request", synchronize(pr, "b" * 40, gh))
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.status == "waiting"
    [reopened] = [e for e in store.events(REF2) if e.type == "gate.reopened"]
    assert reopened.data["via"] == "reapproval"
    assert reopened.data["paths"] == ["specs/2/requirements.md"]
    assert "changed after gate `requirements-approval` approved it" in status_body(gh, 2)


def test_a_push_delivered_after_later_pushes_is_judged_at_the_current_head(make):
    # A push's delivery waits behind the work item's other deliveries: processed after
    # later pushes, its payload's head is an old commit (here one where the approved
    # artifact is gone). The approval is judged at the pull request's current head.
    gh, slack, store, deliver = make()
    pr = pull_request(gh, deliver, store)
    deliver("pull_request_review", review(pr))
    assert store.load(REF2).current_node == "design"
    recorded = gh.get_file(REPO, "specs/2/requirements.md",
                           ref=pr["pull_request"]["head"]["ref"])["text"]
    gh.add_file(REPO, "specs/2/requirements.md", recorded, ref="e" * 40)
    gh.repo(REPO).pulls[2]["head_sha"] = "e" * 40  # the branch's head now
    stale = synchronize(pr, "f" * 40)  # an older push: no requirements.md at "f" * 40
    deliver("pull_request", stale)
    state = store.load(REF2)
    assert state.current_node == "design" and state.status != "waiting"
    assert not [e for e in store.events(REF2) if e.type == "gate.reopened"]
    # The same stale delivery when the current head changed the artifact: back at the gate.
    gh.add_file(REPO, "specs/2/requirements.md", recorded.replace("\ny\n", "\nz\n"),
                ref="e" * 40)
    deliver("pull_request", {**stale, "after": "f" * 40 + "x"})
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.status == "waiting"


def test_reapprove_on_change_false_keeps_the_approval(make):
    gh, slack, store, deliver = make(harness="version: 1\ngates: {reapproveOnChange: false}\n")
    pr = pull_request(gh, deliver, store)
    deliver("pull_request_review", review(pr))
    gh.add_file(REPO, "specs/2/requirements.md", REQUIREMENTS + "\nmore\n", ref="c" * 40)
    deliver("pull_request", synchronize(pr, "c" * 40))
    assert store.load(REF2).current_node == "design"


# -- 5. drafts ----------------------------------------------------------------------------


def test_a_draft_waits_without_asking_then_ready_and_back_to_draft(make):
    gh, slack, store, deliver = make()
    pr = pull_request(gh, deliver, store, draft=True)
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.status == "waiting"
    assert not [m for m in marks(gh, 2) if m.endswith("/request-review")]
    assert slack.sent == []
    assert "the pull request is a draft" in status_body(gh, 2)
    # A decision while it is a draft counts for nothing.
    deliver("pull_request_review", review(pr))
    assert Past.read(store, REF2).decisions == []

    gh.repo(REPO).pulls[2]["draft"] = False
    pull_request(gh, deliver, store, action="ready_for_review")
    assert f"{REF2}/requirements-approval/1/request-review" in marks(gh, 2)
    assert sorted(slack.sent) == ["U1", "U2"]

    gh.repo(REPO).pulls[2]["draft"] = True
    before = gh.actions
    pull_request(gh, deliver, store, draft=True, action="converted_to_draft")
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.status == "waiting"
    [request] = [c for c in gh.comments(REPO, 2)
                 if find_effect(c["body"]) == f"{REF2}/requirements-approval/1/request-review"]
    assert "**Withdrawn**" in request["body"]  # edited in place, not a new comment
    new = writes_after(gh, before)
    assert f"{REPO}:update-comment:{request['id']}" in new
    assert not [a for a in new if f"{REPO}#2:comment:" in a and a.endswith(str(request["id"]))]
    assert sorted(slack.sent) == ["U1", "U2"]  # nobody notified again

    gh.repo(REPO).pulls[2]["draft"] = False
    pull_request(gh, deliver, store, action="ready_for_review")
    assert f"{REF2}/requirements-approval/2/request-review" in marks(gh, 2)


# -- 6. reactions and writes only for command lines ---------------------------------------


def test_reactions_only_for_a_command_line_of_an_authorized_person(make):
    gh, slack, store, deliver = make()
    enrol(deliver)
    for cid, body in ((1201, "> /approve\nquoting the docs"),
                      (1202, "run `/approve` when ready"),
                      (1203, "```\n/approve\n```"),
                      (1204, "I will /approve later")):
        deliver("issue_comment", comment(body, cid=cid))
    assert not [a for a in gh.actions if "reaction" in a]
    assert store.load(REF1).current_node == "requirements-approval"
    deliver("issue_comment", comment("LGTM\n/approve", cid=1205))
    # It decided in the same delivery: "completed" alone says so (one write, not two).
    assert [a for a in gh.actions if "reaction" in a] == [f"{REPO}:add-reaction:1205:hooray"]


def test_a_command_that_decides_nothing_yet_gets_the_started_reaction(make, tmp_path):
    gh, slack, store, deliver = make(graph=two_approvers_graph(tmp_path))
    enrol(deliver)
    deliver("issue_comment", comment("/approve", cid=1211))  # 1 of 2 approvals
    assert store.load(REF1).current_node == "requirements-approval"
    assert [a for a in gh.actions if "reaction" in a] == [f"{REPO}:add-reaction:1211:eyes"]
    deliver("issue_comment", comment("/approve", login="octocat", cid=1212))  # decides
    assert store.load(REF1).current_node == "design"
    assert [a for a in gh.actions if "reaction" in a] == [
        f"{REPO}:add-reaction:1211:eyes", f"{REPO}:add-reaction:1212:hooray"]


def test_a_review_comment_gets_its_reaction_at_the_review_comment_endpoint(make):
    gh, slack, store, deliver = make()
    pr = pull_request(gh, deliver, store)
    p = labelled(load_payload("pull_request_review_comment", "created"))
    p["pull_request"]["number"] = 2
    p["pull_request"]["head"]["sha"] = pr["pull_request"]["head"]["sha"]
    p["repository"] = pr["repository"]
    act_as(p, "Codertocat")
    p["comment"].update(id=1301, body="/approve")
    deliver("pull_request_review_comment", p)
    reactions = [a for a in gh.actions if "reaction" in a]
    assert reactions == [f"{REPO}:add-review-comment-reaction:1301:hooray"]
    assert not [a for a in reactions if ":add-reaction:" in a]
    assert store.load(REF2).current_node == "design"


def test_changes_requested_after_a_later_gate_passed_keeps_what_the_retraction_saved(make):
    # The retraction is noted and announced before the work item advances on the same
    # review: the advance starts from the state those saved (the note stays shown, the
    # notice is posted once, also when the review is delivered again).
    gh, slack, store, deliver = make()
    pr = pull_request(gh, deliver, store)
    head = pr["pull_request"]["head"]
    for ref in (head["sha"], head["ref"]):
        gh.add_file(REPO, "specs/2/design.md", DESIGN, ref=ref)
    deliver("pull_request_review", review(pr))
    for path in ("specs/2/requirements.md", "specs/2/design.md"):
        gh.add_file(REPO, path, gh.get_file(REPO, path, ref=head["ref"])["text"],
                    ref="d" * 40)
    gh.repo(REPO).pulls[2]["head_sha"] = "d" * 40
    deliver("pull_request", synchronize(pr, "d" * 40))
    deliver("issue_comment", {**comment("/approve", login="octocat", cid=901),
                              "issue": {**comment("x")["issue"], "number": 2,
                                        "pull_request": {"url": "x"}}})
    assert store.load(REF2).current_node == "tasks"
    changes = review(pr, state="changes_requested", rid=802)
    deliver("pull_request_review", changes)
    assert [e.data.get("retracted") for e in store.events(REF2) if e.type == "note"] == [True]
    state = store.load(REF2)
    assert state.current_node == "tasks"
    assert [n["code"] for n in state.notes] == ["changes-requested"]
    notice = f"{REF2}/withdrawn/review:802"
    assert marks(gh, 2).count(notice) == 1
    deliver("pull_request_review", changes)
    assert marks(gh, 2).count(notice) == 1
