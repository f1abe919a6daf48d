"""workers.session: a delivery reads its work item's stored state once.

Each delivery goes the real worker path: queued as the receiver queues it
(:class:`foundation.inbox.enqueue.DeliveryQueue`), then taken off the inbox by one wake-up
(:meth:`workers.drain.DeliveryProcessor.dispatch`), with the in-memory fake GitHub.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from foundation.inbox.enqueue import DeliveryQueue
from foundation.settings import WorkerSettings
from graph.state import WorkItemState
from tests.conftest import act_as, gh_label, load_payload
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.events import parse_delivery

REPO = "Codertocat/Hello-World"
REF1 = f"github:{REPO}#1"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"


@pytest.fixture
def env(redis_ns, monkeypatch):
    """The fake GitHub, the processor, its queue, and the refs its state store loaded
    (every ``load`` call, in order)."""
    gh = FakeGitHub()
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    loads: list[str] = []
    store = processor.store
    load = store.load

    def counted(ref: str) -> WorkItemState | None:
        loads.append(ref)
        return load(ref)

    monkeypatch.setattr(store, "load", counted)
    return gh, processor, queue, loads


def deliver(queue: DeliveryQueue, event: str, payload: dict[str, Any]) -> None:
    parsed = parse_delivery({"X-GitHub-Event": event, "X-GitHub-Delivery": str(uuid.uuid4()),
                             "Content-Type": "application/json"},
                            json.dumps(payload).encode())
    assert queue.enqueue(parsed)


def enrolment() -> dict[str, Any]:
    payload = load_payload("issues", "labeled")
    payload["label"] = gh_label("the-loop")
    payload["issue"]["labels"].append(gh_label("the-loop"))
    return payload


def test_the_enrolment_walk_loads_the_state_once(env):
    gh, processor, queue, loads = env
    deliver(queue, "issues", enrolment())
    handled = processor.dispatch()
    assert [h.outcome for h in handled] == ["advanced"]
    assert any(label.startswith("phase:") for label in gh.labels(REPO, 1))
    assert loads == [REF1]


def test_an_advance_on_a_comment_loads_the_state_once(env):
    _gh, processor, queue, loads = env
    deliver(queue, "issues", enrolment())
    assert [h.outcome for h in processor.dispatch()] == ["advanced"]
    payload = load_payload("issue_comment", "created")
    payload["issue"]["labels"].append(gh_label("the-loop"))
    act_as(payload, "octocat")
    payload["comment"]["body"] = "looks fine to me"
    deliver(queue, "issue_comment", payload)
    loads.clear()
    handled = processor.dispatch()
    assert [h.outcome for h in handled] == ["advanced"]
    assert loads == [REF1]


@pytest.mark.parametrize(("event", "number", "seen", "expected"), [
    # The issue's draft pull request #2, its delivery forwarded to issue #1.
    ("pull_request", 2, "issue", "issue"),
    ("pull_request", 2, None, "issue"),
    # The work item's own pull request, and a CI result (no kind in its payload).
    ("pull_request", 1, None, "pull_request"),
    ("pull_request", 1, "pull_request", "pull_request"),
    ("check_run", None, "issue", "issue"),
    ("check_run", None, None, "pull_request"),
])
def test_a_delivery_of_an_issues_draft_pull_request_keeps_it_an_issue(
        event, number, seen, expected):
    from types import SimpleNamespace

    from foundation.events import CIResult, GitHubEvent, WorkItemRef
    from workers.repo_context import RepoConfig
    from workers.session import WorkItemSession

    ref = WorkItemRef(REPO, 1)
    if event == "check_run":
        delivered = GitHubEvent(event, ci=CIResult(REPO, "a" * 40, "tests", "failure"))
    else:
        # Forwarded to the issue: the record names the issue as the delivery's work item.
        delivered = GitHubEvent(event, ref=ref, kind="pull_request", pull_number=number)
    state = WorkItemState(ref=REF1, graph_digest="x", current_node="implementation",
                          kind=seen)
    session = WorkItemSession(SimpleNamespace(settings=WorkerSettings()),  # type: ignore[arg-type]
                              SimpleNamespace(event=delivered),  # type: ignore[arg-type]
                              ref, None, REPO, RepoConfig(), state, True)
    assert session.work_item().kind == expected
