"""workers.routes: each route's handler on real fixture payloads, with the in-memory fake
GitHub; and the worker's notices going through the outbox (a failed post is retried,
never lost, never doubled)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from foundation.events import GitHubEvent
from foundation.inbox.record import DeliveryRecord
from foundation.settings import WorkerSettings
from graph.effects import RetryLater
from graph.markers import find_effect
from graph.ports import Unavailable
from graph.refs import WorkItemRef
from tests.conftest import act_as, gh_label, load_payload
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.events import parse_delivery
from workers import routes
from workers.ci import CommitKeys
from workers.drain import DeliveryProcessor
from workers.router import route

REPO = "Codertocat/Hello-World"
REF1 = f"github:{REPO}#1"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"


class FlakyGitHub(FakeGitHub):
    """The fake GitHub, failing the next ``failing[op]`` comments or reactions with a 502;
    with ``after``, the call is performed first and only its answer is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: dict[str, int] = {}
        self.after = False

    def _flaky(self, op: str, perform: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if self.failing.get(op, 0) > 0:
            self.failing[op] -= 1
            if self.after:
                perform()
            raise Unavailable("502 from the fake", integration="github", op=op, status=502)
        return perform()

    def comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        return self._flaky("comment", lambda: super(FlakyGitHub, self).comment(
            repo=repo, number=number, body=body))

    def add_reaction(self, repo: str, comment_id: int, content: str) -> dict[str, Any]:
        return self._flaky("add-reaction", lambda: super(FlakyGitHub, self).add_reaction(
            repo=repo, comment_id=comment_id, content=content))


@pytest.fixture
def env(redis_ns):
    gh = FlakyGitHub()
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name,
                              reactions=(("enabled", True), ("started", "eyes"),
                                         ("completed", "hooray"), ("error", "confused")))
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh)
    return gh, processor


def record(event: str, payload: dict[str, Any]) -> DeliveryRecord:
    """The record the receiver stores for ``payload`` (not queued: handlers are called
    directly)."""
    delivery = parse_delivery({"X-GitHub-Event": event,
                               "X-GitHub-Delivery": f"d-{uuid.uuid4().hex[:12]}",
                               "Content-Type": "application/json"},
                              json.dumps(payload).encode())
    return DeliveryRecord.of(delivery, time.time())


def fixture(event: str, name: str, *, enrol: bool = True) -> dict[str, Any]:
    payload = load_payload(event, name)
    item = payload.get("issue") or payload.get("pull_request")
    if enrol and item is not None:
        item.setdefault("labels", []).append(gh_label("the-loop"))
    return payload


def enrolment() -> dict[str, Any]:
    payload = fixture("issues", "labeled")
    payload["label"] = gh_label("the-loop")
    return payload


def comment(body: str, login: str = "Codertocat") -> dict[str, Any]:
    payload = fixture("issue_comment", "created")
    act_as(payload, login)
    payload["comment"]["body"] = body
    return payload


def marks(gh: FakeGitHub, number: int = 1) -> list[str]:
    return [find_effect(c["body"]) or "" for c in gh.comments(REPO, number)]


def enrolled(processor: DeliveryProcessor) -> None:
    assert processor.handle(record("issues", enrolment())).outcome == "advanced"


def phase_label_by_hand(action: str = "unlabeled", login: str = "octocat",
                        sender_type: str = "User") -> dict[str, Any]:
    payload = fixture("issues", action)
    payload["label"] = gh_label("phase:requirements-approval")
    payload["sender"].update(login=login, type=sender_type)
    return payload


def push(branch: str) -> dict[str, Any]:
    payload = load_payload("push", "with-installation")
    payload["repository"]["full_name"] = REPO
    payload["ref"] = f"refs/heads/{branch}"
    payload["after"] = "a1b2c3" * 6 + "d4e5"
    return payload


def status(sha: str = "6113728f27ae82c7b1a177c8d03f9e96e0adf246") -> dict[str, Any]:
    payload = load_payload("status", "payload")
    payload.update(sha=sha, context="tests", state="success")
    return payload


def check_run() -> dict[str, Any]:
    payload = load_payload("check_run", "completed")
    payload["check_run"]["pull_requests"][0]["number"] = 7  # not a work item
    return payload


# (handler, setup, event, payload, outcome, detail fragment); ``setup`` enrols #1 first.
CASES: list[tuple[Callable[..., Any], bool, str, Callable[[], dict[str, Any]], str, str]] = [
    (routes.drive, False, "issues", lambda: enrolment(), "advanced", "requirements-approval"),
    (routes.drive, False, "issues", lambda: fixture("issues", "opened", enrol=False),
     "ignored", "no 'the-loop' label"),
    (routes.drive, True, "issues", lambda: phase_label_by_hand("labeled"),
     "ignored", "phase label labeled by a person"),
    (routes.drive, True, "issue_comment", lambda: comment("/approve", login="mallory"),
     "advanced", "waiting at requirements-approval"),
    (routes.drive_if_enrolled, False, "check_run", check_run, "ignored", "not a work item"),
    (routes.ci_status, False, "status", status, "ignored",
     "recorded tests=success for 6113728f27ae; re-driving 0 work item(s)"),
    (routes.config_push, False, "push", lambda: push("master"), "ignored",
     "default branch moved; config refreshed"),
    (routes.config_push, False, "push", lambda: push("feature"), "ignored",
     "push does not move a work item"),
    (routes.labels, True, "issues", phase_label_by_hand, "ignored",
     "phase label unlabeled by a person: recorded"),
    (routes.labels, True, "issues", lambda: phase_label_by_hand(login="the-loop[bot]",
                                                                sender_type="Bot"),
     "ignored", "the-loop's own phase label change"),
    (routes.labels, False, "issues", phase_label_by_hand, "ignored", "not a work item"),
    (routes.labels, True, "issues", lambda: fixture("issues", "unlabeled"), "ignored",
     "label change does not move a work item"),
    (routes.withdraw, False, "issue_comment", lambda: fixture("issue_comment", "deleted"),
     "ignored", "not a work item"),
    (routes.withdraw, True, "issue_comment", lambda: fixture("issue_comment", "deleted"),
     "ignored", "it decided nothing: ignored"),
]


@pytest.mark.parametrize(("handler", "setup", "event", "payload", "outcome", "detail"), CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_each_route_goes_to_its_handler(env, handler, setup, event, payload, outcome, detail):
    gh, processor = env
    if setup:
        enrolled(processor)
    stored = record(event, payload())
    assert routes.HANDLERS[route(stored.event, stored.action).kind] is handler
    handled = processor.handle(stored)
    assert (handled.outcome, handled.delivery_id) == (outcome, stored.delivery_id)
    assert detail in handled.detail


def test_a_push_to_the_default_branch_records_its_head_for_every_worker(env):
    gh, processor = env
    processor.handle(record("push", push("master")))
    head = CommitKeys(processor.keys.prefix).head(REPO)
    assert processor.redis.get(head) == ("a1b2c3" * 6 + "d4e5").encode()


def test_a_commit_status_is_fanned_out_to_the_work_items_whose_head_it_is(env):
    gh, processor = env
    head = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
    processor.repos.ci(REPO).remember(head, REF1)
    handled = processor.handle(record("status", status(head)))
    assert handled.detail.endswith("re-driving 1 work item(s)")
    assert processor.repos.ci(REPO).conclusions(head) == {"tests": "success"}


def test_a_drift_notice_whose_post_fails_is_retried_and_posted_once(env):
    gh, processor = env
    enrolled(processor)
    drift = record("issues", phase_label_by_hand())
    gh.failing["comment"] = 1
    with pytest.raises(RetryLater):
        processor.handle(drift)
    assert f"{REF1}/drift" not in marks(gh)
    # The outbox kept it pending; the delivery's retry posts it.
    processor.handle(drift, replay=True)
    assert marks(gh).count(f"{REF1}/drift") == 1
    store = processor.store
    assert [e.type for e in store.events(REF1)].count("labels.drift") == 1
    assert [e.type for e in store.events(REF1)].count("labels.drift-noted") == 1
    assert store.load(REF1).effects[f"{REF1}/drift"]["status"] == "done"


def test_a_notice_whose_answer_was_lost_is_not_posted_twice(env):
    gh, processor = env
    enrolled(processor)
    edited = fixture("issue_comment", "edited")
    edited["comment"]["body"] = "/approve"
    act_as(edited, "mallory", sender_only=True)
    stored = record("issue_comment", edited)
    gh.failing["comment"], gh.after = 1, True  # posted, but the answer never came
    with pytest.raises(RetryLater):
        processor.handle(stored)
    processor.handle(stored, replay=True)
    assert len([m for m in marks(gh) if "/alarm/" in m]) == 1


def test_an_alarm_whose_post_fails_is_posted_by_the_retry(env):
    gh, processor = env
    enrolled(processor)
    edited = fixture("issue_comment", "edited")
    edited["comment"]["body"] = "/approve"
    act_as(edited, "mallory", sender_only=True)
    stored = record("issue_comment", edited)
    gh.failing["comment"] = 1
    with pytest.raises(RetryLater):
        processor.handle(stored)
    assert not [m for m in marks(gh) if "/alarm/" in m]
    # The retry advances on a tick (the event was consumed): the alarm is read back from
    # the event log and posted.
    processor.handle(stored, replay=True)
    assert len([m for m in marks(gh) if "/alarm/" in m]) == 1
    assert [e.type for e in processor.store.events(REF1)].count("alarm") == 1


def test_a_reaction_that_fails_is_tried_again_and_never_fails_its_delivery(env):
    gh, processor = env
    enrolled(processor)
    approve = record("issue_comment", comment("/approve"))
    cid = load_payload("issue_comment", "created")["comment"]["id"]
    gh.failing["add-reaction"] = 1  # "completed" fails once: the work goes on
    assert processor.handle(approve).outcome == "advanced"
    assert processor.store.load(REF1).current_node == "design"
    # Tried again as the delivery's handling ended, and made once; "started" is not due
    # (the delivery decided).
    assert [a for a in gh.actions if ":add-reaction:" in a] == [
        f"{REPO}:add-reaction:{cid}:hooray"]


def test_a_reaction_is_recorded_in_the_outbox_before_it_is_made(env):
    gh, processor = env
    enrolled(processor)
    cid = load_payload("issue_comment", "created")["comment"]["id"]
    seen: list[str] = []
    made = gh.add_reaction

    def add_reaction(repo: str, comment_id: int, content: str) -> dict[str, Any]:
        effect = f"{REF1}/reaction/{cid}/completed"
        if content == "hooray":
            seen.append(processor.store.load(REF1).effects[effect]["status"])
        return made(repo=repo, comment_id=comment_id, content=content)

    gh.add_reaction = add_reaction  # type: ignore[method-assign]
    processor.handle(record("issue_comment", comment("/approve")))
    assert seen == ["pending"]


def test_a_notice_is_looked_for_first_so_a_lost_record_does_not_double_it(env):
    gh, processor = env
    enrolled(processor)
    item = GitHubEvent("issues").work_item(WorkItemRef.parse(REF1))
    for _ in range(2):
        state = processor.store.load(REF1)
        state.effects.clear()  # as entering a node does
        processor.store.save(state)
        assert processor.agent.notices.comment(gh, item, f"{REF1}/drift", "text")
    assert marks(gh).count(f"{REF1}/drift") == 1
