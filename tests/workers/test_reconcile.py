"""The reconciler (:mod:`workers.reconcile`) against the fake GitHub's App delivery log
(``GET /app/hook/deliveries``, ``POST .../attempts``) over HTTP, with the real receiver
on loopback and real Redis: what failed or never reached Redis is redelivered once, with
its ``guid``, and lands; what the receiver had is a no-op; a second run asks nothing; two
reconcilers at once: one runs."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from redis.backoff import NoBackoff
from redis.retry import Retry
from werkzeug.serving import make_server

from foundation.inbox.enqueue import DeliveryQueue
from foundation.settings import GitHubSettings, ReceiverSettings
from integrations.github import GitHubClients
from integrations.hook_deliveries import AppHookDeliveries
from the_loop.sandbox.fakegithub.http import serve
from the_loop.sandbox.github import SandboxGitHub
from webhook.app import create_app
from webhook.signature import sign
from workers.reconcile import ReconcileKeys, Reconciler

SECRET = "reconcile-secret"
APP_ID = 4242
CLOSED = "http://127.0.0.1:1/webhook"


@pytest.fixture(scope="module")
def pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def receiver(connection: redis.Redis, prefix: str, queue: str):
    """The real receiver (webhook/app.py) on loopback; returns its URL and server."""
    settings = ReceiverSettings(secrets=(SECRET.encode(),), redis_url="redis://unused",
                                queue_name=queue, redis_prefix=prefix)
    server = make_server("127.0.0.1", 0, create_app(settings, redis=connection),
                         threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.port}/webhook", server


class World:
    """The fake GitHub delivering to our receiver, a second receiver whose Redis writes
    are lost (another prefix: a primary that died), one answering 503 (Redis down)."""

    def __init__(self, ns, pem: str) -> None:
        self.ns = ns
        self.ours, s1 = receiver(ns.client, ns.prefix, ns.queue_name)
        self.lost, s2 = receiver(ns.client, ns.prefix + "-lost", ns.queue_name + "-lost")
        # No retries: redis-py's default retry takes ~3 s a command to fail, and the
        # receiver's 503 must come well within the fake's delivery timeout.
        down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                           retry=Retry(NoBackoff(), 0))
        self.down, s3 = receiver(down, ns.prefix, ns.queue_name)
        self.servers = [s1, s2, s3]
        self.fake = SandboxGitHub(webhook_url=self.ours, secret=SECRET, app_id=APP_ID,
                                  delivery_attempts=1, app_key=pem)
        self.fake.add_repo("o/r")
        self.url, self._stop = serve(self.fake)
        self.fake.start_delivering()
        self.queue = DeliveryQueue(ns.client, queue_name=ns.queue_name, prefix=ns.prefix)
        github = GitHubSettings(api_url=self.url, app_id=APP_ID, private_key=pem,
                                retries=0, read_interval=0.0, write_interval=0.0)
        self.api = GitHubClients(github).for_app()
        self.now = time.time()

    def reconciler(self, *, per_page: int = 2, **kwargs) -> Reconciler:
        log = kwargs.pop("log", None) or AppHookDeliveries(self.api, per_page=per_page)
        return Reconciler(self.ns.client, ReconcileKeys(self.ns.prefix), log,
                          self.queue.seen, interval=600, clock=lambda: self.now, **kwargs)

    def deliver(self, to: str, n: int = 1) -> list[str]:
        """``n`` deliveries posted to ``to``; returns their guids once GitHub logged them."""
        self.fake.webhook_url = to
        made = [self.fake.emit("issues", {"action": "opened", "issue": {"number": i + 1},
                                          "repository": {"full_name": "o/r", "id": 7},
                                          "sender": {"login": "octocat"}}).id
                for i in range(n)]
        assert self.fake.wait_delivered(60)
        self.fake.webhook_url = self.ours
        return made

    def close(self) -> None:
        self.fake.stop_delivering()
        self._stop()
        for server in self.servers:
            server.shutdown()


@pytest.fixture
def world(redis_ns, pem):
    w = World(redis_ns, pem)
    yield w
    w.close()
    for key in redis_ns.client.scan_iter(match=f"{redis_ns.prefix}-lost*"):
        redis_ns.client.delete(key)


def attempts_of(fake: SandboxGitHub, guid: str):
    return [a for a in fake.hook_log if a.guid == guid]


def test_failed_and_unreceived_deliveries_are_redelivered_once_and_land(world):
    """Given, in the App's delivery log (pages of 2): two delivered OK to our receiver,
    two that failed (receiver unreachable; receiver answering 503, Redis down), one
    delivered OK whose write was lost (no record in our Redis), one GitHub logged as
    timed out although our receiver had queued it, a ping, and a failure older than
    GitHub redelivers
    When the reconciler runs
    Then it asks GitHub once for each failed and the unreceived one, each comes back
    with its guid and `redelivery: true`, and now has a record; the one already queued
    is answered 200 and queued nowhere again; a second run asks nothing."""
    fake = world.fake
    ok = world.deliver(world.ours, 2)
    unreachable = world.deliver(CLOSED)[0]
    refused = world.deliver(world.down)[0]
    lost = world.deliver(world.lost)[0]
    body = attempts_of(fake, ok[0])[0].body
    # Our receiver queued it, but GitHub gave up waiting for the answer ("timed out").
    queued = "queued-but-timed-out"
    assert requests.post(world.ours, data=body, timeout=5, headers={
        "X-GitHub-Event": "issues", "X-GitHub-Delivery": queued,
        "Content-Type": "application/json", "X-Hub-Signature-256": sign(body, SECRET),
    }).status_code == 202
    fake.log_delivery(queued, "issues", "opened", 0, body=body)
    fake.log_delivery("ping-guid", "ping", None, 0)
    fake.log_delivery("old-guid", "issues", "opened", 503,
                      at=datetime.now(UTC) - timedelta(days=4), body=body)
    assert [a.status_code for a in attempts_of(fake, refused)] == [503]
    assert [a.status_code for a in attempts_of(fake, unreachable)] == [0]
    assert world.queue.seen([*ok, unreachable, refused, lost, queued]) == [
        True, True, False, False, False, True]

    logged = len(fake.hook_log)

    run = world.reconciler().run_if_due()

    assert run is not None and run.outcome == "done" and not run.errors
    assert run.asked == {unreachable: "failed", refused: "failed", lost: "unreceived",
                         queued: "failed"}
    assert run.checked == logged - 1  # all but the 4-day-old one
    assert fake.wait_delivered(10)
    for guid in (unreachable, refused, lost, queued):
        again = [a for a in attempts_of(fake, guid) if a.redelivery]
        assert len(again) == 1, guid
        assert again[0].status_code == (200 if guid == queued else 202)
    assert world.queue.seen([unreachable, refused, lost]) == [True, True, True]
    assert len(fake.redeliveries) == 4
    state = world.reconciler().state()
    assert state["outcome"] == "done" and int(state["cursor"]) == max(
        a.id for a in fake.hook_log[:logged] if a.guid != "old-guid")

    world.now += 601
    again = world.reconciler().run_if_due()
    assert again is not None and again.outcome == "done" and again.asked == {}
    assert len(fake.redeliveries) == 4


def test_a_run_is_not_due_again_before_the_interval_on_any_worker(world):
    world.deliver(CLOSED)
    assert world.reconciler(owner="w1").run_if_due() is not None
    world.now += 599
    assert world.reconciler(owner="w2").run_if_due() is None
    world.now += 1
    run = world.reconciler(owner="w2").run_if_due()
    assert run is not None and run.asked == {}
    assert world.reconciler().state()["worker"] == "w2"


def test_a_run_stopped_by_its_bound_keeps_its_cursor_and_the_next_asks_the_rest(world):
    missed = world.deliver(CLOSED, 3)
    first = world.reconciler(max_redeliveries=2).run()
    assert first.outcome == "partial" and list(first.asked) == missed[:2]
    assert "cursor" not in world.reconciler().state()
    world.now += 600
    second = world.reconciler(max_redeliveries=2).run_if_due()
    assert second is not None and second.outcome == "done"
    assert list(second.asked) == missed[2:]
    assert len(world.fake.redeliveries) == 3


class Held(AppHookDeliveries):
    """The delivery log, whose read waits until the test lets it go."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reading = threading.Event()
        self.go = threading.Event()

    def window(self, *args, **kwargs):
        self.reading.set()
        assert self.go.wait(10)
        return super().window(*args, **kwargs)


def test_two_reconcilers_at_once_one_runs(world):
    """Given a failed delivery, when two workers' reconcilers start at once, the second
    finds the run lock taken and does nothing; GitHub is asked once."""
    world.deliver(CLOSED)
    held = Held(world.api, per_page=2)
    results: list = []
    first = threading.Thread(target=lambda: results.append(
        world.reconciler(log=held, owner="w1").run_if_due()))
    first.start()
    assert held.reading.wait(10)
    assert world.reconciler(owner="w2").run_if_due() is None  # the lock is taken
    held.go.set()
    first.join(10)
    assert results and results[0] is not None and len(results[0].asked) == 1
    assert len(world.fake.redeliveries) == 1
    assert world.reconciler().state()["worker"] == "w1"


def test_github_unreachable_is_an_error_run_and_nothing_is_marked(world, pem):
    missed = world.deliver(CLOSED)[0]
    github = GitHubSettings(api_url="http://127.0.0.1:1", app_id=APP_ID, private_key=pem,
                            retries=0)
    down = AppHookDeliveries(GitHubClients(github).for_app())
    run = world.reconciler(log=down).run()
    assert run.outcome == "error" and "unreachable" in (run.error or "")
    world.now += 600
    assert world.reconciler().run_if_due().asked == {missed: "failed"}


def test_the_dashboard_shows_the_last_run_and_its_cursor(world, redis_ns):
    from tests.web.conftest import TOKEN, make_site

    site = make_site(redis_ns, None)
    before = site.get("/api/v1/deliveries/failed").get_json()
    assert before["reconciler"] is None
    missed = world.deliver(CLOSED)[0]
    world.reconciler(owner="worker-7").run()
    doc = site.get("/api/v1/deliveries/failed").get_json()["reconciler"]
    assert doc["outcome"] == "done" and doc["worker"] == "worker-7"
    assert doc["recovered"] == {"failed": 1, "unreceived": 0}
    assert doc["cursor"] == attempts_of(world.fake, missed)[0].id and doc["cursor_at"]
    base = "http://dashboard.test"
    site.client.post("/ui/login", base_url=base, data={"token": TOKEN, "next": "/ui/"},
                     headers={"Origin": base})
    html = site.client.get("/ui/deliveries/failed", base_url=base).data.decode()
    line = html.split('<p class="reconciler" data-outcome="done">')[1].split("</p>")[0]
    assert "<code>worker-7</code>" in line and "1 failed and 0 unreceived" in line
    assert f"cursor <code>{doc['cursor']}</code>" in line


def test_the_reaper_round_a_worker_wins_runs_it_when_due_and_counts_it(world, redis_ns):
    """A worker's reaper round (workers/reaper.py) runs the processor's reconciler when
    it is due, once per interval across workers; the metrics count the run and what it
    recovered."""
    from prometheus_client import REGISTRY

    from foundation.settings import WorkerSettings
    from the_loop.graphs import load_graph
    from the_loop.wiring import build_processor
    from workers.reaper import Reaper

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = (sample("the_loop_reconcile_runs_total", outcome="done"),
              sample("the_loop_deliveries_recovered_total", reason="failed"))
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    processor = build_processor(settings, redis_ns.client, load_graph(), None)
    processor.reconciler = world.reconciler()
    missed = world.deliver(CLOSED)[0]
    reaper = Reaper(processor, f"w-{redis_ns.token}")
    counts = reaper.round()
    assert counts["recovered"] == 1 and world.fake.redeliveries
    assert world.reconciler().state()["worker"] == f"w-{redis_ns.token}"
    assert sample("the_loop_reconcile_runs_total", outcome="done") == before[0] + 1
    assert sample("the_loop_deliveries_recovered_total", reason="failed") == before[1] + 1
    assert world.fake.wait_delivered(10) and world.queue.seen([missed]) == [True]
    redis_ns.client.delete(processor.keys.reaper)  # the next round, at once
    assert "recovered" not in reaper.round()  # not due again before the interval


def test_without_the_apps_credentials_a_worker_has_no_reconciler(redis_ns):
    from foundation.settings import Settings
    from the_loop.wiring import reconciler

    token_mode = Settings.from_env({"GH_TOKEN": "t",
                                    "THE_LOOP_RECONCILE_INTERVAL": "15m"}, process="worker")
    assert token_mode.worker.reconcile_interval == 900
    assert reconciler(token_mode, redis_ns.client) is None
