"""GitHub's GraphQL endpoint, the two mutations the-loop sends: ``POST /graphql``
(github.com layout) and ``POST /api/graphql`` (GitHub Enterprise Server's, beside its REST
root ``/api/v3``; "Forming calls with GraphQL").

The request's document is parsed, validated against :data:`SDL` and executed by
graphql-core (the reference implementation), so a document GitHub would refuse (an
unknown field or argument, a missing ``pullRequestId``, a variable of the wrong type) is
refused here with graphql-core's own validation errors. :data:`SDL` is the slice of
GitHub's schema those mutations touch, with GitHub's names
(``tests/integrations/test_sandbox_graphql.py`` checks them against the published schema,
npm ``@octokit/graphql-schema``):

* ``markPullRequestReadyForReview(input: {pullRequestId})`` takes the pull request out
  of draft through the fake's own operation (the sandbox then delivers
  ``pull_request.ready_for_review``);
* ``enablePullRequestAutoMerge(input: {pullRequestId, mergeMethod})`` records the
  auto-merge request on the pull request (``autoMergeRequest``) and returns it; merging
  is not done here.

Answers are GitHub's: HTTP 200 with ``data`` and, when something failed, ``errors``
(``type``, ``message``, ``path``, ``locations``): ``NOT_FOUND`` for an id that names no
pull request ("Could not resolve to a node with the global id of '...'"),
``UNPROCESSABLE`` for a closed one; 401 without a token; 400 for a body that is not JSON.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from flask import Blueprint, Response, g, jsonify
from graphql import GraphQLError, GraphQLSchema, build_schema, graphql_sync

from graph.ports import IntegrationError, NotFound
from the_loop.sandbox.fakegithub.http.common import fake, json_body, web_base
from the_loop.sandbox.fakegithub.store import Repo

__all__ = ["AUTH_DOCS", "SDL", "bp", "schema"]

bp = Blueprint("graphql", __name__)

#: The ``documentation_url`` of the 401 GitHub answers an unauthenticated GraphQL call.
AUTH_DOCS = ("https://docs.github.com/graphql/guides/forming-calls-with-graphql"
             "#authenticating-with-graphql")

#: The part of GitHub's GraphQL schema the fake serves (names, types and nullability as
#: published; fields the-loop never reads are left out).
SDL = """
scalar DateTime
scalar URI

interface Node { id: ID! }

type Actor { login: String! }

enum PullRequestState { CLOSED MERGED OPEN }

enum PullRequestMergeMethod { MERGE REBASE SQUASH }

type AutoMergeRequest {
  enabledAt: DateTime
  enabledBy: Actor
  mergeMethod: PullRequestMergeMethod!
}

type PullRequest implements Node {
  autoMergeRequest: AutoMergeRequest
  id: ID!
  isDraft: Boolean!
  number: Int!
  state: PullRequestState!
  title: String!
  url: URI!
}

type Query {
  node(id: ID!): Node
}

input MarkPullRequestReadyForReviewInput {
  clientMutationId: String
  pullRequestId: ID!
}

type MarkPullRequestReadyForReviewPayload {
  clientMutationId: String
  pullRequest: PullRequest
}

input EnablePullRequestAutoMergeInput {
  authorEmail: String
  clientMutationId: String
  commitBody: String
  commitHeadline: String
  expectedHeadOid: String
  mergeMethod: PullRequestMergeMethod = MERGE
  pullRequestId: ID!
}

type EnablePullRequestAutoMergePayload {
  actor: Actor
  clientMutationId: String
  pullRequest: PullRequest
}

type Mutation {
  enablePullRequestAutoMerge(
    input: EnablePullRequestAutoMergeInput!
  ): EnablePullRequestAutoMergePayload
  markPullRequestReadyForReview(
    input: MarkPullRequestReadyForReviewInput!
  ): MarkPullRequestReadyForReviewPayload
}
"""


@cache
def schema() -> GraphQLSchema:
    """:data:`SDL`, built once; ``Node`` resolves to ``PullRequest`` (the only one)."""
    built = build_schema(SDL)
    node = built.get_type("Node")
    node.resolve_type = lambda _value, _info, _type: "PullRequest"  # type: ignore[union-attr]
    return built


class Refused(GraphQLError):
    """A mutation GitHub refuses: its error ``type`` (``NOT_FOUND``, ``UNPROCESSABLE``)
    rides in the error's extensions until :func:`github_error` lifts it to the top."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message, extensions={"type": kind})


def pull_node(r: Repo, number: int) -> dict[str, Any]:
    """The ``PullRequest`` object of pull request ``number`` of ``r`` (call with the lock
    held)."""
    gh = fake()
    pr = r.pulls[number]
    auto = pr.get("auto_merge")
    return {
        "id": gh.pull_node_id(pr), "number": number, "isDraft": bool(pr.get("draft")),
        "state": "MERGED" if pr.get("merged") else str(pr["state"]).upper(),
        "title": pr["title"], "url": f"{web_base()}/{r.full_name}/pull/{number}",
        "autoMergeRequest": None if not auto else {
            "mergeMethod": auto["merge_method"], "enabledAt": auto.get("enabled_at"),
            "enabledBy": {"login": auto.get("enabled_by")}},
    }


def _target(node_id: Any) -> tuple[Repo, int]:
    found = fake().pull_by_node_id(str(node_id))
    if found is None:
        raise Refused("NOT_FOUND", f"Could not resolve to a node with the global id of "
                                   f"'{str(node_id)[:100]}'")
    return found


def _refusal(exc: IntegrationError) -> Refused:
    if isinstance(exc, NotFound):
        return Refused("NOT_FOUND", "Could not resolve to a PullRequest.")
    return Refused((exc.codes or ("UNPROCESSABLE",))[0], exc.reason or str(exc))


class Mutations:
    """The root value of a mutation: one method per field (graphql-core's default
    resolver calls them with ``info`` and the field's arguments)."""

    @staticmethod
    def markPullRequestReadyForReview(_info: Any, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802,A002
        gh = fake()
        with gh.lock:
            r, number = _target(input["pullRequestId"])
            try:
                with gh.acting_as(g.login):
                    gh.mark_pull_request_ready(r.full_name, number)
            except IntegrationError as exc:
                raise _refusal(exc) from None
            return {"clientMutationId": input.get("clientMutationId"),
                    "pullRequest": pull_node(r, number)}

    @staticmethod
    def enablePullRequestAutoMerge(_info: Any, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802,A002
        gh = fake()
        with gh.lock:
            r, number = _target(input["pullRequestId"])
            try:
                gh.enable_auto_merge(r.full_name, number, str(input.get("mergeMethod")
                                                              or "MERGE"), actor=g.login)
            except IntegrationError as exc:
                raise _refusal(exc) from None
            return {"clientMutationId": input.get("clientMutationId"),
                    "actor": {"login": g.login}, "pullRequest": pull_node(r, number)}


def github_error(error: GraphQLError) -> dict[str, Any]:
    """One entry of GitHub's ``errors``: ``message``, ``locations``, ``path`` and, for a
    refusal, its ``type`` at the top level, as GitHub puts it."""
    entry: dict[str, Any] = {"message": error.message}
    kind = (error.extensions or {}).get("type")
    if kind:
        entry["type"] = kind
    if error.path:
        entry["path"] = list(error.path)
    if error.locations:
        entry["locations"] = [{"line": loc.line, "column": loc.column}
                              for loc in error.locations]
    return entry


@bp.post("/graphql")
@bp.post("/api/graphql")
def graphql() -> Response:
    """``POST /graphql`` (and GHES's ``/api/graphql``): ``{"query", "variables"?,
    "operationName"?}`` parsed, validated and executed against :func:`schema`."""
    if g.get("login") is None:
        resp = jsonify({"message": "This endpoint requires you to be authenticated.",
                        "documentation_url": AUTH_DOCS})
        resp.status_code = 401
        return resp
    body = json_body()
    if not isinstance(body, dict):
        resp = jsonify({"message": "Problems parsing JSON",
                        "documentation_url": "https://docs.github.com/graphql"})
        resp.status_code = 400
        return resp
    query, variables = body.get("query"), body.get("variables")
    if not isinstance(query, str) or not query.strip():
        return _answer({"errors": [{"message": "A query attribute must be specified and "
                                               "must be a string."}]})
    if variables is not None and not isinstance(variables, dict):
        return _answer({"errors": [{"message": "Variables are invalid JSON."}]})
    operation = body.get("operationName")
    result = graphql_sync(schema(), query, root_value=Mutations,
                          variable_values=variables or None,
                          operation_name=operation if isinstance(operation, str) else None)
    answer: dict[str, Any] = {}
    if result.data is not None or not result.errors:
        answer["data"] = result.data
    if result.errors:
        answer["errors"] = [github_error(e) for e in result.errors]
    return _answer(answer)


def _answer(doc: dict[str, Any]) -> Response:
    resp = jsonify(doc)
    resp.headers["x-ratelimit-resource"] = "graphql"
    return resp
