"""webhook.app: the HTTP receiver end to end against the real Redis."""

from __future__ import annotations

import io
import json
import logging
import runpy
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from flask import Flask
from rq.job import Job

from foundation.inbox.enqueue import DeliveryQueue
from foundation.settings import ReceiverSettings, Settings, SettingsError
from tests.conftest import (
    FIXTURES_DIR,
    RedisNamespace,
    fixture_files,
    load_fixture,
    sign_body,
    signed_post,
)
from the_loop.wiring import build_receiver
from webhook.app import EXTENSION_KEY, ReceiverState, WebhookDispatcher, create_app

SECRET = b"test-secret-\xe2\x9c\x93"
OLD_SECRET = b"old-secret"
CLOSED_PORT_URL = "redis://127.0.0.1:1/0"


def settings_for(ns: RedisNamespace, **overrides) -> ReceiverSettings:
    values = dict(
        secrets=(SECRET, OLD_SECRET),
        redis_url=ns.url,
        queue_name=ns.queue_name,
        redis_prefix=ns.prefix,
    )
    values.update(overrides)
    return ReceiverSettings(**values)


@pytest.fixture
def app(redis_ns: RedisNamespace) -> Flask:
    return create_app(settings_for(redis_ns), redis=redis_ns.client)


@pytest.fixture
def client(app: Flask):
    return app.test_client()


def queue_of(app: Flask) -> DeliveryQueue:
    return app.extensions[EXTENSION_KEY].queue


def queued_ids(app: Flask, ns: RedisNamespace) -> list[str]:
    """Delivery ids in this test's inboxes (work items' and the shared one)."""
    prefix = queue_of(app).keys.inbox_prefix
    return [x.decode() for key in ns.existing_keys() if key.startswith(prefix)
            for x in ns.client.lrange(key, 0, -1)]


def wake_jobs(app: Flask, ns: RedisNamespace) -> list[str]:
    """Job ids on the RQ queue: the wake-up jobs."""
    return [x.decode() for x in ns.client.lrange(queue_of(app).queue_key, 0, -1)]


def assert_error(response, status: int) -> dict:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    data = response.get_json()
    assert data["ok"] is False
    assert isinstance(data["error"], str) and data["error"]
    return data


# --- happy paths -------------------------------------------------------------------------


def test_new_delivery_202_then_redelivery_200(client, app, redis_ns) -> None:
    body = load_fixture("issues", "opened")
    delivery = redis_ns.new_id()
    first = signed_post(client, body, event="issues", secret=SECRET, delivery=delivery)
    assert first.status_code == 202
    assert first.get_json() == {"ok": True, "delivery": delivery, "queued": True}

    again = signed_post(client, body, event="issues", secret=SECRET, delivery=delivery)
    assert again.status_code == 200
    assert again.get_json() == {"ok": True, "delivery": delivery, "duplicate": True}

    assert queued_ids(app, redis_ns) == [delivery]
    inbox = queue_of(app).keys.inbox("github:Codertocat/Hello-World#1")
    assert redis_ns.client.lrange(inbox, 0, -1) == [delivery.encode()]
    # The inbox became non-empty: its work item is ready and one wake-up job is queued.
    assert redis_ns.client.lrange(queue_of(app).keys.ready, 0, -1) == [
        b"github:Codertocat/Hello-World#1"]
    assert wake_jobs(app, redis_ns) == [f"{delivery}-wake"]
    job = Job.fetch(f"{delivery}-wake", connection=redis_ns.client)
    assert (job.func_name, job.args) == ("workers.jobs.dispatch", ())


def test_rotation_old_secret_accepted(client, redis_ns) -> None:
    r = signed_post(client, b'{"action": "x"}', event="issues", secret=OLD_SECRET,
                    delivery=redis_ns.new_id())
    assert r.status_code == 202


def test_ping_200_nothing_enqueued(client, app, redis_ns) -> None:
    r = signed_post(client, load_fixture("ping", "with-app_id"), event="ping", secret=SECRET,
                    delivery=redis_ns.new_id())
    assert r.status_code == 200
    assert r.get_json() == {"ok": True, "event": "ping"}
    assert redis_ns.existing_keys() == []
    assert queued_ids(app, redis_ns) == []


def test_form_encoded_body_accepted(client, redis_ns) -> None:
    document = load_fixture("pull_request", "opened")
    body = urlencode({"payload": document.decode()}).encode()
    delivery = redis_ns.new_id()
    r = signed_post(client, body, event="pull_request", secret=SECRET, delivery=delivery,
                    content_type="application/x-www-form-urlencoded")
    assert r.status_code == 202
    record = redis_ns.client.hgetall(queue_of(client.application).keys.delivery(delivery))
    assert record[b"body"] == document  # workers always get the JSON document
    assert record[b"work_item"] == b"github:Codertocat/Hello-World#2"


def _fixture_id(item: tuple[str, Path]) -> str:
    return str(item[1].relative_to(FIXTURES_DIR))


@pytest.mark.parametrize("item", fixture_files(), ids=_fixture_id)
def test_every_fixture_is_accepted(client, app, redis_ns, item: tuple[str, Path]) -> None:
    event, path = item
    delivery = redis_ns.new_id()
    r = signed_post(client, path.read_bytes(), event=event, secret=SECRET, delivery=delivery)
    if event == "ping":
        assert r.status_code == 200
        assert queued_ids(app, redis_ns) == [] and wake_jobs(app, redis_ns) == []
    else:
        assert r.status_code == 202, r.get_data(as_text=True)
        assert queued_ids(app, redis_ns) == [delivery]
        assert wake_jobs(app, redis_ns) == [f"{delivery}-wake"]


def test_fixture_dir_is_populated() -> None:
    events = {event for event, _ in fixture_files()}
    assert {"issues", "pull_request", "check_run", "ping", "push"} <= events
    assert len(fixture_files()) >= 100


# --- rejections ----------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["X-GitHub-Event", "X-GitHub-Delivery"])
def test_missing_github_headers_400(client, redis_ns, missing: str) -> None:
    r = signed_post(client, b"{}", event="issues", secret=SECRET, headers={missing: None})
    assert missing in assert_error(r, 400)["error"]
    assert redis_ns.existing_keys() == []


def test_headers_checked_before_signature(client) -> None:
    r = signed_post(client, b"{}", event="issues", secret=SECRET,
                    headers={"X-GitHub-Delivery": None, "X-Hub-Signature-256": None})
    assert_error(r, 400)


def test_malformed_delivery_id_400_not_echoed(client) -> None:
    r = signed_post(client, b"{}", event="issues", secret=SECRET, delivery="evil<script>")
    assert "evil" not in assert_error(r, 400)["error"]


def test_missing_signature_401(client, redis_ns) -> None:
    r = signed_post(client, b"{}", event="issues", secret=SECRET,
                    headers={"X-Hub-Signature-256": None})
    assert "X-Hub-Signature-256" in assert_error(r, 401)["error"]
    assert redis_ns.existing_keys() == []


@pytest.mark.parametrize(
    "signature",
    ["sha256=" + "0" * 64, "sha1=abc", "sha256=nothex", "garbage"],
)
def test_wrong_signature_401(client, redis_ns, signature: str) -> None:
    r = signed_post(client, b'{"a": 1}', event="issues", secret=SECRET,
                    headers={"X-Hub-Signature-256": signature})
    data = assert_error(r, 401)
    assert signature not in data["error"]
    assert redis_ns.existing_keys() == []


def test_signature_with_unknown_secret_401(client) -> None:
    r = signed_post(client, b"{}", event="issues", secret=b"someone-else")
    assert_error(r, 401)


def test_bad_json_with_valid_signature_400(client, redis_ns) -> None:
    r = signed_post(client, b'{"oops": ', event="issues", secret=SECRET)
    data = assert_error(r, 400)
    assert "oops" not in data["error"]
    assert redis_ns.existing_keys() == []


def test_json_array_400(client) -> None:
    assert_error(signed_post(client, b"[1]", event="issues", secret=SECRET), 400)


def test_unsupported_content_type_415(client) -> None:
    r = signed_post(client, b"{}", event="issues", secret=SECRET, content_type="text/plain")
    assert_error(r, 415)


def test_oversize_413_before_reading(redis_ns) -> None:
    app = create_app(settings_for(redis_ns, max_body_bytes=1024), redis=redis_ns.client)
    body = json.dumps({"pad": "x" * 2048}).encode()
    r = signed_post(app.test_client(), body, event="issues", secret=SECRET)
    assert_error(r, 413)
    assert redis_ns.existing_keys() == []


def test_oversize_chunked_body_413_json(redis_ns) -> None:
    """No Content-Length (chunked): Werkzeug's own 413 comes back in our JSON shape."""
    app = create_app(settings_for(redis_ns, max_body_bytes=1024), redis=redis_ns.client)
    body = json.dumps({"pad": "x" * 4096}).encode()
    r = app.test_client().post(
        "/webhook",
        input_stream=io.BytesIO(body),
        headers={
            "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": redis_ns.new_id(),
            "X-Hub-Signature-256": sign_body(body, SECRET),
            "Content-Type": "application/json",
            "Transfer-Encoding": "chunked",
        },
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert_error(r, 413)
    assert redis_ns.existing_keys() == []


def test_body_at_limit_accepted(redis_ns) -> None:
    body = json.dumps({"pad": ""}).encode()
    body = json.dumps({"pad": "x" * (1024 - len(body))}).encode()
    assert len(body) == 1024
    app = create_app(settings_for(redis_ns, max_body_bytes=1024), redis=redis_ns.client)
    r = signed_post(app.test_client(), body, event="issues", secret=SECRET,
                    delivery=redis_ns.new_id())
    assert r.status_code == 202


def test_webhook_served_in_front_of_flask_and_by_its_route_alike(app, redis_ns) -> None:
    # POST /webhook is answered by the WSGI dispatcher in front of Flask; the Flask route
    # (reached when the dispatcher is bypassed) answers the same way.
    assert isinstance(app.wsgi_app, WebhookDispatcher)
    body = load_fixture("issues", "opened")
    fast = signed_post(app.test_client(), body, event="issues", secret=SECRET,
                       delivery=redis_ns.new_id())
    app.wsgi_app = app.wsgi_app.fallback
    slow = signed_post(app.test_client(), body, event="issues", secret=SECRET,
                       delivery=redis_ns.new_id())
    assert (fast.status_code, slow.status_code) == (202, 202)
    assert fast.headers["Content-Type"] == slow.headers["Content-Type"] == "application/json"
    assert fast.get_json()["queued"] is slow.get_json()["queued"] is True
    bad = app.test_client().post("/webhook", data=b"{}", headers={"X-GitHub-Event": "issues"})
    assert_error(bad, 400)


def test_flask_errors_are_json(client) -> None:
    assert_error(client.get("/nope"), 404)
    r = client.get("/webhook")
    assert_error(r, 405)
    assert "POST" in r.headers["Allow"]


# --- Redis trouble -------------------------------------------------------------------------


def test_redis_unreachable_503_fast_nothing_written(redis_ns) -> None:
    app = create_app(settings_for(redis_ns, redis_url=CLOSED_PORT_URL))
    body = load_fixture("issues", "opened")
    delivery = redis_ns.new_id()
    started = time.monotonic()
    r = signed_post(app.test_client(), body, event="issues", secret=SECRET, delivery=delivery)
    assert time.monotonic() - started < 3
    assert_error(r, 503)
    assert r.headers["Retry-After"].isdigit()
    assert redis_ns.existing_keys() == []
    # Not marked seen anywhere: once Redis is back the same delivery is queued.
    good = create_app(settings_for(redis_ns), redis=redis_ns.client)
    r = signed_post(good.test_client(), body, event="issues", secret=SECRET, delivery=delivery)
    assert r.status_code == 202


def test_too_few_replicas_503_taken_back_then_accepted(redis_ns) -> None:
    """THE_LOOP_RECEIVER_REPLICAS more than the test Redis has: WAIT times out, the
    delivery is answered 503 with Retry-After and a reason naming the replicas (no Redis
    text), nothing of it is left, and the same delivery is accepted later."""
    have = int(redis_ns.client.info("replication").get("connected_slaves", 0))
    app = create_app(settings_for(redis_ns, replicas=have + 1, replicas_timeout_ms=50),
                     redis=redis_ns.client)
    body = load_fixture("issues", "opened")
    delivery = redis_ns.new_id()
    r = signed_post(app.test_client(), body, event="issues", secret=SECRET, delivery=delivery)
    data = assert_error(r, 503)
    assert data["error"] == (f"not yet on {have + 1} Redis replica(s) ({have} acknowledged), "
                             "retry later")
    assert r.headers["Retry-After"].isdigit()
    assert [k for k in redis_ns.existing_keys() if delivery in k] == []
    good = create_app(settings_for(redis_ns), redis=redis_ns.client)
    r = signed_post(good.test_client(), body, event="issues", secret=SECRET, delivery=delivery)
    assert r.status_code == 202


def test_script_error_503_not_500(client, app, redis_ns) -> None:
    delivery = redis_ns.new_id()
    inbox = queue_of(app).keys.inbox("github:Codertocat/Hello-World#1")
    redis_ns.client.set(inbox, "wrong type")
    r = signed_post(client, load_fixture("issues", "opened"), event="issues", secret=SECRET,
                    delivery=delivery)
    data = assert_error(r, 503)
    assert "WRONGTYPE" not in data["error"]
    assert redis_ns.existing_keys() == [inbox]


# --- health --------------------------------------------------------------------------------


def test_healthz_needs_no_redis(redis_ns) -> None:
    app = create_app(settings_for(redis_ns, redis_url=CLOSED_PORT_URL))
    r = app.test_client().get("/healthz")
    assert r.status_code == 200
    assert r.get_json() == {"ok": True}


def test_readyz(client, redis_ns) -> None:
    r = client.get("/readyz")
    assert r.status_code == 200
    assert r.get_json() == {"ok": True}
    bad = create_app(settings_for(redis_ns, redis_url=CLOSED_PORT_URL)).test_client()
    assert_error(bad.get("/readyz"), 503)


# --- logging, wiring, deployment files ----------------------------------------------------


def test_one_log_line_per_delivery_without_body_or_secret(client, redis_ns, caplog) -> None:
    caplog.set_level(logging.INFO, logger="the_loop.webhook")
    delivery = redis_ns.new_id()
    signed_post(client, load_fixture("issues", "opened"), event="issues", secret=SECRET,
                delivery=delivery)
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "the_loop.webhook"]
    assert len(lines) == 1
    line = lines[0]
    for part in (f"delivery={delivery}", "event=issues", "action=opened", "outcome=queued"):
        assert part in line
    assert "Codertocat" not in line and "test-secret" not in line

    caplog.clear()
    signed_post(client, b"{}", event="issues", secret=b"nope", delivery="x-1")
    (line,) = [rec.getMessage() for rec in caplog.records if rec.name == "the_loop.webhook"]
    assert "delivery=x-1" in line and "outcome=rejected" in line and "status=401" in line


def test_build_receiver_from_env(redis_ns) -> None:
    env = {
        "THE_LOOP_WEBHOOK_SECRET": "from-env",
        "REDIS_URL": redis_ns.url,
        "THE_LOOP_QUEUE": redis_ns.queue_name,
        "THE_LOOP_REDIS_PREFIX": redis_ns.prefix,
    }
    app = build_receiver(Settings.from_env(env, process="receiver"))
    state = app.extensions[EXTENSION_KEY]
    assert isinstance(state, ReceiverState)
    assert state.settings.secrets == (b"from-env",)
    assert state.queue.queue_name == redis_ns.queue_name
    r = signed_post(app.test_client(), b"{}", event="issues", secret="from-env",
                    delivery=redis_ns.new_id())
    assert r.status_code == 202
    state.redis.close()


def test_the_receiver_without_secret_fails_fast() -> None:
    with pytest.raises(SettingsError, match="THE_LOOP_WEBHOOK_SECRET"):
        Settings.from_env({}, process="receiver")
    with pytest.raises(SettingsError, match="THE_LOOP_WEBHOOK_SECRET"):
        build_receiver(Settings.from_env({}, process="command"))


def test_wsgi_module_builds_app(monkeypatch, redis_ns) -> None:
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", "wsgi-secret")
    monkeypatch.setenv("REDIS_URL", CLOSED_PORT_URL)
    namespace = runpy.run_module("the_loop.wsgi")
    assert isinstance(namespace["app"], Flask)
    assert namespace["app"].test_client().get("/healthz").status_code == 200


def test_gunicorn_conf_defaults_and_env(monkeypatch) -> None:
    path = Path(__file__).resolve().parents[2] / "the_loop" / "gunicorn_conf.py"
    for name in ("THE_LOOP_BIND", "PORT", "THE_LOOP_WEB_WORKERS", "THE_LOOP_WEB_THREADS",
                 "THE_LOOP_ACCESS_LOG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("THE_LOOP_WEBHOOK_SECRET", raising=False)  # the workers need it
    conf = runpy.run_path(str(path))
    assert (conf["workers"], conf["threads"], conf["worker_class"]) == (2, 1, "gevent")
    assert conf["worker_connections"] == 1000 and conf["keepalive"] == 5
    assert (conf["limit_request_line"], conf["limit_request_fields"]) == (2048, 50)
    assert conf["bind"] == ["127.0.0.1:8000"]
    assert conf["timeout"] == 30 and conf["accesslog"] is None

    monkeypatch.setenv("PORT", "9000")
    monkeypatch.setenv("THE_LOOP_WEB_THREADS", "4")
    conf = runpy.run_path(str(path))
    assert conf["bind"] == ["0.0.0.0:9000"] and conf["worker_class"] == "gthread"
    monkeypatch.setenv("THE_LOOP_BIND", "unix:/tmp/x.sock")
    assert runpy.run_path(str(path))["bind"] == ["unix:/tmp/x.sock"]
    monkeypatch.setenv("THE_LOOP_WEB_WORKERS", "zero")
    with pytest.raises(SystemExit, match="THE_LOOP_WEB_WORKERS"):
        runpy.run_path(str(path))


def test_redis_down_logs_one_line(redis_ns, caplog) -> None:
    caplog.set_level(logging.INFO, logger="the_loop.webhook")
    app = create_app(settings_for(redis_ns, redis_url=CLOSED_PORT_URL))
    delivery = redis_ns.new_id()
    signed_post(app.test_client(), load_fixture("issues", "opened"), event="issues",
                secret=SECRET, delivery=delivery)
    (line,) = [rec.getMessage() for rec in caplog.records if rec.name == "the_loop.webhook"]
    for part in (f"delivery={delivery}", "event=issues", "action=opened",
                 "outcome=unavailable", "status=503"):
        assert part in line
