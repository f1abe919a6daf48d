"""Slack and Jira transports: limits, failures and secrets (the contract suite covers the
successful operations)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import responses
from responses import matchers

from graph.ports import IntegrationError, NotFound, Unsupported
from integrations.jira import JiraApi, JiraCli, adf
from integrations.slack import SlackSdk, SlackWebhook
from tests.integrations import loopback
from tests.integrations.fakecli import FakeCli
from tests.support.jira_fake import FakeJira

SLACK_TOKEN = "xoxb-slack-secret-123"
HOOK_PATH = "/services/T000/B000/hook-secret-456"
JIRA = "https://jira.example.com"
JIRA_TOKEN = "jira-secret-789"


# --------------------------------------------------------------------------- Slack


def test_slack_rate_limit_is_retried_after_a_short_retry_after() -> None:
    with loopback.serve() as server:
        server.answer(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "0"})
        server.answer(200, {"ok": True, "ts": "1.2"})
        result = SlackSdk(SLACK_TOKEN, base_url=server.url + "/api/").call(
            "post-message", channel="C1", text="hi")
    assert result == {"ok": True, "ts": "1.2"} and len(server.seen) == 2


def test_slack_long_retry_after_fails_retriable_without_sleeping() -> None:
    with loopback.serve() as server:
        server.answer(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "900"})
        started = time.monotonic()
        with pytest.raises(IntegrationError) as info:
            SlackSdk(SLACK_TOKEN, base_url=server.url + "/api/").call(
                "post-message", channel="C1", text="hi")
    assert time.monotonic() - started < 5 and len(server.seen) == 1
    assert (info.value.status, info.value.retriable) == (429, True)
    assert "retry after 900" in str(info.value)


@pytest.mark.parametrize(
    ("error", "retriable", "hint"),
    [("channel_not_found", False, "invite the app"),
     ("invalid_auth", False, "THE_LOOP_SLACK_TOKEN"),
     ("internal_error", True, "")],
)
def test_slack_api_errors(error: str, retriable: bool, hint: str) -> None:
    with loopback.serve() as server:
        server.answer(200, {"ok": False, "error": error})
        with pytest.raises(IntegrationError) as info:
            SlackSdk(SLACK_TOKEN, base_url=server.url + "/api/", max_retries=0).call(
                "post-message", channel="C1", text="hi")
    assert info.value.retriable is retriable and error in str(info.value)
    assert hint in str(info.value) and SLACK_TOKEN not in str(info.value)


def test_slack_network_failure_is_retriable() -> None:
    with loopback.serve() as server:
        dead = server.url
    with pytest.raises(IntegrationError) as info:
        SlackSdk(SLACK_TOKEN, base_url=dead + "/api/", max_retries=0).call(
            "post-message", channel="C1", text="hi")
    assert info.value.retriable and info.value.status is None


def test_slack_webhook_errors_never_show_the_url() -> None:
    with loopback.serve() as server:
        server.answer(404, "no_service")
        with pytest.raises(IntegrationError) as info:
            SlackWebhook(server.url + HOOK_PATH, max_retries=0).call(
                "post-message", channel="C1", text="hi")
    assert "no_service" in str(info.value) and "THE_LOOP_SLACK_WEBHOOK_URL" in str(info.value)
    assert "hook-secret" not in str(info.value) and not info.value.retriable


def test_slack_parameters_and_operations() -> None:
    sdk = SlackSdk(SLACK_TOKEN, base_url="http://127.0.0.1:9/api/")
    with pytest.raises(IntegrationError, match="bad parameters"):
        sdk.call("post-message", channel="", text="x")
    with pytest.raises(IntegrationError, match="bad parameters"):
        sdk.call("post-message", channel="C1", text="x", blocks="not blocks")
    with pytest.raises(Unsupported):
        sdk.call("add-reaction", channel="C1")
    assert SLACK_TOKEN not in repr(sdk)


def test_slack_debug_logs_carry_no_secret(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with loopback.serve() as server:
        server.answer(200, {"ok": True, "ts": "1.2"})
        server.answer(200, "ok")
        SlackSdk(SLACK_TOKEN, base_url=server.url + "/api/").call(
            "post-message", channel="C1", text="hi")
        SlackWebhook(server.url + HOOK_PATH).call("post-message", channel="C1", text="hi")
    assert server.seen[0].headers["Authorization"] == f"Bearer {SLACK_TOKEN}"
    assert SLACK_TOKEN not in caplog.text and "hook-secret" not in caplog.text


# --------------------------------------------------------------------------- Jira


@pytest.fixture
def rs():
    with responses.RequestsMock() as mock:
        yield mock


def jira(**kw: Any) -> JiraApi:
    return JiraApi(JIRA, JIRA_TOKEN, user="bot@example.com", api_version=3, **kw)


ISSUE = f"{JIRA}/rest/api/3/issue/PROJ-12"


def test_jira_auth_and_adf(rs: responses.RequestsMock) -> None:
    rs.post(f"{ISSUE}/comment", status=201, json={"id": "1"},
            match=[matchers.json_params_matcher({"body": adf("a\nb\n\nc")})])
    assert jira().call("add-comment", issue="proj-12", body="a\nb\n\nc") == {
        "issue": "PROJ-12", "id": "1"}
    assert rs.calls[0].request.headers["Authorization"].startswith("Basic ")
    assert adf("a\nb\n\nc")["content"] == [
        {"type": "paragraph", "content": [{"type": "text", "text": "a"}, {"type": "hardBreak"},
                                          {"type": "text", "text": "b"}]},
        {"type": "paragraph", "content": [{"type": "text", "text": "c"}]},
    ]


def test_jira_bearer_token_without_user(rs: responses.RequestsMock) -> None:
    rs.put(ISSUE, status=204)
    JiraApi(JIRA, JIRA_TOKEN, api_version=3).call("add-label", issue="PROJ-12", label="x")
    assert rs.calls[0].request.headers["Authorization"] == f"Bearer {JIRA_TOKEN}"


def test_jira_transition_by_status_name_and_unknown_names(rs: responses.RequestsMock) -> None:
    body = {"transitions": [{"id": "31", "name": "Finish", "to": {"name": "Done"}}]}
    rs.get(f"{ISSUE}/transitions", json=body)
    rs.post(f"{ISSUE}/transitions", status=204,
            match=[matchers.json_params_matcher({"transition": {"id": "31"}})])
    assert jira().call("transition-issue", issue="PROJ-12", name="done") == {
        "issue": "PROJ-12", "transition": "Finish"}
    with pytest.raises(IntegrationError, match="available: 'Finish'") as info:
        jira().call("transition-issue", issue="PROJ-12", name="Review")
    assert not info.value.retriable


def test_jira_comment_posts_are_retried_on_429_not_on_5xx(rs: responses.RequestsMock) -> None:
    rs.post(f"{ISSUE}/comment", status=429, headers={"Retry-After": "0"})
    rs.post(f"{ISSUE}/comment", status=201, json={"id": "2"})
    assert jira().call("add-comment", issue="PROJ-12", body="x")["id"] == "2"
    rs.post(f"{JIRA}/rest/api/3/issue/PROJ-13/comment", status=502)
    with pytest.raises(IntegrationError) as info:
        jira().call("add-comment", issue="PROJ-13", body="x")
    assert (info.value.status, info.value.retriable) == (502, True)
    assert len([c for c in rs.calls if "PROJ-13" in c.request.url]) == 1


def test_jira_label_puts_are_retried_on_5xx(rs: responses.RequestsMock) -> None:
    rs.put(ISSUE, status=503)
    rs.put(ISSUE, status=204)
    assert jira().call("add-label", issue="PROJ-12", label="x") == {
        "issue": "PROJ-12", "label": "x"}
    assert len(rs.calls) == 2


def test_jira_long_retry_after_is_not_slept(rs: responses.RequestsMock) -> None:
    rs.put(ISSUE, status=429, headers={"Retry-After": "3600"})
    started = time.monotonic()
    with pytest.raises(IntegrationError) as info:
        jira().call("add-label", issue="PROJ-12", label="x")
    assert time.monotonic() - started < 5 and len(rs.calls) == 1
    assert (info.value.status, info.value.retriable) == (429, True)


@pytest.mark.parametrize(("status", "kind", "hint"), [
    (404, NotFound, "not visible"), (401, IntegrationError, "THE_LOOP_JIRA_TOKEN"),
    (400, IntegrationError, "rejected")])
def test_jira_errors(rs: responses.RequestsMock, status: int, kind: type, hint: str) -> None:
    rs.put(ISSUE, status=status, json={"errorMessages": ["secret-body-text"]})
    with pytest.raises(IntegrationError) as info:
        jira(retries=0).call("add-label", issue="PROJ-12", label="x")
    assert type(info.value) is kind and hint in str(info.value)
    assert "secret-body-text" not in str(info.value) and JIRA_TOKEN not in str(info.value)


def test_jira_parameters() -> None:
    api = jira()
    for op, params in (("add-label", {"issue": "PROJ-12", "label": "two words"}),
                       ("add-comment", {"issue": "not a key", "body": "x"}),
                       ("add-comment", {"issue": "PROJ-12"})):
        with pytest.raises(IntegrationError, match="bad parameters"):
            api.call(op, **params)


def test_jira_cli_failures(tmp_path) -> None:
    fake = FakeCli(tmp_path, "jira")
    cli = JiraCli(str(fake.path))
    fake.answer("", exit=1, stderr="Error: issue PROJ-99 not found\n")
    with pytest.raises(NotFound):
        cli.call("add-comment", issue="PROJ-99", body="x")
    fake.answer("", exit=1, stderr="Error: 503 Service Unavailable\n")
    with pytest.raises(IntegrationError) as info:
        cli.call("add-label", issue="PROJ-1", label="x")
    assert info.value.retriable
    with pytest.raises(IntegrationError, match="starting with '-'"):
        cli.call("add-label", issue="PROJ-1", label="-x")
    assert [c["argv"][:3] for c in fake.calls] == [["issue", "comment", "add"],
                                                   ["issue", "edit", "--no-input"]]


# ----------------------------------------------------- Jira REST version: given or asked


@pytest.fixture
def site_rs():
    """``responses`` for a :class:`FakeJira` (its routes need not all be used)."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


def asked(site: FakeJira, fallback: int) -> JiraApi:
    """A transport that asks ``site`` its version (THE_LOOP_JIRA_API_VERSION unset)."""
    return JiraApi(site.base_url, site.token, user=site.user, retries=0, api_version=None,
                   fallback_version=fallback)


@pytest.mark.parametrize(("deployment", "version"), [
    ("DataCenter", 2), ("Server", 2), ("Cloud", 3)])
def test_jira_asks_the_site_its_version_once_and_speaks_it(
        site_rs: responses.RequestsMock, deployment: str, version: int) -> None:
    site = FakeJira(deployment=deployment, user="bot@example.com" if version == 3 else None)
    site.add_issue("PROJ-12")
    site.install(site_rs)
    api = asked(site, fallback=5 - version)  # the host rule would have said the other
    assert api.api_version is None
    api.call("add-comment", issue="PROJ-12", body="Approved.\n\nNext: design.")
    api.call("add-label", issue="PROJ-12", label="phase:design")
    api.call("transition-issue", issue="PROJ-12", name="Start design")
    assert api.api_version == version
    v = f"/rest/api/{version}/issue/PROJ-12"
    assert site.paths() == ["GET /rest/api/2/serverInfo", f"POST {v}/comment", f"PUT {v}",
                            f"GET {v}/transitions", f"POST {v}/transitions"]
    issue = site.issues["PROJ-12"]
    assert (issue.comments, issue.comment_versions) == (["Approved.\n\nNext: design."],
                                                        [version])
    assert (issue.labels, issue.status) == (["phase:design"], "In Design")


@pytest.mark.parametrize("answer", [404, 401, "no deploymentType", "not json"])
def test_a_site_that_cannot_tell_its_version_gets_the_fallback_once(
        site_rs: responses.RequestsMock, answer: Any, caplog) -> None:
    site = FakeJira(deployment="DataCenter")
    site.add_issue("PROJ-12")
    if isinstance(answer, int):
        site.server_info = answer
    else:
        site_rs.get(f"{site.base_url}/rest/api/2/serverInfo",
               **({"json": {"baseUrl": site.base_url}} if answer == "no deploymentType"
                  else {"body": "<html>Jira</html>"}))
    site.install(site_rs)
    api = asked(site, fallback=2)
    with caplog.at_level(logging.WARNING, logger="integrations.jira"):
        api.call("add-comment", issue="PROJ-12", body="x")
        api.call("add-comment", issue="PROJ-12", body="y")
    assert api.api_version == 2 and site.issues["PROJ-12"].comments == ["x", "y"]
    asks = [c for c in site_rs.calls if c.request.url.endswith("/serverInfo")]
    assert len(asks) == 1  # kept: a site that cannot tell is not asked again
    assert "THE_LOOP_JIRA_API_VERSION" in caplog.text and JIRA_TOKEN not in caplog.text


@pytest.mark.parametrize("status", [503, 429])
def test_a_transient_failure_to_ask_fails_retriable_and_is_asked_again(
        site_rs: responses.RequestsMock, status: int) -> None:
    site = FakeJira(deployment="DataCenter")
    site.add_issue("PROJ-12")
    site_rs.get(f"{site.base_url}/rest/api/2/serverInfo", status=status,
           headers={"Retry-After": "30"})
    site.install(site_rs)
    api = asked(site, fallback=3)  # guessing v3 here would post a body Jira refuses
    with pytest.raises(IntegrationError) as info:
        api.call("add-comment", issue="PROJ-12", body="x")
    assert (info.value.status, info.value.retriable) == (status, True)
    assert "serverInfo" in str(info.value) and JIRA_TOKEN not in str(info.value)
    assert api.api_version is None and site.issues["PROJ-12"].comments == []
    api.call("add-comment", issue="PROJ-12", body="x")  # asked again: DataCenter
    assert api.api_version == 2 and site.issues["PROJ-12"].comments == ["x"]


def test_a_given_version_is_never_asked(site_rs: responses.RequestsMock) -> None:
    site = FakeJira(deployment="Cloud", user="bot@example.com")
    site.add_issue("PROJ-12")
    site.install(site_rs)
    JiraApi(site.base_url, site.token, user=site.user, api_version=2).call(
        "add-comment", issue="PROJ-12", body="x")  # Cloud serves v2 with text bodies too
    assert site.paths() == ["POST /rest/api/2/issue/PROJ-12/comment"]


def test_jira_data_center_takes_a_personal_access_token_as_bearer(
        site_rs: responses.RequestsMock) -> None:
    site = FakeJira(deployment="DataCenter", token="pat-secret")
    site.add_issue("PROJ-12")
    site.install(site_rs)
    JiraApi(site.base_url, "pat-secret", api_version=2).call(
        "add-label", issue="PROJ-12", label="x")
    assert site_rs.calls[-1].request.headers["Authorization"] == "Bearer pat-secret"
    with pytest.raises(IntegrationError) as info:  # the same token as basic: refused
        JiraApi(site.base_url, "pat-secret", user="bot", api_version=2, retries=0).call(
            "add-label", issue="PROJ-12", label="y")
    assert info.value.status == 401 and site.issues["PROJ-12"].labels == ["x"]


@pytest.mark.parametrize(("deployment", "sent", "refused"), [
    ("DataCenter", 3, 404),  # Data Center has no REST v3
    ("Cloud", 2, None),      # Cloud serves v2 too, with a text body
])
def test_jira_versions_against_the_other_deployment(
        site_rs: responses.RequestsMock, deployment: str, sent: int, refused: int | None) -> None:
    site = FakeJira(deployment=deployment, user="bot@example.com")
    site.add_issue("PROJ-12")
    site.install(site_rs)
    api = JiraApi(site.base_url, site.token, user=site.user, api_version=sent, retries=0)
    if refused is None:
        api.call("add-comment", issue="PROJ-12", body="x")
        assert site.issues["PROJ-12"].comments == ["x"]
    else:
        with pytest.raises(IntegrationError) as info:
            api.call("add-comment", issue="PROJ-12", body="x")
        assert info.value.status == refused


@pytest.mark.parametrize(("path", "body", "refused"), [
    ("/rest/api/2/issue/PROJ-12/comment", {"body": adf("x")}, "Comment body can not be empty!"),
    ("/rest/api/3/issue/PROJ-12/comment", {"body": "x"}, "Comment body is not valid!"),
])
def test_the_fake_refuses_the_other_versions_body_as_jira_does(
        site_rs: responses.RequestsMock, path: str, body: Any, refused: str) -> None:
    import requests

    site = FakeJira(deployment="Cloud", user="bot@example.com")
    site.add_issue("PROJ-12")
    site.install(site_rs)
    answer = requests.post(site.base_url + path, json=body, auth=(site.user, site.token),
                           timeout=5)
    assert answer.status_code == 400
    assert answer.json() == {"errorMessages": [], "errors": {"comment": refused}}
    assert site.issues["PROJ-12"].comments == []
