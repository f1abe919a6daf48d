"""GitHub's API budget: the shared conditional-request cache (ETag / Last-Modified in
Redis, 304s counted apart), the per-delivery memo, the status comment and check run
edited by their stored ids, the primary rate limit read from GitHub's answers and kept
before it runs out, and the metrics of it all. The transport is tested with
``responses`` and against the loopback fake GitHub; Redis is the real one."""

from __future__ import annotations

import time
from typing import Any

import pytest
import responses
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY, generate_latest

from foundation.config.repository import Collaborators
from foundation.settings import GitHubSettings, Settings
from graph.context import HookConfig
from graph.model import WorkItem
from graph.ports import RateLimited
from graph.runtime import Runtime
from graph.state import MemoryStateStore
from integrations.github import GitHubClients
from integrations.github_cache import ConditionalCache, delivery_scope, stale
from integrations.throttle import WriteThrottle
from tests.graph.test_contract import COLLABORATORS, REQUIREMENTS, Files, comment
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import write_throttle

API = "https://api.github.com:443"
REPO = "Codertocat/Hello-World"
R = f"{API}/repos/{REPO}"
PULL = {"number": 2, "state": "open", "draft": False, "html_url": "https://x/2",
        "head": {"sha": "a" * 40, "ref": "feature"}, "base": {"ref": "main"}}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def client(cache: ConditionalCache | None, *, url: str | None = None,
           throttle: WriteThrottle | None = None, token: str = "ghp_budget") -> Any:
    kwargs: dict[str, Any] = {"api_url": url} if url else {}
    github = GitHubSettings(token=token, write_interval=0.0, read_interval=0.0, retries=0,
                            **kwargs)
    return GitHubClients(github, cache=cache, throttle=throttle).for_installation(None)


# --------------------------------------------------------------------------- the cache


def test_a_cached_get_is_sent_with_if_none_match_and_a_304_answers_from_the_cache(redis_ns):
    cache = ConditionalCache(redis_ns.client, redis_ns.prefix)
    before = sample("the_loop_github_not_modified_total", installation="token",
                    operation="get-pull-request")
    with responses.RequestsMock() as rs:
        rs.get(f"{R}/pulls/2", json=PULL, headers={"ETag": 'W/"v1"'})
        rs.get(f"{R}/pulls/2", status=304, headers={"ETag": 'W/"v1"'})
        first = client(cache).get_pull_request(repo=REPO, number=2)
        # Another worker's client of the same deployment shares the cache.
        second = client(ConditionalCache(redis_ns.client, redis_ns.prefix)).get_pull_request(
            repo=REPO, number=2)
        sent = [c.request.headers.get("If-None-Match") for c in rs.calls]
    assert sent == [None, 'W/"v1"']
    assert second == first and second["head_sha"] == "a" * 40
    assert sample("the_loop_github_not_modified_total", installation="token",
                  operation="get-pull-request") == before + 1


def test_without_an_etag_the_last_modified_date_is_sent_back(redis_ns):
    cache = ConditionalCache(redis_ns.client, redis_ns.prefix)
    stamp = "Tue, 01 Dec 2026 10:00:00 GMT"
    with responses.RequestsMock() as rs:
        rs.get(f"{R}/pulls/2", json=PULL, headers={"Last-Modified": stamp})
        rs.get(f"{R}/pulls/2", status=304)
        api = client(cache)
        api.get_pull_request(repo=REPO, number=2)
        assert api.get_pull_request(repo=REPO, number=2)["number"] == 2
        assert rs.calls[1].request.headers.get("If-Modified-Since") == stamp


@pytest.fixture
def fake_api():
    fake = HttpFakeGitHub(tokens={"ghp_budget"})
    fake.add_repo(REPO, default_branch="main")
    fake.add_pull(REPO, 2, head_sha="b" * 40, head_ref="feature", files=["src/app.py"])
    url, stop = serve(fake)
    try:
        yield fake, url
    finally:
        stop()


def test_the_fake_answers_a_matching_conditional_get_with_304_free_of_the_rate_limit(
        redis_ns, fake_api):
    fake, url = fake_api
    api = client(ConditionalCache(redis_ns.client, redis_ns.prefix), url=url)
    assert api.get_pull_request(repo=REPO, number=2)["head_sha"] == "b" * 40
    assert api.get_pull_request(repo=REPO, number=2)["head_sha"] == "b" * 40
    fake.set_issue_labels(REPO, 2, ["bug"])  # the pull request changed: a new ETag, a full answer
    api.get_pull_request(repo=REPO, number=2)
    pulls = [r for r in fake.requests if r.path.endswith("/pulls/2")]
    assert [(r.conditional, r.status) for r in pulls] == [(False, 200), (True, 304),
                                                          (True, 200)]
    assert api.rate_limit_remaining == fake.rate_limit - 2  # the 304 was not counted


def test_without_the_cache_every_get_is_sent_whole(fake_api):
    fake, url = fake_api
    api = client(None, url=url)
    api.get_pull_request(repo=REPO, number=2)
    api.get_pull_request(repo=REPO, number=2)
    assert [(r.conditional, r.status) for r in fake.requests] == [(False, 200), (False, 200)]


# --------------------------------------------------------------------------- the memo


def test_within_one_delivery_a_resource_is_read_once_and_again_after_a_write_to_it(
        fake_api):
    fake, url = fake_api
    api = client(None, url=url)
    with delivery_scope() as memo:
        api.get_pull_request(repo=REPO, number=2)
        api.get_pull_request(repo=REPO, number=2)
        api.list_comments(repo=REPO, number=2)
        posted = api.comment(repo=REPO, number=2, body="hello")
        listed = api.list_comments(repo=REPO, number=2)  # written through: not read again
        api.add_label(repo=REPO, number=2, label="bug")
        api.get_pull_request(repo=REPO, number=2)  # its labels changed: read again
    api.get_pull_request(repo=REPO, number=2)  # the next delivery reads afresh
    gets = [r.path for r in fake.requests if r.method == "GET"]
    assert gets == [f"/repos/{REPO}/pulls/2", f"/repos/{REPO}/issues/2/comments",
                    f"/repos/{REPO}/pulls/2", f"/repos/{REPO}/pulls/2"]
    assert [c["id"] for c in listed["comments"]] == [posted["id"]]
    assert memo.hits == 2


def test_what_a_write_makes_stale():
    base = f"/repos/{REPO}"
    assert stale(f"{base}/issues/2/labels", f"{base}/pulls/2")
    assert not stale(f"{base}/issues/2/labels", f"{base}/pulls/3")
    assert not stale(f"{base}/issues/2/labels", f"{base}/issues/2/comments")
    assert stale(f"{base}/pulls/2", f"{base}/pulls/2/files")
    assert stale(f"{base}/contents/specs/2/a.md", f"{base}/pulls/3")  # a commit moves heads
    assert stale(f"{base}/check-runs/5", f"{base}/commits/abc/check-runs")
    assert not stale(f"{base}/check-runs/5", f"{base}/issues/2/comments")
    assert not stale("/repos/other/repo/issues/2/labels", f"{base}/pulls/2")


# --------------------------------------------------------------------------- stored ids


class CountingGitHub(FakeGitHub):
    """The in-process fake, recording each comment list asked for: ``(since, how many
    comments it returned)``."""

    def __init__(self) -> None:
        super().__init__()
        self.lists: list[tuple[str | None, int]] = []

    def list_comments(self, repo: str, number: int, since=None):  # type: ignore[override]
        listed = super().list_comments(repo, number, since)
        self.lists.append((since, len(listed["comments"])))
        return listed


def test_the_status_comment_is_edited_by_its_stored_id_among_5000_comments():
    gh = CountingGitHub()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    config = HookConfig(collaborators=Collaborators.parse(COLLABORATORS),
                        integrations={"github": gh}, files=Files(gh))
    item = WorkItem(f"github:{REPO}#1", 1, REPO, spec_dir="specs/1")
    rt = Runtime(load_graph(), MemoryStateStore())
    rt.enrol(item, config, None)
    status = [c for c in gh.comments(REPO, 1) if "/status -->" in c["body"]]
    assert len(status) == 1
    for i in range(5000):
        old = gh.comment_store[gh.add_comment(REPO, 1, f"comment {i}", user="octocat")]
        old["created_at"] = old["updated_at"] = "2020-01-01T00:00:00Z"  # before the visit
    gh.lists.clear()
    gh.clear_actions()
    rt.advance(item, config, comment("alice", "/approve"))
    assert rt.store.load(item.ref).current_node == "design"
    # No list of all 5,000: the status comment by its id; the decision's own comment
    # looked for among those since its gate visit began only.
    assert all(since is not None and count < 10 for since, count in gh.lists), gh.lists
    assert f"{REPO}:update-comment:{status[0]['id']}" in gh.actions
    assert "phase `design`" in next(c["body"] for c in gh.comments(REPO, 1)
                                    if c["id"] == status[0]["id"])


def test_a_status_comment_deleted_by_someone_is_found_again_or_posted_anew():
    gh = CountingGitHub()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    config = HookConfig(collaborators=Collaborators.parse(COLLABORATORS),
                        integrations={"github": gh}, files=Files(gh))
    item = WorkItem(f"github:{REPO}#1", 1, REPO, spec_dir="specs/1")
    rt = Runtime(load_graph(), MemoryStateStore())
    rt.enrol(item, config, None)
    (status,) = [c for c in gh.comments(REPO, 1) if "/status -->" in c["body"]]
    del gh.comment_store[status["id"]]  # someone deleted it
    rt.advance(item, config, comment("alice", "/approve"))
    now = [c for c in gh.comments(REPO, 1) if "/status -->" in c["body"]]
    assert len(now) == 1 and now[0]["id"] != status["id"] and "phase `design`" in now[0]["body"]
    assert any(since is None for since, _ in gh.lists)  # the id answered 404: searched


# --------------------------------------------------------------------------- the throttle


def throttle_at(redis_ns, now: float, slept: list[float]) -> WriteThrottle:
    return WriteThrottle(redis_ns.client, redis_ns.prefix, sleep=slept.append,
                         clock=lambda: now, max_wait=30.0)


def test_the_throttle_slows_down_before_the_primary_limit_runs_out(redis_ns):
    now, slept = float(int(time.time())), []
    throttle = throttle_at(redis_ns, now, slept)
    bucket = "installation:1"
    throttle.observe(bucket, {"x-ratelimit-remaining": "4000", "x-ratelimit-limit": "5000",
                              "x-ratelimit-reset": str(int(now) + 600)})
    assert throttle.pace(bucket) == 0.0  # plenty left: full speed
    throttle.observe(bucket, {"x-ratelimit-remaining": "300", "x-ratelimit-limit": "5000",
                              "x-ratelimit-reset": str(int(now) + 600)})
    assert throttle.pace(bucket) == pytest.approx(2.0)  # 600 s spread over 300 requests
    assert slept == [pytest.approx(2.0)]
    throttle.observe(bucket, {"x-ratelimit-remaining": "0", "x-ratelimit-limit": "5000",
                              "x-ratelimit-reset": str(int(now) + 600)})
    with pytest.raises(RateLimited) as refused:
        throttle.pace(bucket)
    assert refused.value.retriable and refused.value.reset_at == now + 600
    assert throttle.pace("installation:2") == 0.0  # another installation: its own budget


def test_the_transport_keeps_the_rate_limit_of_every_answer_and_paces_on_it(
        redis_ns, fake_api):
    fake, url = fake_api
    slept: list[float] = []
    throttle = WriteThrottle(redis_ns.client, redis_ns.prefix, sleep=slept.append)
    api = client(None, url=url, throttle=throttle)
    api.get_pull_request(repo=REPO, number=2)
    assert slept == []
    fake.set_rate_limit(remaining=100, reset_in=50)
    api.get_pull_request(repo=REPO, number=2)  # the answer says 99 left
    assert throttle.budget("token") is not None and throttle.budget("token")[0] == 99
    api.get_pull_request(repo=REPO, number=2)
    assert len(slept) == 1 and 0 < slept[0] <= 50 / 99 + 0.05
    assert sample("the_loop_github_rate_limit_remaining", installation="token") == 98


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(per_minute=st.integers(11, 6000), extra=st.integers(0, 60000))
def test_any_pair_of_write_caps_the_settings_accept_starts_the_throttle(
        redis_ns, per_minute, extra):
    env = {"THE_LOOP_GITHUB_WRITES_PER_MINUTE": str(per_minute),
           "THE_LOOP_GITHUB_WRITES_PER_HOUR": str(per_minute + extra)}
    settings_ = Settings.from_env(env, process="worker")
    throttle = write_throttle(settings_, redis_ns.client)
    bucket = f"caps-{per_minute}-{extra}-{time.monotonic_ns()}"
    assert throttle.reserve(bucket) == 0.0
    redis_ns.client.delete(throttle.key(bucket))


# --------------------------------------------------------------------------- metrics


def test_requests_304s_and_the_remaining_budget_are_exposed(redis_ns, fake_api):
    fake, url = fake_api
    api = client(ConditionalCache(redis_ns.client, redis_ns.prefix), url=url)
    labels = {"installation": "token", "operation": "get-pull-request", "method": "GET"}
    ok = sample("the_loop_github_requests_total", **labels, status="200")
    not_modified = sample("the_loop_github_requests_total", **labels, status="304")
    api.get_pull_request(repo=REPO, number=2)
    api.get_pull_request(repo=REPO, number=2)
    assert sample("the_loop_github_requests_total", **labels, status="200") == ok + 1
    assert sample("the_loop_github_requests_total", **labels, status="304") == not_modified + 1
    text = generate_latest(REGISTRY).decode()
    for name in ("the_loop_github_requests_total", "the_loop_github_not_modified_total",
                 "the_loop_github_rate_limit_remaining",
                 "the_loop_github_rate_limit_reset_seconds"):
        assert name in text


def test_a_comment_of_the_visit_is_searched_since_the_visit_began_unless_rebuilt():
    from graph.effects import HookEffects
    from graph.state import WorkItemState

    ref = f"github:{REPO}#1"
    state = WorkItemState.new(ref, "digest", "requirements")
    state.enter("requirements-approval", via="pass")
    outbox = HookEffects(state, MemoryStateStore(), f"{ref}/requirements-approval/1/x")
    since = outbox._visit_since(f"{ref}/requirements-approval/1/decision")
    assert since == time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                  time.gmtime(state.visit_started_at - 60))
    assert outbox._visit_since(f"{ref}/status") is None  # from the enrolment on
    assert outbox._visit_since(f"{ref}/requirements/1/decision") is None  # another visit
    state.enter("design", via="reconstructed")
    assert outbox._visit_since(f"{ref}/design/1/decision") is None


def test_a_secondary_limit_waits_for_retry_after_not_for_the_primary_reset():
    from integrations.github_ops import http_error

    reset = str(int(time.time()) + 3000)
    secondary = http_error("comment", REPO, 403, {"Retry-After": "1",
                                                   "X-RateLimit-Remaining": "4321",
                                                   "X-RateLimit-Reset": reset})
    assert isinstance(secondary, RateLimited)
    assert (secondary.retry_after, secondary.reset_at) == (1.0, None)
    primary = http_error("comment", REPO, 403, {"X-RateLimit-Remaining": "0",
                                                 "X-RateLimit-Reset": reset})
    assert isinstance(primary, RateLimited) and primary.reset_at == float(reset)
