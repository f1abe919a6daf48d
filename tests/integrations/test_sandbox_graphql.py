"""The sandbox's GraphQL endpoint (``the_loop/sandbox/fakegithub/http/graphql.py``) and
the mutation the-loop sends, checked against GitHub's published GraphQL schema (npm
``@octokit/graphql-schema``, pinned in tools/github-graphql-schema, installed by ``make
venv``), and served over loopback as GitHub answers: ``data``, ``errors`` with ``type``,
401 without a token, ``NOT_FOUND`` for an unknown node id, graphql-core's validation of
the document; marking a draft ready delivers ``pull_request.ready_for_review``."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
import requests
from graphql import (
    GraphQLInputObjectType,
    GraphQLObjectType,
    GraphQLSchema,
    build_client_schema,
    parse,
    validate,
)

from integrations.github_ops.pulls import MARK_READY
from tests.conftest import REPO_ROOT
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from the_loop.sandbox.fakegithub.http.graphql import schema as fake_schema
from the_loop.sandbox.github import SandboxGitHub

PUBLISHED = (REPO_ROOT / ".venv" / "github-graphql-schema" / "node_modules" / "@octokit" /
             "graphql-schema" / "schema.json")
REPO = "o/r"
#: The auto-merge request the sandbox serves, as a client (the merge step) sends it.
AUTO_MERGE = """mutation AutoMerge($id: ID!, $method: PullRequestMergeMethod!) {
  enablePullRequestAutoMerge(input: {pullRequestId: $id, mergeMethod: $method}) {
    pullRequest { id number autoMergeRequest { mergeMethod enabledBy { login } } }
  }
}"""


@cache
def github_schema() -> GraphQLSchema:
    assert PUBLISHED.is_file(), "run make venv: it installs @octokit/graphql-schema"
    # The introspection result: the package's schema.graphql repeats a field GitHub
    # declares twice (EnterpriseOwnerInfo), which an SDL build refuses.
    return build_client_schema(json.loads(PUBLISHED.read_text(encoding="utf-8")))


def test_the_mutation_the_loop_sends_is_valid_against_githubs_schema():
    """Names, the input field and every payload field the transport reads exist in
    GitHub's schema with the types the document uses."""
    assert validate(github_schema(), parse(MARK_READY)) == []
    assert validate(github_schema(), parse(AUTO_MERGE)) == []
    # and a misspelt one is caught, so the check can fail
    wrong = MARK_READY.replace("pullRequestId", "pullRequestID")
    assert validate(github_schema(), parse(wrong))


def _fields(t: Any) -> dict[str, str]:
    return {name: str(f.type) for name, f in t.fields.items()}


def test_every_type_and_field_the_fake_serves_is_githubs():
    """The fake's schema is a slice of GitHub's: each of its object and input types has
    GitHub's name, and each field (argument, input field) GitHub's name and type."""
    github, fake = github_schema(), fake_schema()
    for name, t in fake.type_map.items():
        if name.startswith("__") or not isinstance(t, GraphQLObjectType | GraphQLInputObjectType):
            continue
        published = github.get_type(name)
        assert published is not None, name
        theirs = _fields(published)
        for field, kind in _fields(t).items():
            if name == "EnablePullRequestAutoMergeInput" and field == "expectedHeadOid":
                assert theirs[field] == "GitObjectID", field  # a scalar the fake takes as String
                continue
            assert theirs.get(field) == kind, (name, field, kind, theirs.get(field))
        if isinstance(t, GraphQLObjectType):
            for field, f in t.fields.items():
                for arg, a in f.args.items():
                    assert str(published.fields[field].args[arg].type) == str(a.type)  # type: ignore[union-attr]
    for mutation in ("markPullRequestReadyForReview", "enablePullRequestAutoMerge"):
        assert mutation in github.mutation_type.fields  # type: ignore[union-attr]


@pytest.fixture
def sandbox():
    fake = SandboxGitHub(tokens=["ghp_person"])
    fake.add_repo(REPO)
    fake.add_file(REPO, "README.md", "hi\n")
    fake.add_file(REPO, "x.md", "x\n", ref="the-loop/1-x")
    fake.add_pull(REPO, 2, head_sha="a" * 40, head_ref="the-loop/1-x", draft=True)
    url, stop = serve(fake)
    try:
        yield fake, url
    finally:
        stop()


def post(url: str, query: str, variables: dict[str, Any] | None = None, *,
         token: str | None = "ghp_person", path: str = "/graphql") -> requests.Response:
    headers = {"Authorization": f"token {token}"} if token else {}
    return requests.post(url + path, json={"query": query, "variables": variables or {}},
                         headers=headers, timeout=10)


def node_id(fake: HttpFakeGitHub, number: int = 2) -> str:
    return fake.pull_node_id(fake.repo(REPO).pulls[number])


def test_marking_a_draft_ready_answers_githubs_shape_and_delivers_ready_for_review(sandbox):
    fake, url = sandbox
    answer = post(url, MARK_READY, {"id": node_id(fake)})
    assert answer.status_code == 200
    assert answer.json() == {"data": {"markPullRequestReadyForReview": {"pullRequest": {
        "id": node_id(fake), "number": 2, "isDraft": False}}}}
    assert fake.repo(REPO).pulls[2]["draft"] is False
    assert [(d.event, d.action) for d in fake.deliveries] == [
        ("pull_request", "ready_for_review")]
    # Again: nothing changes, nothing is delivered.
    assert post(url, MARK_READY, {"id": node_id(fake)}).json()["data"][
        "markPullRequestReadyForReview"]["pullRequest"]["isDraft"] is False
    assert len(fake.deliveries) == 1


def test_github_enterprise_servers_path_serves_the_same(sandbox):
    fake, url = sandbox
    answer = post(url, MARK_READY, {"id": node_id(fake)}, path="/api/graphql")
    assert answer.json()["data"]["markPullRequestReadyForReview"]["pullRequest"][
        "isDraft"] is False
    assert post(url, MARK_READY, {"id": node_id(fake)}, path="/api/v3/graphql"
                ).status_code == 404  # GraphQL is not under the REST root


def test_an_unknown_node_id_is_not_found(sandbox):
    fake, url = sandbox
    body = post(url, MARK_READY, {"id": "PR_nothing"}).json()
    assert body["data"] == {"markPullRequestReadyForReview": None}
    [error] = body["errors"]
    assert error["type"] == "NOT_FOUND"
    assert error["path"] == ["markPullRequestReadyForReview"]
    assert "PR_nothing" in error["message"]
    assert fake.repo(REPO).pulls[2]["draft"] is True


def test_without_a_token_it_is_401(sandbox):
    fake, url = sandbox
    answer = post(url, MARK_READY, {"id": node_id(fake)}, token=None)
    assert answer.status_code == 401
    assert fake.repo(REPO).pulls[2]["draft"] is True


def test_a_document_githubs_schema_refuses_is_refused(sandbox):
    fake, url = sandbox
    for query, variables in (
            (MARK_READY.replace("pullRequestId", "pullRequestID"), {"id": node_id(fake)}),
            (MARK_READY, {}),  # the variable is required
            ("mutation { markPullRequestReadyForReview(input: {pullRequestId: \"x\"}) "
             "{ pullRequest { mergeable } } }", {}),  # a field the fake does not serve
            ("{", {})):
        body = post(url, query, variables).json()
        assert body.get("data") is None and body["errors"][0]["message"], query
    assert fake.repo(REPO).pulls[2]["draft"] is True
    assert post(url, "", {}).json()["errors"][0]["message"].startswith("A query attribute")


def test_auto_merge_is_recorded_and_returned(sandbox):
    fake, url = sandbox
    body = post(url, AUTO_MERGE, {"id": node_id(fake), "method": "SQUASH"}).json()
    assert "errors" not in body
    auto = body["data"]["enablePullRequestAutoMerge"]["pullRequest"]["autoMergeRequest"]
    assert auto == {"mergeMethod": "SQUASH", "enabledBy": {"login": fake.user_login}}
    assert fake.repo(REPO).pulls[2]["auto_merge"]["merge_method"] == "SQUASH"
    assert fake.actions[-1] == f"{REPO}#2:enable-auto-merge:SQUASH"
    refused = post(url, AUTO_MERGE, {"id": node_id(fake), "method": "FAST_FORWARD"}).json()
    assert refused.get("data") is None and refused["errors"]  # not a merge method
