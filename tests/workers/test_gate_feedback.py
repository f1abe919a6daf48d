"""Gate feedback on real fixture payloads through the worker: repository config from the
default branch, reactions, decision comments, edit alarms, stale reviews, withdrawals and
phase-label drift."""

from __future__ import annotations

import json
import uuid

import pytest

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import SHARED_INBOX
from foundation.settings import WorkerSettings
from graph.markers import find_effect
from graph.state import Past
from tests.conftest import act_as, gh_label, load_payload
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.events import parse_delivery
from workers.state import RedisStateStore

REPO = "Codertocat/Hello-World"
REF1, REF2 = f"github:{REPO}#1", f"github:{REPO}#2"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"


@pytest.fixture
def env(redis_ns):
    gh = FakeGitHub()
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)

    def deliver(event, payload):
        body = json.dumps(payload).encode()
        delivery = parse_delivery({"X-GitHub-Event": event,
                                   "X-GitHub-Delivery": f"{redis_ns.token}-{uuid.uuid4()}",
                                   "Content-Type": "application/json"}, body)
        assert queue.enqueue(delivery)
        return processor.drain(delivery.work_item or SHARED_INBOX)

    return gh, processor, store, deliver


def fixture(event, name, *, enrol=True):
    p = load_payload(event, name)
    item = p.get("issue") or p.get("pull_request")
    if enrol and item is not None:
        item.setdefault("labels", []).append(gh_label("the-loop"))
    return p


def enrol(deliver):
    p = fixture("issues", "labeled")
    p["label"] = gh_label("the-loop")
    deliver("issues", p)


def comment(body, login="Codertocat", action="created"):
    p = fixture("issue_comment", "created" if action == "created" else action)
    act_as(p, login)
    p["comment"]["body"] = body
    return p


def effects(gh, number=1):
    return [find_effect(c["body"]) or "" for c in gh.comments(REPO, number)]


def test_an_authorized_approval_gets_reactions_and_a_decision_comment(env):
    gh, processor, store, deliver = env
    enrol(deliver)
    deliver("issue_comment", comment("/approve"))
    cid = load_payload("issue_comment", "created")["comment"]["id"]
    # Decided in this delivery: "completed" alone (no "started" before it).
    assert [a for a in gh.actions if ":add-reaction:" in a] == [
        f"{REPO}:add-reaction:{cid}:hooray"]
    [decision] = [c for c in gh.comments(REPO, 1)
                  if (find_effect(c["body"]) or "").endswith("/decision")]
    assert "@Codertocat approved at gate `requirements-approval`" in decision["body"]
    assert store.load(REF1).current_node == "design"


def test_unauthorized_comments_get_no_reaction_and_change_nothing(env):
    gh, processor, store, deliver = env
    enrol(deliver)
    deliver("issue_comment", comment("/approve", login="mallory"))
    assert not [a for a in gh.actions if ":add-reaction:" in a]
    assert store.load(REF1).current_node == "requirements-approval"


def test_an_approval_edited_by_someone_else_never_counts_and_raises_an_alarm(env):
    gh, processor, store, deliver = env
    enrol(deliver)
    edited = fixture("issue_comment", "edited")
    edited["comment"]["body"] = "/approve"
    act_as(edited, "mallory", sender_only=True)
    deliver("issue_comment", edited)
    state = store.load(REF1)
    assert state.current_node == "requirements-approval" and Past.read(store, REF1).decisions == []
    assert "alarm" in [e.type for e in store.events(REF1)]
    assert any("/alarm/" in e for e in effects(gh))
    # The author's own edit decides nothing by default (a new comment does): no reaction.
    act_as(edited, "Codertocat", sender_only=True)
    deliver("issue_comment", edited)
    assert store.load(REF1).current_node == "requirements-approval"
    assert not [a for a in gh.actions if ":add-reaction:" in a]


def test_harness_config_on_the_default_branch_sets_label_and_spec_dir(env):
    gh, processor, store, deliver = env
    gh.add_file(REPO, ".the-loop/harness-config.yaml",
                "version: 1\nenrolment: {label: pdlc}\nspecs: {directory: 'docs/{number}'}\n",
                ref="master")
    p = fixture("issues", "labeled", enrol=False)
    p["label"] = gh_label("the-loop")
    p["issue"]["labels"].append(gh_label("the-loop"))
    handled = deliver("issues", p)
    assert handled[-1].outcome == "ignored" and "'pdlc'" in handled[-1].detail
    p["label"] = gh_label("pdlc")
    p["issue"]["labels"].append(gh_label("pdlc"))
    deliver("issues", p)
    state = store.load(REF1)
    assert "docs/1/requirements.md" in state.parked_reason


def test_a_review_of_an_older_commit_is_stale_and_the_item_says_why(env):
    gh, processor, store, deliver = env
    pr = fixture("pull_request", "labeled")
    pr["label"] = gh_label("the-loop")
    head = pr["pull_request"]["head"]
    for ref in (head["sha"], head["ref"]):
        gh.add_file(REPO, "specs/2/requirements.md", REQUIREMENTS, ref=ref)
    deliver("pull_request", pr)
    assert store.load(REF2).current_node == "requirements-approval"
    review = fixture("pull_request_review", "submitted")
    review["review"]["state"] = "approved"
    review["review"]["commit_id"] = "0" * 40
    deliver("pull_request_review", review)
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and Past.read(store, REF2).decisions == []
    status = [c for c in gh.comments(REPO, 2) if (find_effect(c["body"]) or "")
              .endswith("/status")]
    assert "no longer counts" in status[-1]["body"]
    review["review"]["commit_id"] = review["pull_request"]["head"]["sha"]
    deliver("pull_request_review", review)
    assert store.load(REF2).current_node == "design"
    # The decision landed in the artifact on the pull request branch.
    recorded = gh.get_file(REPO, "specs/2/requirements.md", ref=head["ref"])["text"]
    assert "## Review comments" in recorded and "@Codertocat — approved" in recorded


def test_a_deleted_deciding_comment_is_recorded_and_explained(env):
    gh, processor, store, deliver = env
    enrol(deliver)
    deliver("issue_comment", comment("/approve"))
    deleted = fixture("issue_comment", "deleted")
    deliver("issue_comment", deleted)
    withdrawn = [e for e in store.events(REF1) if e.type == "feedback.withdrawn"]
    assert withdrawn and withdrawn[-1].data["decided"] == ["requirements-approval"]
    assert not any("/withdrawn/" in e for e in effects(gh))  # no reply comment
    [status] = [c for c in gh.comments(REPO, 1)
                if (find_effect(c["body"]) or "").endswith("/status")]
    assert "decided gate `requirements-approval` was deleted" in status["body"]
    assert store.load(REF1).current_node == "design"  # never moved back automatically


def test_phase_label_drift_is_noticed_once_and_never_fought(env):
    gh, processor, store, deliver = env
    enrol(deliver)
    before = list(gh.actions)
    for _ in range(2):
        p = fixture("issues", "unlabeled")
        p["label"] = gh_label("phase:requirements-approval")
        deliver("issues", p)
    drift = [e for e in store.events(REF1) if e.type == "labels.drift"]
    assert len(drift) == 2 and drift[0].data["action"] == "unlabeled"
    new_actions = gh.actions[len(before):]
    assert not [a for a in new_actions if ":add-label:" in a]
    assert [e for e in effects(gh) if e.endswith("/drift")] == [f"{REF1}/drift"]



def test_repository_config_is_read_at_the_default_branch_head_a_push_announces(env):
    gh, processor, store, deliver = env
    enrol(deliver)  # caches the config read at the branch (no harness file: label the-loop)
    push = load_payload("push", "with-installation")
    push["repository"]["full_name"] = REPO
    push["ref"] = f"refs/heads/{push['repository']['default_branch']}"
    push["after"] = "a1b2c3" * 6 + "d4e5"
    gh.add_file(REPO, ".the-loop/harness-config.yaml",
                "version: 1\nenrolment: {label: pdlc}\n", ref=push["after"])
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref=push["after"])
    handled = deliver("push", push)
    assert "config refreshed" in handled[-1].detail
    p = fixture("issues", "labeled", enrol=False)
    p["issue"]["number"] = 5
    p["label"] = gh_label("pdlc")
    p["issue"]["labels"].append(gh_label("pdlc"))
    deliver("issues", p)
    assert store.load(f"github:{REPO}#5") is not None  # enrolled by the new label


DESIGN = "# D\n\n## Overview\n\nx\n\n## Security design\n\ny\n"


def test_an_approval_whose_review_record_moves_the_branch_evaluates_the_new_head(
        redis_ns, tmp_path):
    """Given a pull request (git-backed branch) waiting at requirements-approval, its
      check run on head H0, design.md already on the branch
    When an approving review of H0 is processed through the real processor and
      record-feedback commits the review record to the branch (head H1)
    Then the rest of that delivery reads the artifacts at H1 (design's exit chain sees the
      review record and passes) and publishes its check runs on H1; the run on H0 is left
      as it was, and no check anywhere says failure."""
    gh = FakeGitHub()
    gh.add_git_repo(REPO, tmp_path / "git", {".the-loop/collaborators.yaml": COLLABORATORS},
                    default_branch="master")
    pr = fixture("pull_request", "labeled")
    pr["label"] = gh_label("the-loop")
    branch = pr["pull_request"]["head"]["ref"]
    gh.add_file(REPO, "specs/2/requirements.md", REQUIREMENTS, ref=branch)
    gh.add_file(REPO, "specs/2/design.md", DESIGN, ref=branch)
    old = gh.branch_sha(REPO, branch)
    assert old is not None
    gh.add_pull(REPO, 2, head_sha=old, head_ref=branch, base_ref="master")
    pr["pull_request"]["head"]["sha"] = old
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)

    def deliver(event, payload):
        delivery = parse_delivery({"X-GitHub-Event": event,
                                   "X-GitHub-Delivery": f"{redis_ns.token}-{uuid.uuid4()}",
                                   "Content-Type": "application/json"},
                                  json.dumps(payload).encode())
        assert queue.enqueue(delivery)
        processor.drain(delivery.work_item or SHARED_INBOX)

    deliver("pull_request", pr)
    assert store.load(REF2).current_node == "requirements-approval"
    before = {c["id"]: dict(c) for c in gh.check_runs(REPO)}
    assert [c["head_sha"] for c in before.values()] == [old]
    review = fixture("pull_request_review", "submitted")
    review["pull_request"]["head"]["sha"] = review["review"]["commit_id"] = old
    review["review"]["state"] = "approved"
    deliver("pull_request_review", review)
    new = gh.branch_sha(REPO, branch)
    assert new != old  # record-feedback committed the review record
    assert "## Review comments" in gh.file(REPO, "specs/2/requirements.md", new)
    state = store.load(REF2)
    # design's exit chain read requirements.md at H1 (its review record) and passed.
    assert state.current_node == "design-approval", state.to_dict()
    after = gh.check_runs(REPO)
    published = [c for c in after if c["id"] not in before or c != before[c["id"]]]
    assert published and {c["head_sha"] for c in published} == {new}
    assert [c for c in after if c["head_sha"] == old] == list(before.values())
    assert [c["conclusion"] for c in after if c["conclusion"] == "failure"] == []
