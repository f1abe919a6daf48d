"""The GitHub ``api`` transport's GraphQL requests and review requests, against canned
answers (``responses``): ``mark-pull-request-ready`` sends GraphQL's
``markPullRequestReadyForReview`` with the pull request's ``node_id`` (GitHub's REST API
cannot take a pull request out of draft), to ``/graphql`` on github.com and to
``/api/graphql`` on GitHub Enterprise Server; GraphQL's ``errors`` in an HTTP 200 answer
are errors with GitHub's message as their ``reason``; ``request-reviewers`` sends logins
and team slugs, and GitHub's 422 is a refusal with its message."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import responses
from responses import matchers

from graph.ports import IntegrationError, NotFound
from integrations.github import GitHubClients
from integrations.github_ops.pulls import MARK_READY
from integrations.throttle import WriteThrottle
from tests.integrations.test_github_api import REPO, TOKEN, assert_shape, fast, pull_json

GITHUB = "https://api.github.com:443"
GHES = "https://ghe.example.com:443"


def ready(number: int = 9, node_id: str = "PR_kwDOA9") -> dict[str, Any]:
    return {"data": {"markPullRequestReadyForReview": {"pullRequest": {
        "id": node_id, "number": number, "isDraft": False}}}}


def api(root: str = "https://api.github.com"):
    return GitHubClients(fast(token=TOKEN, api_url=root)).for_installation(None)


@responses.activate
def test_a_draft_is_marked_ready_with_its_node_id():
    responses.get(f"{GITHUB}/repos/{REPO}/pulls/9",
                  json=pull_json(9) | {"node_id": "PR_kwDOA9"})
    responses.post(f"{GITHUB}/graphql", json=ready(), match=[matchers.json_params_matcher(
        {"query": MARK_READY, "variables": {"id": "PR_kwDOA9"}})])
    result = api().call("mark-pull-request-ready", repo=REPO, number=9)
    assert_shape("mark-pull-request-ready", result)
    assert (result["number"], result["draft"], result["node_id"]) == (9, False, "PR_kwDOA9")
    sent = responses.calls[1].request
    assert sent.headers["Authorization"] == f"token {TOKEN}"
    assert json.loads(sent.body)["query"].startswith("mutation MarkReady($id: ID!)")


@responses.activate
def test_a_pull_request_that_is_no_draft_is_not_written_to():
    responses.get(f"{GITHUB}/repos/{REPO}/pulls/9",
                  json=pull_json(9, draft=False) | {"node_id": "PR_kwDOA9"})
    result = api().call("mark-pull-request-ready", repo=REPO, number=9)
    assert result["draft"] is False
    assert [c.request.method for c in responses.calls] == ["GET"]


@responses.activate
def test_github_enterprise_server_takes_graphql_at_api_graphql():
    responses.get(f"{GHES}/api/v3/repos/{REPO}/pulls/9",
                  json=pull_json(9) | {"node_id": "PR_kwDOA9"})
    responses.post(f"{GHES}/api/graphql", json=ready())
    result = api("https://ghe.example.com/api/v3").call("mark-pull-request-ready",
                                                         repo=REPO, number=9)
    assert result["draft"] is False
    assert responses.calls[1].request.url == f"{GHES}/api/graphql"


@responses.activate
def test_graphql_errors_in_a_200_answer_are_errors_with_githubs_message():
    responses.get(f"{GITHUB}/repos/{REPO}/pulls/9",
                  json=pull_json(9) | {"node_id": "PR_kwDOA9"})
    responses.post(f"{GITHUB}/graphql", json={
        "data": {"markPullRequestReadyForReview": None},
        "errors": [{"type": "UNPROCESSABLE", "path": ["markPullRequestReadyForReview"],
                    "message": "Pull request is closed\u202e and cannot be marked"}]})
    with pytest.raises(IntegrationError) as refused:
        api().call("mark-pull-request-ready", repo=REPO, number=9)
    err = refused.value
    assert not isinstance(err, NotFound)
    assert (err.op, err.codes, err.retriable) == ("mark-pull-request-ready",
                                                  ("UNPROCESSABLE",), False)
    assert err.reason == "Pull request is closed and cannot be marked"  # made safe
    assert "Pull request is closed" not in str(err)  # the message never carries the body


@responses.activate
def test_graphql_not_found_is_not_found():
    responses.get(f"{GITHUB}/repos/{REPO}/pulls/9",
                  json=pull_json(9) | {"node_id": "PR_gone"})
    responses.post(f"{GITHUB}/graphql", json={
        "data": {"markPullRequestReadyForReview": None},
        "errors": [{"type": "NOT_FOUND", "path": ["markPullRequestReadyForReview"],
                    "message": "Could not resolve to a node with the global id of "
                               "'PR_gone'"}]})
    with pytest.raises(NotFound) as missing:
        api().call("mark-pull-request-ready", repo=REPO, number=9)
    assert missing.value.codes == ("NOT_FOUND",)
    assert "PR_gone" in missing.value.reason


@responses.activate
def test_a_graphql_answer_without_data_is_an_error():
    responses.get(f"{GITHUB}/repos/{REPO}/pulls/9",
                  json=pull_json(9) | {"node_id": "PR_kwDOA9"})
    responses.post(f"{GITHUB}/graphql", json={})
    with pytest.raises(IntegrationError, match="has no data"):
        api().call("mark-pull-request-ready", repo=REPO, number=9)


@responses.activate
def test_reviewers_and_teams_are_requested():
    responses.post(
        f"{GITHUB}/repos/{REPO}/pulls/9/requested_reviewers", status=201,
        json=pull_json(9) | {"requested_reviewers": [{"login": "alice"}],
                             "requested_teams": [{"slug": "justice-league", "id": 1}]},
        match=[matchers.json_params_matcher({"reviewers": ["alice"],
                                             "team_reviewers": ["justice-league"]})])
    result = api().call("request-reviewers", repo=REPO, number=9, reviewers=["alice"],
                        team_reviewers=["justice-league"])
    assert result == {"requested": ["alice"], "teams": ["justice-league"]}


@responses.activate
def test_a_reviewer_who_is_no_collaborator_is_refused_with_githubs_reason():
    responses.post(f"{GITHUB}/repos/{REPO}/pulls/9/requested_reviewers", status=422, json={
        "message": "Reviews may only be requested from collaborators. One or more of the "
                   "users or teams you specified is not a collaborator of the "
                   f"{REPO} repository.",
        "documentation_url": "https://docs.github.com/rest/pulls/review-requests"})
    with pytest.raises(IntegrationError) as refused:
        api().call("request-reviewers", repo=REPO, number=9, reviewers=["stranger"])
    assert (refused.value.status, refused.value.retriable) == (422, False)
    assert refused.value.reason.startswith("Reviews may only be requested from collaborators")


def test_nobody_to_request_is_a_bad_call():
    with pytest.raises(IntegrationError, match="at least one login"):
        api().call("request-reviewers", repo=REPO, number=9, reviewers=[], team_reviewers=[])


@responses.activate
def test_a_graphql_answers_rate_limit_is_not_taken_for_the_rest_apis(redis_ns):
    """GraphQL has its own budget (``x-ratelimit-resource: graphql``): its headers leave
    the primary (``core``) budget the throttle paces on as the REST answers left it."""
    throttle = WriteThrottle(redis_ns.client, redis_ns.prefix, sleep=lambda _s: None)
    client = GitHubClients(fast(token=TOKEN), throttle=throttle).for_installation(None)
    reset = str(int(time.time()) + 600)
    responses.get(f"{GITHUB}/repos/{REPO}/pulls/9",
                  json=pull_json(9) | {"node_id": "PR_kwDOA9"},
                  headers={"x-ratelimit-remaining": "4000", "x-ratelimit-limit": "5000",
                           "x-ratelimit-reset": reset, "x-ratelimit-resource": "core"})
    responses.post(f"{GITHUB}/graphql", json=ready(),
                   headers={"x-ratelimit-remaining": "3", "x-ratelimit-limit": "5000",
                            "x-ratelimit-reset": reset, "x-ratelimit-resource": "graphql"})
    client.call("mark-pull-request-ready", repo=REPO, number=9)
    assert throttle.budget("token") == (4000, int(reset), 5000)
