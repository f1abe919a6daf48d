"""Worker processing on the real Redis: routing, enrolment, order, every fixture."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid

import pytest
from rq import Queue

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import SHARED_INBOX
from foundation.settings import WorkerSettings
from graph.state import Past
from tests.conftest import act_as, fixture_files, gh_label, load_fixture, load_payload
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.events import parse_delivery
from workers.router import ROUTES, route
from workers.state import RedisStateStore
from workers.worker import LoopWorker

REPO = "Codertocat/Hello-World"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"


@pytest.fixture
def env(redis_ns):
    gh = FakeGitHub()
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    yield gh, processor, queue, redis_ns


def deliver(queue, event, payload: dict | bytes, delivery=None):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    delivery = delivery or str(uuid.uuid4())
    parsed = parse_delivery(
        {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery,
         "Content-Type": "application/json"}, body)
    assert queue.enqueue(parsed)
    return delivery


def work(ns, processor):
    worker = LoopWorker([Queue(ns.queue_name, connection=ns.client)], connection=ns.client,
                        name=f"w-{ns.new_id()}", processor=processor)
    worker.work(burst=True, with_scheduler=False)


def enrol_payload():
    p = load_payload("issues", "labeled")
    p["label"] = gh_label("the-loop")
    p["issue"]["labels"].append(gh_label("the-loop"))
    return p


def comment_payload(login, body):
    p = load_payload("issue_comment", "created")
    p["issue"]["labels"].append(gh_label("the-loop"))
    act_as(p, login)
    p["comment"]["body"] = body
    return p


def test_routes_cover_the_events_named_in_the_issue():
    assert route("issue_comment", "created").kind == "drive"
    assert route("ping", None).kind == "ignore"
    assert route("issues", "locked").kind == "ignore"
    assert "not handled" in route("sponsorship", "created").reason
    assert all(kind for kind in ROUTES.values())


def test_enrolment_by_label_then_authorized_approve_advances(env):
    gh, processor, queue, ns = env
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
    deliver(queue, "issues", enrol_payload())
    deliver(queue, "issue_comment", comment_payload("mallory", "/approve"))
    work(ns, processor)
    store = RedisStateStore(ns.client, ns.prefix)
    ref = f"github:{REPO}#1"
    state = store.load(ref)
    assert (state.status, state.current_node) == ("waiting", "requirements-approval")
    deliver(queue, "issue_comment", comment_payload("Codertocat", "/approve"))
    work(ns, processor)
    state = store.load(ref)
    assert state.current_node == "design"
    assert Past.read(store, ref).decisions[-1]["actor"] == "Codertocat"
    assert gh.labels(REPO, 1) == ["phase:design"]
    types = [e.type for e in store.events(ref)]
    assert types.count("delivery.received") == 3
    assert not ns.client.llen(processor.keys.inbox(ref))


def test_unenrolled_items_are_acknowledged_without_github_calls(env):
    gh, processor, queue, ns = env
    deliver(queue, "issue_comment", load_fixture("issue_comment", "created"))
    work(ns, processor)
    assert gh.actions == []
    assert RedisStateStore(ns.client, ns.prefix).load(f"github:{REPO}#1") is None


# ping is answered by the receiver and never enqueued.
QUEUED_FIXTURES = [(e, p) for e, p in fixture_files() if e != "ping"]


@pytest.mark.parametrize(("event", "path"), QUEUED_FIXTURES,
                         ids=[str(p.relative_to(p.parents[2])) for _, p in QUEUED_FIXTURES])
def test_every_fixture_goes_through_the_worker_without_exception(env, event, path):
    gh, processor, queue, ns = env
    # Enrol each payload's item too, so the drive path runs on real payload shapes.
    payload = json.loads(path.read_bytes())
    for key in ("issue", "pull_request"):
        if isinstance(payload.get(key), dict):
            payload[key].setdefault("labels", []).append(gh_label("the-loop"))
    delivery = deliver(queue, event, payload)
    handled = processor.drain(parse_delivery(
        {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery + "x",
         "Content-Type": "application/json"}, json.dumps(payload).encode()).work_item
        or SHARED_INBOX)
    assert all(h.outcome != "failed" for h in handled), handled


def test_deliveries_of_one_work_item_are_handled_in_arrival_order_across_workers(env):
    gh, processor, queue, ns = env
    order: list[str] = []
    original = processor.handle

    def slow_handle(record, **kwargs):
        order.append(record.delivery_id)
        time.sleep(0.01)
        return original(record, **kwargs)

    processor.handle = slow_handle
    ids = [deliver(queue, "issue_comment", load_fixture("issue_comment", "created"),
                   delivery=f"{ns.token}-{i:02d}") for i in range(12)]
    ref = f"github:{REPO}#1"
    # Concurrent "workers" each drain the work item's inbox.
    threads = [threading.Thread(target=processor.drain, args=(ref,)) for _ in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order == ids
    assert not ns.client.llen(processor.keys.inbox(ref))


def test_a_failing_delivery_is_recorded_and_does_not_block_the_next(env):
    gh, processor, queue, ns = env

    def broken(**_):
        raise RuntimeError("boom")

    gh.ensure_label = broken
    deliver(queue, "issues", enrol_payload())
    ok = deliver(queue, "issue_comment", load_fixture("issue_comment", "created"))
    # set-phase-label raising is a terminal block (escalated), not a delivery failure.
    processor.drain(f"github:{REPO}#1")
    state = RedisStateStore(ns.client, ns.prefix).load(f"github:{REPO}#1")
    assert state.status == "escalated" and "set-phase-label" in state.parked_reason
    assert not ns.client.hexists(processor.keys.failed, ok)
    # A processing error outside the hooks, once its attempts are used up (one here), is
    # parked as a failed delivery with its reason.
    processor = build_processor(dataclasses.replace(processor.settings, delivery_attempts=1),
                                ns.client, processor.agent.graph, None)
    again = deliver(queue, "issue_comment", comment_payload("Codertocat", "/approve"))
    handled = processor.drain(f"github:{REPO}#1")
    assert [h.outcome for h in handled if h.delivery_id == again] == ["failed"]
    assert json.loads(ns.client.hget(processor.keys.failed, again))["reason"].startswith(
        "github connect: no GitHub credentials: set THE_LOOP_GITHUB_APP_ID")


def test_a_commit_status_re_drives_the_work_item_whose_head_it_names(env):
    """Given an enrolled pull request at implementation waiting for check `tests`
    When GitHub sends a `status` event (no PR reference) for its head commit
    Then the worker re-drives that work item, which moves to review."""
    gh, processor, queue, ns = env
    gh.operations = gh.operations | {"list-pull-files"}
    gh.list_pull_files = lambda repo, number: {"files": ["app.py"]}
    pr = load_payload("pull_request", "labeled")
    pr["label"] = gh_label("the-loop")
    pr["pull_request"]["labels"].append(gh_label("the-loop"))
    head = pr["pull_request"]["head"]["sha"]
    ref = f"github:{REPO}#2"
    gh.add_pull(REPO, 2, head_sha=head, head_ref="changes", base_ref="master")
    deliver(queue, "pull_request", pr)
    work(ns, processor)
    from foundation.events import GitHubEvent
    from graph.context import HookConfig
    from graph.refs import WorkItemRef
    item = GitHubEvent.parse("pull_request", pr).work_item(WorkItemRef.parse(ref))
    processor.agent.runtime.force(item, HookConfig(), "implementation",
                            "test: jump to implementation")
    deliver(queue, "pull_request", pr)  # evaluates verify-tests: no result yet
    work(ns, processor)
    store = RedisStateStore(ns.client, ns.prefix)
    assert store.load(ref).status == "waiting"
    status = load_payload("status", "payload")
    status.update(sha=head, context="tests", state="success")
    deliver(queue, "status", status)
    work(ns, processor)
    state = store.load(ref)
    assert state.current_node == "review", state.parked_reason
