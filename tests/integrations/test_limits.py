"""GitHub limits: rate-limit retries (primary and secondary), writes never retried on 5xx,
invisible repositories, and the cross-worker write throttle on the real Redis."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import redis
import responses

from graph.ports import IntegrationError, NotFound, RateLimited
from integrations.github import GitHubClients, GitHubSettings
from integrations.throttle import WriteThrottle
from tests.integrations.test_github_api import rsa_pem  # noqa: F401 (fixture)
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve

API = "https://api.github.com:443"
REPO = "Codertocat/Hello-World"
R = f"{API}/repos/{REPO}"
TOKEN = "ghp_limits_secret"


def api(retries: int = 2, throttle: Any = None, installation: int | None = None) -> Any:
    settings = GitHubSettings(token=TOKEN, write_interval=0.0, read_interval=0.0,
                              retries=retries)
    return GitHubClients(settings, throttle=throttle).for_installation(installation)


@pytest.fixture
def rs():
    with responses.RequestsMock() as mock:
        yield mock


COMMENT = {"id": 1, "html_url": "https://github.com/x#1"}


# --------------------------------------------------------------------------- rate limits


def test_secondary_limit_with_short_retry_after_retries_idempotent_requests(rs) -> None:
    rs.patch(f"{R}/issues/comments/1", status=403, headers={"Retry-After": "0"},
             json={"message": "You have exceeded a secondary rate limit."})
    rs.patch(f"{R}/issues/comments/1", json=COMMENT)
    assert api().call("update-comment", repo=REPO, comment_id=1, body="x")["id"] == 1
    assert len(rs.calls) == 2


def test_429_with_short_retry_after_is_retried(rs) -> None:
    rs.get(R, status=429, headers={"Retry-After": "0"}, json={})
    rs.get(R, json={"full_name": REPO, "default_branch": "main"})
    assert api().call("get-repository", repo=REPO)["full_name"] == REPO
    assert len(rs.calls) == 2


@pytest.mark.parametrize("status", [403, 429])
def test_a_rate_limited_post_is_not_resent_by_the_transport(rs, status: int) -> None:
    # If GitHub had done the write and only its answer was a rate limit, a second POST
    # would comment twice; the runtime's effect log retries it, reconciling first.
    rs.post(f"{R}/issues/1/comments", status=status, headers={"Retry-After": "3"},
            json={"message": "You have exceeded a secondary rate limit."})
    with pytest.raises(IntegrationError) as info:
        api().call("comment", repo=REPO, number=1, body="x")
    assert isinstance(info.value, RateLimited)
    assert (info.value.status, info.value.retriable) == (status, True)
    assert info.value.retry_after == 3.0
    assert len(rs.calls) == 1


def test_long_retry_after_is_not_slept_in_the_worker(rs) -> None:
    rs.get(R, status=429, headers={"Retry-After": "120"}, json={})
    started = time.monotonic()
    with pytest.raises(IntegrationError) as info:
        api().call("get-repository", repo=REPO)
    assert time.monotonic() - started < 5 and len(rs.calls) == 1
    assert (info.value.status, info.value.retriable) == (429, True)
    assert "retry-after/reset 120" in str(info.value)


@pytest.fixture
def served() -> Any:
    """The loopback fake GitHub (real HTTP, so retry sleeps really happen; ``responses``
    skips them)."""
    fake = HttpFakeGitHub(tokens=[TOKEN])
    fake.add_repo(REPO)
    url, stop = serve(fake)
    settings = GitHubSettings(api_url=url, token=TOKEN, write_interval=0.0, read_interval=0.0,
                              retries=2)
    clients = GitHubClients(settings)
    yield fake, clients.for_installation(None)
    clients.close()
    stop()


def test_primary_limit_waits_for_a_reset_that_is_near(served) -> None:
    fake, client = served
    reset = str(int(time.time()) + 1)  # GithubRetry waits until reset + 1 s
    fake.fail_next(r"/repos/[^/]+/[^/]+$", 403,
                   {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset},
                   body={"message": "API rate limit exceeded for installation ID 1."})
    started = time.monotonic()
    assert client.call("get-repository", repo=REPO)["full_name"] == REPO
    assert 0.9 < time.monotonic() - started < 5
    assert len(fake.requests) == 2


def test_short_retry_after_is_slept_then_retried(served) -> None:
    fake, client = served
    cid = fake.add_comment(REPO, 1, "before")
    fake.fail_next(r"/comments/\d+$", 403, {"Retry-After": "1"}, method="PATCH",
                   body={"message": "You have exceeded a secondary rate limit."})
    started = time.monotonic()
    client.call("update-comment", repo=REPO, comment_id=cid, body="after")
    assert 0.9 < time.monotonic() - started < 5
    assert fake.comments(REPO, 1)[0]["body"] == "after" and len(fake.requests) == 2


def test_primary_limit_with_a_distant_reset_fails_retriable_at_once(rs) -> None:
    reset = str(int(time.time()) + 3000)
    rs.get(R, status=403, json={"message": "API rate limit exceeded for installation ID 1."},
           headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset})
    started = time.monotonic()
    with pytest.raises(IntegrationError) as info:
        api().call("get-repository", repo=REPO)
    assert time.monotonic() - started < 5 and len(rs.calls) == 1
    assert (info.value.status, info.value.retriable) == (403, True)
    assert reset in str(info.value)


def test_writes_are_not_retried_on_5xx_reads_are(rs) -> None:
    for method, path, op, params in (
        ("POST", "/issues/1/comments", "comment", {"number": 1, "body": "x"}),
        ("PUT", "/contents/a.md", "put-file", {"path": "a.md", "branch": "b", "text": "x"}),
        ("POST", "/check-runs", "create-check-run",
         {"head_sha": "a" * 40, "name": "n", "status": "queued"}),
        ("POST", "/pulls/1/requested_reviewers", "request-reviewers",
         {"number": 1, "reviewers": ["a"]}),
    ):
        rs.add(method, f"{R}{path}", status=502, json={})
        with pytest.raises(IntegrationError) as info:
            api().call(op, repo=REPO, **params)
        assert info.value.retriable
        assert len([c for c in rs.calls if c.request.url.startswith(f"{R}{path}")]) == 1, op


# --------------------------------------------------------------------------- invisible


@pytest.mark.parametrize(
    ("status", "message", "kind", "level", "hint"),
    [
        (404, "Not Found", NotFound, logging.INFO, "not visible to this installation"),
        (403, "Resource not accessible by integration", IntegrationError, logging.WARNING,
         "is the App installed on this repository"),
    ],
)
def test_a_repository_the_app_cannot_see_is_clear_logged_and_not_retried(
    rs, caplog: pytest.LogCaptureFixture, status: int, message: str, kind: type, level: int,
    hint: str,
) -> None:
    caplog.set_level(logging.INFO, logger="the_loop.integrations.github")
    rs.get(R, status=status, json={"message": message})
    with pytest.raises(IntegrationError) as info:
        api(retries=3).call("get-repository", repo=REPO)
    assert type(info.value) is kind and not info.value.retriable
    assert hint in str(info.value) and REPO in str(info.value)
    assert len(rs.calls) == 1
    logged = [r for r in caplog.records if r.name == "the_loop.integrations.github"]
    assert [r.levelno for r in logged] == [level] and hint in logged[0].getMessage()


# --------------------------------------------------------------------------- throttle


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def acquire(self, bucket: str, *, op: str = "write") -> float:
        self.calls.append((bucket, op))
        return 0.0

    def pace(self, bucket: str, *, op: str = "request") -> float:
        return 0.0  # the primary-limit pacing: not what this records

    def observe(self, bucket: str, headers) -> None:
        pass


def test_every_write_method_goes_through_the_throttle_reads_do_not(rs) -> None:
    throttle = Recorder()
    client = api(throttle=throttle)
    rs.get(R, json={"full_name": REPO, "default_branch": "main"})
    rs.post(f"{R}/issues/1/comments", status=201, json=COMMENT)
    rs.patch(f"{R}/issues/comments/1", json=COMMENT)
    rs.delete(f"{R}/issues/1/labels/x", json=[])
    rs.put(f"{R}/contents/a.md", json={"content": {"path": "a.md", "sha": "1"},
                                       "commit": {"sha": "2"}})
    client.call("get-repository", repo=REPO)
    client.call("comment", repo=REPO, number=1, body="x")
    client.call("update-comment", repo=REPO, comment_id=1, body="y")
    client.call("remove-label", repo=REPO, number=1, label="x")
    client.call("put-file", repo=REPO, path="a.md", branch="b", text="x")
    assert throttle.calls == [("token", "comment"), ("token", "update-comment"),
                              ("token", "remove-label"), ("token", "put-file")]


def test_throttle_buckets_are_per_installation(rs, rsa_pem) -> None:  # noqa: F811
    throttle = Recorder()
    settings = GitHubSettings(app_id=1, private_key=rsa_pem[0], write_interval=0.0,
                              read_interval=0.0, retries=0)
    clients = GitHubClients(settings, throttle=throttle)
    rs.post(f"{API}/app/installations/7/access_tokens", status=201,
            json={"token": "ghs_x", "expires_at": "2999-01-01T00:00:00Z"})
    rs.post(f"{R}/issues/1/comments", status=201, json=COMMENT)
    clients.for_installation(7).call("comment", repo=REPO, number=1, body="x")
    assert throttle.calls == [("installation:7", "comment")]


def test_equal_minute_and_hour_caps_start_and_hold_the_hour(redis_ns) -> None:
    # Any pair the settings accept starts (a per-minute cap equal to the per-hour one
    # once divided by zero).
    throttle = WriteThrottle(redis_ns.client, redis_ns.prefix, per_minute=20, per_hour=20,
                             burst=5)
    waits = [throttle.reserve("installation:1") for _ in range(21)]
    assert waits[:5] == [0.0] * 5
    assert waits[5] == pytest.approx(60 / 15, abs=0.1)  # paced: 15 slots after the burst
    assert waits[-1] is None  # past max_wait: refused, the delivery retried later


def test_throttle_spaces_writes_after_a_burst(redis_ns) -> None:
    throttle = WriteThrottle(redis_ns.client, redis_ns.prefix, per_minute=80, per_hour=500,
                             burst=10)
    waits = [throttle.reserve("installation:1") for _ in range(12)]
    assert waits[:10] == [0.0] * 10
    interval = 60 / 70  # 80 a minute with a burst of 10: 70 paced slots
    assert waits[10] == pytest.approx(interval, abs=0.1)
    assert waits[11] == pytest.approx(2 * interval, abs=0.1)
    other = throttle.reserve("installation:2")
    assert other == 0.0  # another installation has its own budget
    ttl = redis_ns.client.pttl(throttle.key("installation:1"))
    assert 0 < ttl <= 3_700_000
    assert all(redis_ns.token in k for k in redis_ns.existing_keys())


def test_throttle_is_shared_by_every_worker(redis_ns) -> None:
    workers = [WriteThrottle(redis.Redis.from_url(redis_ns.url), redis_ns.prefix, burst=10)
               for _ in range(3)]
    # (call started, wait, call returned), seconds: a wait is relative to the moment Redis
    # ran the reservation, somewhere between the two, so the slot it reserves is that
    # moment plus the wait. Gaps between waits would drift when a thread is descheduled
    # between calls; the slots (absolute times) do not.
    calls: list[tuple[float, float, float]] = []
    lock = threading.Lock()

    def write(throttle: WriteThrottle) -> None:
        for _ in range(10):
            started = time.time()
            wait = throttle.reserve("installation:9")
            returned = time.time()
            assert wait is not None
            with lock:
                calls.append((started, wait, returned))

    threads = [threading.Thread(target=write, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    waits = sorted(wait for _, wait, _ in calls)
    assert waits[:10] == [0.0] * 10 and all(w > 0 for w in waits[10:])
    # 30 writes: 10 at once, then one per 60/70 s (858 ms, rounded up) -- wherever they came
    # from. The schedule starts when Redis ran the first reservation (S): the stored
    # schedule ends 30 intervals after it, and S lies between the earliest call's start and
    # the earliest return.
    interval = 0.858
    tat = float(redis_ns.client.hget(workers[0].key("installation:9"), "tat1")) / 1000
    start = tat - 30 * interval
    ms = 0.0015  # Redis's TIME is read in whole milliseconds
    assert min(c[0] for c in calls) - ms <= start <= min(c[2] for c in calls) + ms
    slots = sorted((started + wait, returned + wait) for started, wait, returned in calls
                   if wait > 0)
    for n, (earliest, latest) in enumerate(slots, start=1):
        assert earliest - ms <= start + n * interval <= latest + ms, (n, slots)
    assert max(waits) <= 20 * interval + ms


def test_hourly_budget_and_max_wait(redis_ns) -> None:
    throttle = WriteThrottle(redis_ns.client, redis_ns.prefix, per_minute=80, per_hour=500,
                             burst=10, max_wait=5.0, sleep=lambda _s: None)
    taken = 0
    while throttle.reserve("installation:3") is not None:
        taken += 1
    # Within 5 s: the burst of 10 plus the slots of the next 5 s, one per 60/70 s.
    assert taken == 10 + int(5 / 0.858)
    with pytest.raises(IntegrationError) as info:
        throttle.acquire("installation:3", op="comment")
    assert info.value.retriable and "80/min and 500/h" in str(info.value)
    # 500 an hour: once the hour's burst (80) is spent, one write per 3600/420 s.
    hourly = WriteThrottle(redis_ns.client, redis_ns.prefix + ":h", max_wait=10_000)
    waits = [hourly.reserve("installation:4") for _ in range(95)]
    gaps = [b - a for a, b in zip(waits, waits[1:], strict=False)]  # type: ignore[operator]
    assert gaps[20] == pytest.approx(60 / 70, abs=0.1)  # the minute's pace
    assert gaps[-1] == pytest.approx(3600 / 420, abs=0.1)  # the hour's pace


def test_throttle_without_redis_lets_writes_through(caplog) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    throttle = WriteThrottle(dead, "the-loop-test-dead")
    caplog.set_level(logging.WARNING)
    assert throttle.acquire("installation:1", op="comment") == 0.0
    assert "writing unthrottled" in caplog.text


def test_acquire_sleeps_until_the_slot(redis_ns) -> None:
    slept: list[float] = []
    throttle = WriteThrottle(redis_ns.client, redis_ns.prefix, burst=1, per_minute=2,
                             per_hour=500, max_wait=120, sleep=slept.append)
    throttle.acquire("installation:5")
    throttle.acquire("installation:5")
    assert slept == [pytest.approx(60.0, abs=0.2)]
