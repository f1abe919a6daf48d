"""GitHub, Slack, Jira and the markdown linter as they really behave (issue: identities,
installations, tokens, limits, failures said out loud): the transports against
``responses``, the loopback fake GitHub and a loopback Slack Web API."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import pytest
import responses

from foundation.hooks.lint_artifacts import lint_markdown
from foundation.settings import Settings, SettingsError
from graph.effects import HookEffects
from graph.ports import IntegrationError, RateLimited, RetryLater, Unavailable
from graph.state import MemoryStateStore, WorkItemState
from integrations.github import GitHubClients, GitHubSettings
from integrations.jira import JiraApi
from integrations.slack import CLOCK_SKEW, EVENT_TYPE, SlackSdk, SlackWebhook
from tests.integrations import loopback
from tests.integrations.test_github_api import rsa_pem  # noqa: F401 (fixture)
from tests.support import slack_fake
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from workers.drain import retry_wait

API = "https://api.github.com:443"
REPO = "octo-org/octo-repo"
APP_ID = 77


def token_client(**kw) -> GitHubClients:
    return GitHubClients(GitHubSettings(token="ghp_x", write_interval=0.0, read_interval=0.0,
                                        retries=0, **kw))


# -- 11: PyGithub requests name the media type and the API version ----------------------


@responses.activate
def test_pygithub_requests_carry_accept_and_api_version():
    responses.get(f"{API}/repos/{REPO}", json={"full_name": REPO, "default_branch": "main"})
    token_client().for_installation(None).get_repository(repo=REPO)
    headers = responses.calls[0].request.headers
    assert headers["Accept"] == "application/vnd.github+json"
    assert headers["X-GitHub-Api-Version"] == "2022-11-28"


# -- 3: failures classified before they are retried ---------------------------------------


@responses.activate
def test_403_resource_not_accessible_names_the_permission_and_is_not_retried():
    responses.post(f"{API}/repos/{REPO}/issues/3/labels", status=403,
                   json={"message": "Resource not accessible by integration"},
                   headers={"X-Accepted-GitHub-Permissions": "issues=write; pull_requests=write"})
    with pytest.raises(IntegrationError) as info:
        token_client().for_installation(None).add_label(repo=REPO, number=3, label="x")
    assert info.value.retriable is False and info.value.status == 403
    assert "issues=write or pull_requests=write permission" in str(info.value)
    assert len(responses.calls) == 1


@pytest.mark.parametrize("status", [404, 410, 422])
@responses.activate
def test_404_410_422_are_not_retriable(status):
    responses.get(f"{API}/repos/{REPO}", status=status, json={"message": "x"})
    with pytest.raises(IntegrationError) as info:
        token_client().for_installation(None).get_repository(repo=REPO)
    assert info.value.retriable is False and info.value.status == status
    assert len(responses.calls) == 1


@responses.activate
def test_secondary_limit_with_retry_after_waits_at_least_that_long():
    responses.post(f"{API}/repos/{REPO}/issues/3/comments", status=403,
                   json={"message": "You have exceeded a secondary rate limit"},
                   headers={"Retry-After": "60"})
    with pytest.raises(RateLimited) as info:
        token_client().for_installation(None).comment(repo=REPO, number=3, body="hi")
    assert info.value.retriable and info.value.retry_after == 60
    assert retry_wait(info.value, now=1000.0) == 60
    reset = RateLimited("x", integration="github", op="comment", reset_at=1090.0)
    assert retry_wait(reset, now=1000.0) == 90  # until x-ratelimit-reset


def test_a_401_drops_the_installation_token_and_mints_a_new_one_once(rsa_pem, caplog):  # noqa: F811
    """Given an installation token GitHub revoked early (the loopback fake answers 401)
    When the next request is made
    Then the transport drops the token, mints a new one and the request succeeds; a
    second 401 on the fresh token is an error (one retry only)."""
    fake = HttpFakeGitHub(app_id=APP_ID, app_key=rsa_pem[0])
    fake.add_repo(REPO)
    url, stop = serve(fake)
    try:
        clients = GitHubClients(GitHubSettings(api_url=url, app_id=APP_ID,
                                               private_key=rsa_pem[0], write_interval=0.0,
                                               read_interval=0.0, retries=0))
        api = clients.for_installation(31)
        api.get_repository(repo=REPO)
        assert fake.token_requests == [31]
        assert fake.expire_tokens(31) == 1
        with caplog.at_level(logging.WARNING, "the_loop.integrations.github"):
            assert api.get_repository(repo=REPO)["full_name"] == REPO
        assert fake.token_requests == [31, 31]
        assert "dropped it, minting a new one" in caplog.text
        fake.suspend_installation(31)  # tokens stop working, none is issued
        with pytest.raises(IntegrationError) as info:
            api.get_repository(repo=REPO)
        assert info.value.status == 403 and not info.value.retriable
        clients.close()
    finally:
        stop()


# -- 4: GitHub Enterprise Server base URL ---------------------------------------------------


def api_url(value: str) -> str:
    return Settings.from_env({"THE_LOOP_GITHUB_API_URL": value, "GH_TOKEN": "x"},
                             process="worker").require_github().api_url


@pytest.mark.parametrize("given", ["https://ghe.example.com", "https://ghe.example.com/",
                                   "https://ghe.example.com:8443/"])
def test_a_ghes_host_without_a_path_gets_api_v3_and_says_so(given, caplog):
    with caplog.at_level(logging.WARNING, "foundation.settings"):
        assert api_url(given) == given.rstrip("/") + "/api/v3"
    said = [r.getMessage() for r in caplog.records if r.name == "foundation.settings"]
    assert len(said) == 1 and "THE_LOOP_GITHUB_API_URL has no path" in said[0], said
    assert "ghe.example.com" not in said[0]  # the value is never echoed


@pytest.mark.parametrize("given,kept", [
    ("https://api.github.com", "https://api.github.com"),
    ("https://api.github.com/", "https://api.github.com"),
    ("https://api.octocorp.ghe.com", "https://api.octocorp.ghe.com"),
    ("https://api.octocorp.ghe.com/", "https://api.octocorp.ghe.com"),
    ("https://ghe.example.com/api/v3", "https://ghe.example.com/api/v3"),
    ("https://ghe.example.com/api/v3/", "https://ghe.example.com/api/v3"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
])
def test_githubs_own_layouts_are_taken_as_they_are(given, kept, caplog):
    with caplog.at_level(logging.WARNING, "foundation.settings"):
        assert api_url(given) == kept
    assert not [r for r in caplog.records if r.name == "foundation.settings"]


@pytest.mark.parametrize("given,fix", [
    ("https://ghe.example.com/api", r"path other than /api/v3: .*https://HOST/api/v3"),
    ("https://ghe.example.com/web/login", r"path other than /api/v3: .*https://HOST/api/v3"),
    ("https://ghe.example.com/api/v4", r"path other than /api/v3: .*https://HOST/api/v3"),
    ("https://api.github.com/api/v3", r"has a path, .*https://api\.github\.com"),
    ("https://api.octocorp.ghe.com/api/v3", r"has a path, .*api\.SUBDOMAIN\.ghe\.com"),
    ("https://octocorp.ghe.com", r"GHE\.com web host: .*https://api\.SUBDOMAIN\.ghe\.com"),
])
def test_an_unexpected_github_url_is_refused_naming_the_key_and_the_fix(given, fix):
    with pytest.raises(SettingsError, match=r"THE_LOOP_GITHUB_API_URL ") as refused:
        api_url(given)
    assert re.search(fix, str(refused.value)), str(refused.value)
    assert "example.com" not in str(refused.value) and "octocorp" not in str(refused.value)


def test_the_corrected_url_is_the_one_the_dashboard_and_the_transport_use():
    settings = Settings.from_env({"THE_LOOP_GITHUB_API_URL": "https://ghe.example.com/",
                                  "GH_TOKEN": "x"}, process="worker")
    assert settings.require_github().api_url == "https://ghe.example.com/api/v3"
    assert settings.dashboard.github_api_url == "https://ghe.example.com/api/v3"


def test_a_ghe_com_api_root_has_its_web_root_for_sign_in():
    settings = Settings.from_env({"THE_LOOP_GITHUB_API_URL": "https://api.octocorp.ghe.com",
                                  "GH_TOKEN": "x"}, process="worker")
    assert settings.dashboard.github_api_url == "https://api.octocorp.ghe.com"
    assert settings.dashboard.github_web_url == "https://octocorp.ghe.com"


@responses.activate
def test_an_html_answer_is_a_clear_error_not_a_type_error():
    base = "https://ghe.example.com/api/v3"
    responses.get(f"https://ghe.example.com:443/api/v3/repos/{REPO}",
                  body="<html><body>Sign in</body></html>",
                  content_type="text/html; charset=utf-8")
    with pytest.raises(IntegrationError, match="HTML page, not the REST API's JSON") as info:
        token_client(api_url=base).for_installation(None).get_repository(repo=REPO)
    assert not info.value.retriable


@responses.activate
def test_githubs_html_502_page_is_a_retriable_outage_not_a_wrong_url():
    base = "https://ghe.example.com/api/v3"
    responses.get(f"https://ghe.example.com:443/api/v3/repos/{REPO}", status=502,
                  body="<html><body>Unicorn! 502 Server Error</body></html>",
                  content_type="text/html; charset=utf-8")
    with pytest.raises(Unavailable) as info:
        token_client(api_url=base).for_installation(None).get_repository(repo=REPO)
    assert info.value.retriable and info.value.status == 502
    assert "HTML page" not in str(info.value)


# -- 9: Jira auth and errors ----------------------------------------------------------------


def test_a_jira_token_without_user_is_refused_unless_bearer():
    env = {"THE_LOOP_JIRA_URL": "https://x.atlassian.net", "THE_LOOP_JIRA_TOKEN": "tok",
           "GH_TOKEN": "x"}
    with pytest.raises(SettingsError, match="THE_LOOP_JIRA_USER") as info:
        Settings.from_env(env, process="worker")
    assert "tok" not in str(info.value).replace("token", "")
    bearer = Settings.from_env({**env, "THE_LOOP_JIRA_AUTH": "bearer"}, process="worker")
    assert bearer.jira is not None and bearer.jira.auth == "bearer" and bearer.jira.user is None


@responses.activate
def test_jira_errors_include_the_errors_object_and_phase_labels_replace_older_ones():
    base = "https://x.atlassian.net/rest/api/3/issue/ABC-12"
    responses.get(f"{base}?fields=labels",
                  json={"fields": {"labels": ["Phase:design", "keep", "phase:tasks"]}})
    responses.put(base, status=204)
    jira = JiraApi("https://x.atlassian.net", "tok", user="a@b.c", retries=0)
    jira.add_label(issue="ABC-12", label="phase:tasks", replace_prefix="phase:")
    assert responses.calls[1].request.body == (
        b'{"update": {"labels": [{"add": "phase:tasks"}, {"remove": "Phase:design"}]}}')
    responses.put(base, status=400, json={"errorMessages": [],
                                          "errors": {"labels": "Field cannot be set"}})
    with pytest.raises(IntegrationError, match=r"Jira: labels: Field cannot be set"):
        jira.add_label(issue="ABC-12", label="phase:x")


# -- 10: the linter leaves logging alone ---------------------------------------------------


def test_the_markdown_linter_does_not_change_the_root_logger():
    root = logging.getLogger()
    before_level, before_handlers = root.level, list(root.handlers)
    root.setLevel(logging.INFO)
    try:
        lint_markdown("a.md", "# Title\n\ntext\n", ())
        lint_markdown("b.md", "#bad heading\n", ())
        assert root.level == logging.INFO
        assert root.handlers == before_handlers
    finally:
        root.setLevel(before_level)


# -- 8: a Slack post survives its worker dying (slack-sdk sends through urllib, which
# ``responses`` cannot intercept: a loopback Slack Web API that keeps its messages) --------

SLACK_EFFECT = "github:Codertocat/Hello-World#1/requirements-approval/1/notify/0"


def pending_post(channel: str, since: float) -> tuple[WorkItemState, MemoryStateStore]:
    """A work item whose earlier attempt recorded ``post-message`` pending at ``since``."""
    state = WorkItemState("github:Codertocat/Hello-World#1", "pdlc", "requirements-approval")
    state.effects[SLACK_EFFECT] = {"op": "post-message", "integration": "slack",
                                   "status": "pending", "attempts": 1, "at": since,
                                   "target": {"since": since}}
    store = MemoryStateStore()
    store.save(state)
    return state, store


def post_again(state: WorkItemState, store: MemoryStateStore, slack: Any,
               channel: str) -> dict[str, Any]:
    """The re-run: the same effect id through the outbox."""
    effects = HookEffects(state, store, SLACK_EFFECT.rpartition("/")[0])
    return effects.perform("slack", slack, "post-message", {"channel": channel, "text": "hi"})


def test_a_slack_post_carries_its_effect_id_in_message_metadata():
    with slack_fake.serve() as fake:
        sdk = SlackSdk("xoxb-x", base_url=fake.url + "/api/")
        sdk.post_message(channel="C1", text="hi", effect=SLACK_EFFECT)
    assert fake.posts("C1")[0]["metadata"] == {
        "event_type": EVENT_TYPE, "event_payload": {"effect": SLACK_EFFECT}}


def test_a_pending_slack_post_whose_message_exists_is_not_posted_again():
    """Given the worker died after Slack kept the direct message (effect left pending)
    When the same effect is performed again
    Then the message is found in the conversation's history (from the recorded time, less
    the clock skew) and nothing is posted; the effect is done with the message's ts."""
    since = time.time() - 30
    with slack_fake.serve() as fake:
        ts = fake.post("U1", "hi", {"event_type": EVENT_TYPE,
                                    "event_payload": {"effect": SLACK_EFFECT}})
        state, store = pending_post("U1", since)
        result = post_again(state, store, SlackSdk("xoxb-x", base_url=fake.url + "/api/"),
                            "U1")
    assert fake.calls == ["conversations.open", "conversations.history"]
    history = dict(fake.seen)["conversations.history"]
    assert history["channel"] == "D1" and history["include_all_metadata"] in ("1", "true")
    assert float(history["oldest"]) == pytest.approx(since - CLOCK_SKEW, abs=1e-3)
    assert result == {"ok": True, "ts": ts, "reused": True} and len(fake.posts("U1")) == 1
    assert store.load(state.ref).effects[SLACK_EFFECT]["status"] == "done"


def test_a_pending_slack_post_whose_message_is_absent_is_posted_once():
    """Given the worker died before the post reached Slack (another message of the-loop's
    is there, with another effect id)
    When the same effect is performed again
    Then it is posted once, with its own effect id as metadata."""
    with slack_fake.serve() as fake:
        fake.post("C1", "other", {"event_type": EVENT_TYPE,
                                  "event_payload": {"effect": SLACK_EFFECT + "x"}})
        state, store = pending_post("C1", time.time() - 5)
        sdk = SlackSdk("xoxb-x", base_url=fake.url + "/api/")
        post_again(state, store, sdk, "C1")
        post_again(store.load(state.ref) or state, store, sdk, "C1")  # done: not again
    assert fake.calls == ["conversations.history", "chat.postMessage"]
    mine = [m for m in fake.posts("C1")
            if m["metadata"]["event_payload"]["effect"] == SLACK_EFFECT]
    assert len(mine) == 1
    assert store.load(state.ref).effects[SLACK_EFFECT]["status"] == "done"


def test_a_pending_webhook_post_is_not_made_again_at_most_once(caplog):
    """Given a webhook post left pending (the worker died; the webhook cannot be read)
    When it is performed again
    Then nothing is sent, the effect is closed as done and unconfirmed, and one warning
    says so."""
    state, store = pending_post("C1", time.time())
    with loopback.serve() as server, caplog.at_level(logging.WARNING, "graph.effects"):
        result = post_again(state, store, SlackWebhook(server.url + "/services/T/B/x"), "C1")
    assert server.seen == [] and result == {"unconfirmed": True}
    record = store.load(state.ref).effects[SLACK_EFFECT]
    assert (record["status"], record["result"]) == ("done", {"unconfirmed": True})
    assert [r.getMessage() for r in caplog.records if "at most once" in r.getMessage()]


def test_a_webhook_post_slack_refused_is_made_again_on_the_re_run():
    """Given Slack answered the first post with HTTP 500 (the post was not made)
    When the effect is performed again
    Then it is posted: a refusal is not an unknown outcome."""
    state = WorkItemState("github:Codertocat/Hello-World#1", "pdlc", "requirements-approval")
    store = MemoryStateStore()
    with loopback.serve() as server:
        server.answer(500, "internal_error")
        server.answer(200, "ok")
        hook = SlackWebhook(server.url + "/services/T/B/x", max_retries=0)
        with pytest.raises(RetryLater):
            post_again(state, store, hook, "C1")
        assert store.load(state.ref).effects[SLACK_EFFECT]["status"] == "failed"
        post_again(store.load(state.ref) or state, store, hook, "C1")
    assert len(server.seen) == 2
    assert store.load(state.ref).effects[SLACK_EFFECT]["status"] == "done"
