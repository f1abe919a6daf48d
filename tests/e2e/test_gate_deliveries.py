"""Gate decisions end to end (issue 19): gunicorn and a worker as real processes, the
real Redis and the loopback fake GitHub, driven by signed deliveries. Each test asserts
the transitions, the decisions and the writes GitHub received (no write is one too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.inbox.keys import Keys
from graph.markers import find_effect
from graph.state import Past
from tests.conftest import act_as, gh_label, load_payload
from tests.e2e.test_end_to_end import (
    COLLABORATORS,
    REPO,
    REQUIREMENTS,
    comment_payload,
    enrol_payload,
    post,
    running_stack,
    wait_until,
    with_install,
)

pytestmark = pytest.mark.e2e

REF1, REF2 = f"github:{REPO}#1", f"github:{REPO}#2"
DESIGN = "# D\n\n## Overview\n\nx\n\n## Security design\n\ny\n"
TWO = COLLABORATORS + "    - {name: Octo, github: octocat}\n"
#: No write pacing: these tests count writes, not their spacing.
UNPACED = {"THE_LOOP_GITHUB_WRITES_PER_MINUTE": "6000",
           "THE_LOOP_GITHUB_WRITES_PER_HOUR": "60000"}


@pytest.fixture
def stack(redis_ns, tmp_path):
    with running_stack(redis_ns, tmp_path, extra_env=UNPACED) as parts:
        yield parts + (redis_ns,)


def handled(redis_ns, delivery):
    """Wait until the worker finished ``delivery`` (its record is deleted then)."""
    keys = Keys(redis_ns.prefix, redis_ns.queue_name)
    wait_until(lambda: not redis_ns.client.exists(keys.delivery(delivery)),
               what=f"delivery {delivery} handled")


def send(url, redis_ns, event, payload, delivery=None):
    r, delivery = post(url, event, payload, delivery)
    assert r.status_code == 202, r.text
    handled(redis_ns, delivery)
    return delivery


def marks(fake, number):
    return [find_effect(c["body"]) or "" for c in fake.comments(REPO, number)]


def status_body(fake, number):
    return next(c["body"] for c in fake.comments(REPO, number)
                if (find_effect(c["body"]) or "").endswith("/status"))


def approve(login="Codertocat", cid=4242, body="/approve"):
    p = comment_payload(login, body)
    p["comment"]["id"] = cid
    return p


def test_the_same_comment_under_two_delivery_ids_decides_once(stack):
    """Given design.md present, so one approval takes the issue to design-approval
    When Codertocat's /approve arrives, then the same comment under a second delivery id
      (a repository webhook and the App both subscribed), then its author edits it
    Then requirements-approval is decided once, design-approval keeps waiting, and the
      second delivery and the edit make no write at all."""
    fake, url, env, store, logs, ns = stack
    fake.add_file(REPO, "specs/1/design.md", DESIGN)
    send(url, ns, "issues", enrol_payload())
    send(url, ns, "issue_comment", approve())
    wait_until(lambda: store.load(REF1).current_node == "design-approval"
               and store.load(REF1).status == "waiting", what="design-approval waiting")
    before = fake.actions
    send(url, ns, "issue_comment", approve())  # a new delivery id, the same comment
    edited = with_install(load_payload("issue_comment", "edited"))
    edited["issue"]["labels"].append(gh_label("the-loop"))
    edited["comment"].update(id=4242, body="/approve\n\nthanks")
    act_as(edited, "Codertocat")
    send(url, ns, "issue_comment", edited)
    state = store.load(REF1)
    assert state.current_node == "design-approval" and state.status == "waiting"
    assert [(d["node"], d["sources"]) for d in Past.read(store, REF1).decisions] == [
        ("requirements-approval", ["issue_comment:4242"])]
    assert [m for m in marks(fake, 1) if m.endswith("/decision")] == [
        f"{REF1}/requirements-approval/1/decision"]
    assert fake.actions == before


def pull_request(fake, *, draft=False, action="labeled"):
    pr = with_install(load_payload("pull_request", "labeled"))
    pr["label"] = gh_label("the-loop")
    pr["action"] = action
    pr["pull_request"]["labels"].append(gh_label("the-loop"))
    pr["pull_request"]["draft"] = draft
    head = pr["pull_request"]["head"]
    if fake.lookup(REPO) is not None and 2 not in fake.repo(REPO).pulls:
        fake.add_pull(REPO, 2, head_sha=head["sha"], head_ref=head["ref"], draft=draft)
        for ref in (head["sha"], head["ref"]):
            fake.add_file(REPO, "specs/2/requirements.md", REQUIREMENTS, ref=ref)
    return pr


def review(pr, state="approved", action="submitted", rid=5151):
    p = with_install(load_payload("pull_request_review", "submitted"))
    p["action"] = action
    p["review"].update(id=rid, state=state, commit_id=pr["pull_request"]["head"]["sha"])
    p["pull_request"]["labels"].append(gh_label("the-loop"))
    p["pull_request"]["draft"] = pr["pull_request"]["draft"]
    act_as(p, "Codertocat")
    return p


def test_an_approval_then_dismissed_reopens_the_gate(stack):
    """Given pull request #2 approved by Codertocat's review (now at design)
    When the review is dismissed
    Then the work item is back at requirements-approval, waiting, loudly: a gate.reopened
      event, the status comment says why, the check run is updated and the review is
      requested again (a new visit)."""
    fake, url, env, store, logs, ns = stack
    pr = pull_request(fake)
    send(url, ns, "pull_request", pr)
    send(url, ns, "pull_request_review", review(pr))
    assert store.load(REF2).current_node == "design"
    before = fake.actions
    send(url, ns, "pull_request_review", review(pr, state="dismissed", action="dismissed"))
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.status == "waiting"
    assert [e.data["code"] for e in store.events(REF2) if e.type == "gate.reopened"] == [
        "review-dismissed"]
    assert "that approved gate `requirements-approval`" in status_body(fake, 2)
    new = fake.actions[len(before):]
    assert any(":update-check-run:" in a for a in new)
    assert f"{REF2}/requirements-approval/2/request-review" in marks(fake, 2)


def test_an_approval_then_a_push_changing_the_artifact_asks_again(stack):
    """Given pull request #2 approved at requirements-approval (now at design)
    When a push changes requirements.md (not a review-record entry)
    Then the work item returns to requirements-approval for a new approval."""
    fake, url, env, store, logs, ns = stack
    pr = pull_request(fake)
    send(url, ns, "pull_request", pr)
    send(url, ns, "pull_request_review", review(pr))
    state = store.load(REF2)
    assert state.current_node == "design"
    assert Past.read(store, REF2).decisions[0]["artifacts"]["specs/2/requirements.md"]["blob_sha"]
    new_head = "b" * 40
    fake.add_file(REPO, "specs/2/requirements.md", REQUIREMENTS.replace("y\n", "z\n"),
                  ref=new_head)
    fake.repo(REPO).pulls[2]["head_sha"] = new_head  # the push moved the head
    push = {k: v for k, v in pr.items() if k != "label"}
    push.update(action="synchronize", before=pr["pull_request"]["head"]["sha"], after=new_head)
    push["pull_request"] = {**pr["pull_request"],
                            "head": {**pr["pull_request"]["head"], "sha": new_head}}
    send(url, ns, "pull_request", push)
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.status == "waiting"
    assert [e.data["via"] for e in store.events(REF2) if e.type == "gate.reopened"] == [
        "reapproval"]


def test_two_approvers_are_required(redis_ns, tmp_path):
    """Given a graph whose requirements-approval asks for approvals: 2
    When Codertocat approves twice, then octocat approves
    Then the gate waits after Codertocat (one person counts once) and passes after
      octocat, with both recorded as its approvers."""
    graph = tmp_path / "two.yaml"
    text = (Path(__file__).parents[2] / "graph" / "pdlc.yaml").read_text()
    graph.write_text(text.replace("  - id: requirements-approval\n",
                                  "  - id: requirements-approval\n    approvals: 2\n", 1))
    with running_stack(redis_ns, tmp_path, collaborators=TWO,
                       extra_env={**UNPACED, "THE_LOOP_GRAPH": str(graph)}) as parts:
        fake, url, env, store, logs = parts
        send(url, redis_ns, "issues", enrol_payload())
        send(url, redis_ns, "issue_comment", approve(cid=1))
        send(url, redis_ns, "issue_comment", approve(cid=2))
        state = store.load(REF1)
        assert state.current_node == "requirements-approval"
        assert Past.read(store, REF1).decisions == []
        assert "1 of 2 approvals so far" in status_body(fake, 1)
        send(url, redis_ns, "issue_comment", approve("octocat", cid=3))
        state = store.load(REF1)
        assert state.current_node == "design"
        assert sorted(Past.read(store, REF1).decisions[0]["approvers"]) == ["Codertocat", "octocat"]


def test_a_draft_pull_request_waits_is_asked_when_ready_and_withdrawn_as_draft(stack):
    """Given pull request #2 labelled the-loop while a draft
    When it is marked ready for review, then converted to a draft again
    Then nobody is asked while it is a draft, the review is requested when it is ready,
      and converting it back marks that request withdrawn in place (the gate waits)."""
    fake, url, env, store, logs, ns = stack
    send(url, ns, "pull_request", pull_request(fake, draft=True))
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.status == "waiting"
    assert not [m for m in marks(fake, 2) if m.endswith("/request-review")]
    fake.repo(REPO).pulls[2]["draft"] = False
    send(url, ns, "pull_request", pull_request(fake, action="ready_for_review"))
    request_effect = f"{REF2}/requirements-approval/1/request-review"
    assert request_effect in marks(fake, 2)
    fake.repo(REPO).pulls[2]["draft"] = True
    before = fake.actions
    send(url, ns, "pull_request", pull_request(fake, draft=True, action="converted_to_draft"))
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.status == "waiting"
    [request] = [c for c in fake.comments(REPO, 2) if find_effect(c["body"]) == request_effect]
    assert "**Withdrawn**" in request["body"]
    new = fake.actions[len(before):]
    assert f"{REPO}:update-comment:{request['id']}" in new
    assert not [a for a in new if ":comment:" in a and "request-review" in a]
