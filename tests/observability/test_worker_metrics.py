"""The worker's metrics: jobs, handled deliveries, hook results, transport calls, the
GitHub rate limit, and the HTTP server that exposes them."""

from __future__ import annotations

import json
import logging
import urllib.request
import uuid

import pytest
from github import Github
from prometheus_client import REGISTRY
from rq import Queue

from foundation.inbox.enqueue import DeliveryQueue
from foundation.settings import Settings, SettingsError, WorkerSettings
from graph.ports import IntegrationError, NotFound, RateLimited
from integrations.github import GitHubApi
from integrations.metrics import ObservedFactory, ObservedIntegration, outcome_of
from tests.conftest import gh_label, load_payload
from tests.observability.helpers import free_port, samples
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor, build_worker
from webhook.events import parse_delivery
from workers import metrics as worker_metrics
from workers.worker import LoopWorker

REPO = "Codertocat/Hello-World"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"


@pytest.fixture
def processing(redis_ns):
    gh = FakeGitHub()
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    processor = build_processor(settings, redis_ns.client, load_graph(),
                                  ObservedFactory(lambda _i: gh, name="github"))
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    yield gh, queue, redis_ns, processor


def deliver(queue, event: str, payload: dict) -> str:
    delivery = str(uuid.uuid4())
    parsed = parse_delivery({"X-GitHub-Event": event, "X-GitHub-Delivery": delivery,
                             "Content-Type": "application/json"},
                            json.dumps(payload).encode())
    assert queue.enqueue(parsed)
    return delivery


def enrol_payload() -> dict:
    p = load_payload("issues", "labeled")
    p["label"] = gh_label("the-loop")
    p["issue"]["labels"].append(gh_label("the-loop"))
    return p


def work(ns, processor) -> None:
    LoopWorker([Queue(ns.queue_name, connection=ns.client)], connection=ns.client,
               name=f"w-{ns.new_id()}", processor=processor).work(burst=True,
                                                                 with_scheduler=False)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_processing_a_delivery_records_job_hook_and_transport_metrics(processing):
    gh, queue, ns, processor = processing
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
    watched = {
        "jobs": ("the_loop_job_duration_seconds_count", {"event": "dispatch"}),
        "advanced": ("the_loop_worker_deliveries_total",
                     {"event": "issues", "outcome": "advanced"}),
        "ignored": ("the_loop_worker_deliveries_total",
                    {"event": "issue_comment", "outcome": "ignored"}),
        "phase_label": ("the_loop_hook_results_total",
                        {"hook": "set-phase-label", "status": "pass"}),
        "validated": ("the_loop_hook_results_total",
                      {"hook": "validate-artifacts", "status": "pass"}),
        "get_file": ("the_loop_transport_calls_total",
                     {"integration": "github", "operation": "get-file", "outcome": "ok"}),
        "get_file_seconds": ("the_loop_transport_call_duration_seconds_count",
                             {"integration": "github", "operation": "get-file"}),
    }
    before = {k: sample(n, **labels) for k, (n, labels) in watched.items()}
    deliver(queue, "issues", enrol_payload())
    deliver(queue, "issue_comment", load_payload("issue_comment", "created"))
    work(ns, processor)
    grew = {k: sample(n, **labels) - before[k] for k, (n, labels) in watched.items()}
    assert grew["jobs"] == 1  # one wake-up job drained both deliveries
    assert grew["advanced"] == 1
    assert grew["ignored"] == 1  # not a work item: no label
    assert grew["phase_label"] >= 1
    assert grew["validated"] == 1
    assert grew["get_file"] >= 1
    assert grew["get_file_seconds"] >= grew["get_file"]  # plus the not_found ones


class _StubGitHub:
    name = "github"
    operations = frozenset({"get-file", "comment"})
    installation_id = 42
    rate_limit_remaining: int | None = None

    def __init__(self) -> None:
        self.next_error: BaseException | None = None

    def get_file(self, **params):
        self.rate_limit_remaining = 4321
        if self.next_error is not None:
            raise self.next_error
        return {"op": "get-file"}

    def call(self, op: str, **params):
        return {"op": op}

    def close(self) -> None:
        pass


def test_observed_integration_labels_outcomes_and_sets_the_rate_limit_gauge():
    stub = _StubGitHub()
    observed = ObservedFactory(lambda _i: stub, name="github")(42)
    assert observed.operations == stub.operations and observed.installation_id == 42

    def count(operation: str, outcome: str) -> float:
        return sample("the_loop_transport_calls_total", integration="github",
                      operation=operation, outcome=outcome)

    cases = [
        (None, "ok"),
        (NotFound("gone", integration="github", op="get-file", status=404), "not_found"),
        (RateLimited("slow down", integration="github", op="get-file", status=429),
         "rate_limited"),
        (IntegrationError("no", integration="github", op="get-file", status=422), "error"),
        (RuntimeError("boom"), "exception"),
    ]
    for error, outcome in cases:
        start = count("get-file", outcome)
        stub.next_error = error
        if error is None:
            assert observed.get_file(repo="a/b") == {"op": "get-file"}
        else:
            with pytest.raises(type(error)):
                observed.get_file(repo="a/b")
        assert count("get-file", outcome) == start + 1
    stub.next_error = None
    start = count("other", "ok")
    observed.call("something-new")
    assert count("other", "ok") == start + 1  # unknown operation names are capped
    assert sample("the_loop_github_rate_limit_remaining", installation="42") == 4321
    assert outcome_of(None) == "ok"


def test_the_worker_is_built_with_its_integrations_observed(redis_ns):
    settings = Settings.from_env({"GH_TOKEN": "ghp_t", "THE_LOOP_SLACK_TOKEN": "xoxb-1",
                                  "THE_LOOP_REDIS_PREFIX": redis_ns.prefix,
                                  "THE_LOOP_QUEUE": redis_ns.queue_name}, process="worker")
    processor = build_worker(settings, redis_ns.client)
    assert isinstance(processor.github, ObservedFactory)
    assert not isinstance(processor.github._inner, ObservedFactory)
    assert processor.github.transport == "api"
    slack = processor.integrations["slack"]
    assert isinstance(slack, ObservedIntegration) and slack._integration == "slack"


def test_github_api_reports_the_rate_limit_without_a_request():
    api = GitHubApi(Github(lazy=True))
    assert api.rate_limit_remaining is None  # nothing answered yet
    api._gh.requester.rate_limiting = (4999, 5000)
    assert api.rate_limit_remaining == 4999


def test_worker_metrics_server_serves_the_registry():
    port = free_port()
    server = worker_metrics.start_server(port, "127.0.0.1")
    assert server is not None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    for family in ("the_loop_job_duration_seconds histogram",
                   "the_loop_worker_deliveries_total counter",
                   "the_loop_hook_results_total counter",
                   "the_loop_transport_calls_total counter",
                   "the_loop_transport_call_duration_seconds histogram",
                   "the_loop_github_rate_limit_remaining gauge"):
        assert f"# TYPE {family}" in text
    assert samples(text)  # parses as Prometheus text


def test_worker_metrics_port_settings(caplog):
    assert worker_metrics.start_server(0) is None
    assert Settings.from_env({}).metrics.worker_port == 9101
    for bad in ("http", "-1", "70000"):
        with pytest.raises(SettingsError, match="THE_LOOP_WORKER_METRICS_PORT"):
            Settings.from_env({"THE_LOOP_WORKER_METRICS_PORT": bad})
    port = free_port()
    first = worker_metrics.start_server(port, "127.0.0.1")
    try:
        with caplog.at_level(logging.WARNING, logger="the_loop.worker"):
            second = worker_metrics.start_server(port, "127.0.0.1")
        assert second is None  # a second worker on the host runs on without metrics
        assert "THE_LOOP_WORKER_METRICS_PORT" in caplog.text
    finally:
        first.shutdown()
        first.server_close()
