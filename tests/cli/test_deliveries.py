"""``the-loop deliveries`` (dead letters) and ``the-loop redeliver`` (GitHub's App delivery
log, mocked with ``responses`` in the shapes of GitHub's documentation, "REST API
endpoints for GitHub App webhooks")."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
import responses
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from foundation.inbox.dead import Deliveries
from foundation.settings import WorkerSettings
from graph.state import WorkItemState
from the_loop.cli import main
from the_loop.redeliver import missed, parse_duration
from workers.state import RedisStateStore

API = "https://github.example.com/api/v3"
#: Where the mocked answers are: PyGithub puts the port into every URL.
AT = "https://github.example.com:443/api/v3"
NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture(scope="module")
def pem():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@pytest.fixture
def app_env(monkeypatch, pem):
    monkeypatch.setenv("THE_LOOP_GITHUB_API_URL", API)
    monkeypatch.setenv("THE_LOOP_GITHUB_APP_ID", "4242")
    monkeypatch.setenv("THE_LOOP_GITHUB_PRIVATE_KEY", pem)
    monkeypatch.delenv("THE_LOOP_GITHUB_PRIVATE_KEY_PATH", raising=False)


def attempt(id_, guid, minutes_ago, status_code, *, redelivery=False, event="issue_comment",
            action="created"):
    """One item of ``GET /app/hook/deliveries``, as GitHub documents it."""
    return {
        "id": id_,
        "guid": guid,
        "delivered_at": (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "redelivery": redelivery,
        "duration": 0.27,
        "status": "OK" if 200 <= status_code < 400 else (
            "Timed out" if status_code == 0 else f"Invalid HTTP Response: {status_code}"),
        "status_code": status_code,
        "event": event,
        "action": action,
        "installation_id": 123,
        "repository_id": 456,
        "throttled_at": None,
    }


PAGE1 = [
    attempt(12, "g-redelivered-ok", 5, 202, redelivery=True),
    attempt(11, "g-503", 10, 503),
    attempt(10, "g-ok", 20, 202),
]
PAGE2 = [
    attempt(9, "g-redelivered-ok", 30, 503),
    attempt(8, "g-timeout", 40, 0, event="pull_request_review", action="submitted"),
    attempt(7, "g-old-failure", 60 * 24, 503),  # older than the window
]


def mock_log(rsps):
    rsps.get(f"{AT}/app/hook/deliveries", json=PAGE1, match=[
        responses.matchers.query_param_matcher({"per_page": "100"})], headers={
        "Link": f'<{API}/app/hook/deliveries?per_page=100&cursor=v1_9>; rel="next"'})
    rsps.get(f"{AT}/app/hook/deliveries", json=PAGE2, match=[
        responses.matchers.query_param_matcher({"per_page": "100", "cursor": "v1_9"})])


def test_durations():
    assert parse_duration("30m") == timedelta(minutes=30)
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("2d") == timedelta(days=2)
    for bad in ("", "10", "abc", "0m", "5x"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_a_delivery_counts_as_missed_only_if_no_attempt_got_through():
    found = missed(PAGE1 + PAGE2[:2])
    assert [m.guid for m in found] == ["g-timeout", "g-503"]
    assert found[1].attempt["id"] == 11


@responses.activate(assert_all_requests_are_fired=True)
def test_redeliver_asks_github_for_each_missed_delivery_once(app_env):
    """Given a delivery log (two pages, cursor pagination) with one delivery that failed
      and was redelivered OK, one that failed (503), one that timed out, one OK, and a
      failure older than the window
    When `the-loop redeliver --since 6h` runs
    Then exactly the 503 and the timeout are redelivered, as the App (a JWT)."""
    mock_log(responses)
    for id_ in (11, 8):
        responses.post(f"{AT}/app/hook/deliveries/{id_}/attempts", status=202,
                       json={"message": "Accepted"})
    out = CliRunner().invoke(main, ["redeliver", "--since", "6h"])
    assert out.exit_code == 0, out.output
    assert "redelivered g-503 issue_comment.created" in out.output
    assert "redelivered g-timeout pull_request_review.submitted" in out.output
    assert "2 deliveries never got through, 2 redelivered" in out.output
    auth = responses.calls[0].request.headers["Authorization"]
    scheme, token = auth.split(" ")
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert scheme == "Bearer" and str(claims["iss"]) == "4242"
    assert responses.calls[0].request.headers["X-GitHub-Api-Version"] == "2022-11-28"


@responses.activate(assert_all_requests_are_fired=True)
def test_dry_run_asks_nothing_and_json_lists_what_was_missed(app_env):
    mock_log(responses)
    out = CliRunner().invoke(main, ["redeliver", "--since", "6h", "--dry-run", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["action"] == "redeliver" and doc["status"] == "dry-run" and doc["ok"] is True
    assert [m["guid"] for m in doc["missed"]] == ["g-timeout", "g-503"]
    assert doc["missed"][0]["status_code"] == 0 and doc["redelivered"] == []
    assert doc["checked"] == 5
    assert all(c.request.method == "GET" for c in responses.calls)


@responses.activate
def test_a_refused_redelivery_is_reported_and_the_exit_status_says_so(app_env):
    mock_log(responses)
    responses.post(f"{AT}/app/hook/deliveries/11/attempts", status=202)
    responses.post(f"{AT}/app/hook/deliveries/8/attempts", status=422,
                   json={"message": "Validation Failed"})
    out = CliRunner().invoke(main, ["redeliver", "--since", "6h", "--json"])
    assert out.exit_code == 1
    doc = json.loads(out.output)
    assert doc["status"] == "partial" and doc["redelivered"] == ["g-503"]
    assert "HTTP 422" in doc["errors"]["g-timeout"]
    assert "Validation Failed" not in out.output  # GitHub's words are not echoed


@responses.activate
def test_a_rejected_jwt_names_the_settings_to_check(app_env):
    responses.get(f"{AT}/app/hook/deliveries", status=401,
                  json={"message": "A JSON web token could not be decoded"})
    out = CliRunner().invoke(main, ["redeliver", "--since", "1h"])
    assert out.exit_code == 1
    assert "HTTP 401" in out.output and "THE_LOOP_GITHUB_APP_ID" in out.output


def test_redeliver_needs_the_apps_credentials(monkeypatch):
    for name in ("THE_LOOP_GITHUB_APP_ID", "THE_LOOP_GITHUB_PRIVATE_KEY",
                 "THE_LOOP_GITHUB_PRIVATE_KEY_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GH_TOKEN", "ghp_not_enough")
    out = CliRunner().invoke(main, ["redeliver", "--since", "1h"])
    assert out.exit_code == 1 and "THE_LOOP_GITHUB_APP_ID" in out.output
    bad = CliRunner().invoke(main, ["redeliver", "--since", "soon"])
    assert bad.exit_code == 2 and "--since" in bad.output


# -- dead letters ---------------------------------------------------------------------


@pytest.fixture
def ledger(redis_ns, monkeypatch):
    monkeypatch.setenv("REDIS_URL", redis_ns.url)
    monkeypatch.setenv("THE_LOOP_REDIS_PREFIX", redis_ns.prefix)
    monkeypatch.setenv("THE_LOOP_QUEUE", redis_ns.queue_name)
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    return Deliveries(redis_ns.client, settings, store), store, redis_ns


def park_one(ledger, store, ns, ref="github:o/r#1"):
    delivery = f"{ns.token}-poison"
    ns.client.hset(ledger.keys.delivery(delivery), mapping={
        "event": "issue_comment", "work_item": ref, "body": "{}", "attempts": 5})
    store.save(WorkItemState(ref, "g", "requirements-approval", status="waiting"))
    ledger.park(delivery, "issue_comment", ref, "RuntimeError", 5)
    return delivery


def test_deliveries_failed_lists_the_parked_ones(ledger):
    ledger, store, ns = ledger
    delivery = park_one(ledger, store, ns)
    out = CliRunner().invoke(main, ["deliveries", "failed"])
    assert out.exit_code == 0, out.output
    assert delivery in out.output and "github:o/r#1" in out.output
    assert "5 attempts" in out.output and "RuntimeError" in out.output
    doc = json.loads(CliRunner().invoke(main, ["deliveries", "failed", "--json"]).output)
    assert doc["action"] == "deliveries.failed" and doc["status"] == "parked"
    assert doc["failed"][0]["delivery"] == delivery and doc["failed"][0]["payload_kept"]
    assert "body" not in json.dumps(doc)


def test_deliveries_retry_puts_it_back_at_the_head_of_its_inbox(ledger):
    ledger, store, ns = ledger
    delivery = park_one(ledger, store, ns)
    ns.client.rpush(ledger.keys.inbox("github:o/r#1"), f"{ns.token}-later")
    out = CliRunner().invoke(main, ["deliveries", "retry", delivery, "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["status"] == "queued" and doc["job"].startswith(delivery)
    assert ns.client.lrange(ledger.keys.inbox("github:o/r#1"), 0, -1) == [
        delivery.encode(), f"{ns.token}-later".encode()]
    assert ns.client.hget(ledger.keys.delivery(delivery), "attempts") == b"0"
    assert store.load("github:o/r#1").blocked_by_delivery is None
    assert ledger.failed() == []
    again = CliRunner().invoke(main, ["deliveries", "retry", delivery])
    assert again.exit_code == 1 and "not parked" in again.output


def test_deliveries_retry_of_an_expired_payload_points_at_redeliver(ledger):
    ledger, store, ns = ledger
    delivery = park_one(ledger, store, ns)
    ns.client.delete(ledger.keys.delivery(delivery))
    out = CliRunner().invoke(main, ["deliveries", "retry", delivery])
    assert out.exit_code == 1 and "the-loop redeliver" in out.output
