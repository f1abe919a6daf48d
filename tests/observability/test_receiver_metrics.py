"""GET /metrics of the receiver (Flask test client, real Redis db 14, unique prefix)."""

from __future__ import annotations

import re
import time

import pytest
from prometheus_client import REGISTRY

from foundation.inbox.keys import Keys
from foundation.observability.metric_labels import ACTIONS, EVENTS, action_label, event_label
from foundation.settings import ReceiverSettings
from tests.conftest import load_fixture, signed_post
from tests.observability.helpers import samples, value
from webhook.app import create_app, make_redis_client
from workers.router import ROUTES, handled_events

SECRET = "metrics-secret"
CLOSED_PORT_URL = "redis://127.0.0.1:1/0"


def settings_for(ns, **overrides) -> ReceiverSettings:
    values = dict(secrets=(SECRET.encode(),), redis_url=ns.url, queue_name=ns.queue_name,
                  redis_prefix=ns.prefix)
    values.update(overrides)
    return ReceiverSettings(**values)


@pytest.fixture
def client(redis_ns, monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)  # one process here
    return create_app(settings_for(redis_ns), redis=redis_ns.client).test_client()


def scrape(client) -> dict:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain; version=0.0.4")
    return samples(response.get_data(as_text=True))


def test_metrics_count_deliveries_by_event_action_and_code(client, redis_ns):
    before = scrape(client)
    opened = load_fixture("issues", "opened")
    first = redis_ns.new_id()
    assert signed_post(client, opened, event="issues", secret=SECRET,
                       delivery=first).status_code == 202
    assert signed_post(client, opened, event="issues", secret=SECRET,
                       delivery=first).status_code == 200  # GitHub's redelivery
    ping = load_fixture("ping", "with-app_id")
    assert signed_post(client, ping, event="ping", secret=SECRET,
                       delivery=redis_ns.new_id()).status_code == 200
    assert signed_post(client, opened, event="issues", secret="not-the-secret",
                       delivery=redis_ns.new_id()).status_code == 401
    assert signed_post(client, opened, event="issues", secret=SECRET,
                       delivery=redis_ns.new_id(),
                       headers={"X-Hub-Signature-256": None}).status_code == 401
    assert signed_post(client, b'{"action": "frobnicated"}', event="brand_new_event",
                       secret=SECRET, delivery=redis_ns.new_id()).status_code == 202
    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return (value(after, name, **labels) or 0.0) - (value(before, name, **labels) or 0.0)

    deliveries = "the_loop_webhook_deliveries_total"
    assert delta(deliveries, event="issues", action="opened", code="202") == 1
    assert delta(deliveries, event="issues", action="opened", code="200") == 1
    assert delta(deliveries, event="ping", action="none", code="200") == 1
    # Refused before the body is read: no action.
    assert delta(deliveries, event="issues", action="none", code="401") == 2
    # Names outside GitHub's documented set never become label values.
    assert delta(deliveries, event="other", action="other", code="202") == 1
    failures = "the_loop_webhook_signature_failures_total"
    assert delta(failures, reason="invalid") == 1
    assert delta(failures, reason="missing") == 1
    assert value(after, "the_loop_queue_depth", queue=redis_ns.queue_name) == 2
    age = value(after, "the_loop_queue_oldest_job_age_seconds", queue=redis_ns.queue_name)
    assert age is not None and 0 <= age < 60


def test_oldest_job_age_is_read_from_the_head_of_the_queue(client, redis_ns):
    empty = scrape(client)
    assert value(empty, "the_loop_queue_depth", queue=redis_ns.queue_name) == 0
    assert value(empty, "the_loop_queue_oldest_job_age_seconds", queue=redis_ns.queue_name) == 0
    oldest, newest = redis_ns.new_id(), redis_ns.new_id()
    for delivery in (oldest, newest):
        assert signed_post(client, load_fixture("issues", "opened"), event="issues",
                           secret=SECRET, delivery=delivery).status_code == 202
    # The work item at the head of the ready list: its oldest delivery arrived 2 min ago.
    redis_ns.client.hset(Keys(redis_ns.prefix).delivery(oldest), "received_at",
                         repr(time.time() - 120))
    parsed = scrape(client)
    assert value(parsed, "the_loop_queue_depth", queue=redis_ns.queue_name) == 2
    age = value(parsed, "the_loop_queue_oldest_job_age_seconds", queue=redis_ns.queue_name)
    assert 119 <= age < 180


def test_scrape_without_redis_still_answers_with_the_counters(redis_ns, monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    app = create_app(settings_for(redis_ns, redis_url=CLOSED_PORT_URL),
                     redis=make_redis_client(CLOSED_PORT_URL))
    response = app.test_client().get("/metrics")
    assert response.status_code == 200
    text = response.get_data(as_text=True)
    assert "the_loop_webhook_deliveries_total" in text
    assert "the_loop_queue_depth" not in text


def test_metric_names_follow_prometheus_conventions(client):
    text = client.get("/metrics").get_data(as_text=True)
    types = dict(re.findall(r"^# TYPE (the_loop_\w+) (\w+)$", text, re.M))
    assert types, "no the_loop_ metrics exposed"
    for name, kind in types.items():
        if kind == "counter":
            assert name.endswith("_total")
        if kind == "histogram":
            assert name.endswith("_seconds")
    assert "_created" not in text


def test_label_sets_cover_what_the_router_handles():
    assert handled_events() <= EVENTS
    assert {action for (_event, action) in ROUTES if action} <= ACTIONS
    assert event_label("issues") == "issues" and event_label("sponsorship") == "other"
    assert event_label(None) == "other"
    assert action_label(None) == "none" and action_label("") == "none"
    assert action_label("x" * 60) == "other"


def test_app_manifest_events_have_labels():
    from the_loop.manifest import load_manifest

    events = set(load_manifest()["default_events"])
    assert events and events <= EVENTS


def test_hot_path_counts_into_the_registry_series(client, redis_ns):
    # The hot path increments a cached child: the very series the registry reports.
    labels = {"event": "issues", "action": "opened", "code": "202"}
    name = "the_loop_webhook_deliveries_total"
    start = REGISTRY.get_sample_value(name, labels) or 0.0
    signed_post(client, load_fixture("issues", "opened"), event="issues", secret=SECRET,
                delivery=redis_ns.new_id())
    assert REGISTRY.get_sample_value(name, labels) == start + 1
