"""One contract suite for every transport of every integration.

:data:`PROVIDERS` lists a harness for every provider class; :data:`CASES` holds one case
per (integration, operation). :func:`test_operation` is parametrized over every operation
every provider *declares* (its ``operations``), so:

* a provider that declares an operation without a case here fails the suite;
* a provider class in ``integrations.providers.TRANSPORTS`` -- or any provider-shaped class
  in the ``integrations`` package -- without a harness here fails the suite
  (:func:`test_every_provider_is_under_contract`);

and for every (provider, operation) the suite asserts the same result (shape, and the
values every transport must agree on) and the same side effect:

* GitHub ``api`` (PyGithub, through ``responses``) and ``cli`` (``gh api``, through a fake
  ``gh`` executable that records its argv and answers canned output) must send exactly the
  same REST requests -- method, path, query and JSON body -- for the same answers;
* Slack ``sdk`` and ``webhook`` (slack-sdk over ``urllib``, so a loopback recorder instead
  of ``responses``) must post the same text and blocks;
* Jira ``api`` (``responses``) and ``cli`` (a fake ``jira`` executable) must make the same
  change to the same issue.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import responses
from responses import matchers

import integrations
from integrations.github import GitHubApi, GitHubClients, GitHubSettings
from integrations.github_cli import GitHubCli
from integrations.github_ops.pulls import MARK_READY
from integrations.jira import JiraApi, JiraCli
from integrations.providers import TRANSPORTS
from integrations.slack import SlackSdk, SlackWebhook
from tests.integrations import loopback
from tests.integrations.fakecli import FakeCli
from tests.integrations.test_github_api import assert_shape as assert_github_shape
from tests.support import jira_fake

REPO = "Codertocat/Hello-World"
R = f"/repos/{REPO}"
GITHUB = "https://api.github.com:443"
JIRA = "https://jira.example.com"
HEAD = "a" * 40


# ----------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Exchange:
    """One HTTP request the transport must send (``method``, ``path``, ``query``, JSON
    body ``sent``) and the canned answer (``status``, JSON ``reply``, ``headers``)."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    sent: Any = None
    status: int = 200
    reply: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    """One operation's contract.

    Attributes:
        params: the ``call`` parameters.
        expect: result values every transport must return (all keys for GitHub).
        effects: the side effects every transport must cause, transport-independent
            (GitHub: the REST requests, from ``http``).
        http: GitHub's REST conversation (both GitHub transports get the same answers).
        canned: transport -> canned answers, for integrations whose transports speak
            different protocols (Slack, Jira).
    """

    params: dict[str, Any]
    expect: dict[str, Any]
    effects: list[Any] = field(default_factory=list)
    http: tuple[Exchange, ...] = ()
    canned: dict[str, Any] = field(default_factory=dict)

    def expected_effects(self) -> list[Any]:
        if self.http:
            return [(e.method, e.path, e.query, e.sent) for e in self.http]
        return self.effects


def _label(name: str) -> dict[str, Any]:
    return {"id": 1, "name": name, "color": "ededed"}


def _comment(cid: int, body: str, login: str = "octocat") -> dict[str, Any]:
    return {"id": cid, "body": body, "user": {"login": login, "id": 583231},
            "html_url": f"https://github.com/{REPO}/issues/1#issuecomment-{cid}"}


def _next(path: str, page: int) -> dict[str, str]:
    return {"Link": f'<https://api.github.com{path}?per_page=100&page={page}>; rel="next"'}


PR = {"number": 7, "state": "open", "head": {"sha": HEAD, "ref": "feature"},
      "base": {"sha": "b" * 40, "ref": "main"}}
DRAFT = {"number": 9, "state": "open", "draft": True,
         "html_url": f"https://github.com/{REPO}/pull/9",
         "head": {"sha": HEAD, "ref": "the-loop/12-login"},
         "base": {"sha": "b" * 40, "ref": "main"}}
SPEC = "# Spec ✓\n"
SPEC_B64 = "IyBTcGVjIOKckwo="
RUN = {"id": 77, "name": "the-loop", "status": "completed", "conclusion": "success"}
ANNOTATION = {"path": "pkg/mod.py", "start_line": 3, "end_line": 3,
              "annotation_level": "failure", "title": None, "message": "assert 1 == 2"}
ANNOTATION_JSON = {**ANNOTATION, "start_column": None, "end_column": None,
                   "raw_details": None,
                   "blob_href": f"https://github.com/{REPO}/blob/{HEAD}/pkg/mod.py"}

GITHUB_CASES: dict[str, Case] = {
    "get-repository": Case(
        {"repo": REPO},
        {"full_name": REPO, "default_branch": "main"},
        http=(Exchange("GET", R, reply={"full_name": REPO, "default_branch": "main"}),),
    ),
    "get-pull-request": Case(
        {"repo": REPO, "number": 7},
        {"number": 7, "head_sha": HEAD, "head_ref": "feature", "base_ref": "main",
         "state": "open"},
        http=(Exchange("GET", f"{R}/pulls/7", reply=PR),),
    ),
    "find-pull-request": Case(
        {"repo": REPO, "head": "the-loop/12-login"},
        {"number": 9, "head_ref": "the-loop/12-login", "draft": True},
        http=(Exchange("GET", f"{R}/pulls",
                       {"head": "Codertocat:the-loop/12-login", "state": "open",
                        "per_page": "100"}, reply=[DRAFT]),),
    ),
    "create-pull-request": Case(
        {"repo": REPO, "head": "the-loop/12-login", "base": "main", "title": "Login page",
         "body": "Work item #12"},
        {"number": 9, "head_sha": HEAD, "base_ref": "main", "draft": True,
         "html_url": f"https://github.com/{REPO}/pull/9"},
        http=(Exchange("POST", f"{R}/pulls", status=201, reply=DRAFT,
                       sent={"title": "Login page", "head": "the-loop/12-login",
                             "base": "main", "body": "Work item #12", "draft": True}),),
    ),
    "update-pull-request": Case(
        {"repo": REPO, "number": 9, "title": "Login page (design)"},
        {"number": 9, "state": "open"},
        http=(Exchange("PATCH", f"{R}/pulls/9", sent={"title": "Login page (design)"},
                       reply=DRAFT),),
    ),
    "add-label": Case(
        {"repo": REPO, "number": 1, "label": "phase:design"},
        {"labels": ["bug", "phase:design"]},
        http=(Exchange("POST", f"{R}/issues/1/labels", sent={"labels": ["phase:design"]},
                       reply=[_label("bug"), _label("phase:design")]),),
    ),
    "remove-label": Case(
        {"repo": REPO, "number": 1, "label": "phase:design"},
        {"labels": ["bug"]},
        http=(Exchange("DELETE", f"{R}/issues/1/labels/phase%3Adesign", reply=[_label("bug")]),),
    ),
    "ensure-label": Case(
        {"repo": REPO, "label": "phase:design", "color": "#0e8a16", "description": "Design"},
        {"label": "phase:design", "created": True},
        http=(
            Exchange("GET", f"{R}/labels/phase%3Adesign", status=404,
                     reply={"message": "Not Found"}),
            Exchange("POST", f"{R}/labels", status=201, reply=_label("phase:design"),
                     sent={"name": "phase:design", "color": "0e8a16",
                           "description": "Design"}),
        ),
    ),
    "comment": Case(
        {"repo": REPO, "number": 1, "body": "Design phase started."},
        {"id": 5, "url": f"https://github.com/{REPO}/issues/1#issuecomment-5"},
        http=(Exchange("POST", f"{R}/issues/1/comments", status=201,
                       sent={"body": "Design phase started."},
                       reply=_comment(5, "Design phase started.")),),
    ),
    "update-comment": Case(
        {"repo": REPO, "comment_id": 5, "body": "Done."},
        {"id": 5, "url": f"https://github.com/{REPO}/issues/1#issuecomment-5"},
        http=(Exchange("PATCH", f"{R}/issues/comments/5", sent={"body": "Done."},
                       reply=_comment(5, "Done.")),),
    ),
    "list-comments": Case(
        {"repo": REPO, "number": 1},
        {"comments": [{"id": 1, "user": "octocat", "user_id": 583231, "body": "/approve"},
                      {"id": 2, "user": "ghost", "user_id": None, "body": ""}]},
        http=(
            Exchange("GET", f"{R}/issues/1/comments", {"per_page": "100"},
                     reply=[_comment(1, "/approve")],
                     headers=_next(f"{R}/issues/1/comments", 2)),
            Exchange("GET", f"{R}/issues/1/comments", {"per_page": "100", "page": "2"},
                     reply=[{"id": 2, "user": None, "body": None}]),
        ),
    ),
    "add-reaction": Case(
        {"repo": REPO, "comment_id": 5, "content": "eyes"},
        {"id": 9},
        http=(Exchange("POST", f"{R}/issues/comments/5/reactions", status=201,
                       sent={"content": "eyes"}, reply={"id": 9, "content": "eyes"}),),
    ),
    "add-review-comment-reaction": Case(
        {"repo": REPO, "comment_id": 6, "content": "eyes"},
        {"id": 10},
        http=(Exchange("POST", f"{R}/pulls/comments/6/reactions", status=201,
                       sent={"content": "eyes"}, reply={"id": 10, "content": "eyes"}),),
    ),
    "get-file": Case(
        {"repo": REPO, "path": "docs/spec.md", "ref": "feature"},
        {"path": "docs/spec.md", "sha": "f" * 40, "ref": "feature", "text": SPEC},
        http=(Exchange("GET", f"{R}/contents/docs/spec.md", {"ref": "feature"},
                       reply={"type": "file", "encoding": "base64", "path": "docs/spec.md",
                              "sha": "f" * 40, "content": SPEC_B64}),),
    ),
    "put-file": Case(
        {"repo": REPO, "path": "docs/spec.md", "branch": "feature", "text": SPEC,
         "sha": "f" * 40, "message": "the-loop: record review"},
        {"path": "docs/spec.md", "sha": "e" * 40, "commit": "c" * 40},
        http=(Exchange("PUT", f"{R}/contents/docs/spec.md",
                       sent={"message": "the-loop: record review", "content": SPEC_B64,
                             "branch": "feature", "sha": "f" * 40},
                       reply={"content": {"path": "docs/spec.md", "sha": "e" * 40},
                              "commit": {"sha": "c" * 40}}),),
    ),
    "list-pull-files": Case(
        {"repo": REPO, "number": 7},
        {"files": ["README.md", "docs/new.md", "docs/old.md", "app.py"]},
        http=(
            Exchange("GET", f"{R}/pulls/7/files", {"per_page": "100"},
                     reply=[{"filename": "README.md"},
                            {"filename": "docs/new.md", "previous_filename": "docs/old.md"}],
                     headers=_next(f"{R}/pulls/7/files", 2)),
            Exchange("GET", f"{R}/pulls/7/files", {"per_page": "100", "page": "2"},
                     reply=[{"filename": "app.py"}]),
        ),
    ),
    "request-reviewers": Case(
        {"repo": REPO, "number": 7, "reviewers": ["alice"], "team_reviewers": ["justice"]},
        {"requested": ["alice"], "teams": ["justice"]},
        http=(Exchange("POST", f"{R}/pulls/7/requested_reviewers", status=201,
                       sent={"reviewers": ["alice"], "team_reviewers": ["justice"]},
                       reply=PR | {"requested_reviewers": [{"login": "alice"}],
                                   "requested_teams": [{"slug": "justice"}]}),),
    ),
    "mark-pull-request-ready": Case(
        {"repo": REPO, "number": 9},
        {"number": 9, "draft": False, "node_id": "PR_kwDO9"},
        http=(Exchange("GET", f"{R}/pulls/9", reply=DRAFT | {"node_id": "PR_kwDO9"}),
              Exchange("POST", "/graphql", sent={"query": MARK_READY,
                                                 "variables": {"id": "PR_kwDO9"}},
                       reply={"data": {"markPullRequestReadyForReview": {"pullRequest": {
                           "id": "PR_kwDO9", "number": 9, "isDraft": False}}}})),
    ),
    "merge-pull-request": Case(
        {"repo": REPO, "number": 7, "sha": "a" * 40, "merge_method": "squash"},
        {"sha": "m" * 40, "merged": True, "message": "Pull Request successfully merged"},
        http=(Exchange("PUT", f"{R}/pulls/7/merge",
                       sent={"sha": "a" * 40, "merge_method": "squash"},
                       reply={"sha": "m" * 40, "merged": True,
                              "message": "Pull Request successfully merged"}),),
    ),
    "delete-branch": Case(
        {"repo": REPO, "branch": "the-loop/7-login--api"},
        {"deleted": True},
        http=(Exchange("DELETE", f"{R}/git/refs/heads/the-loop/7-login--api", status=204,
                       reply=None),),
    ),
    "get-permission": Case(
        {"repo": REPO, "login": "alice"},
        {"permission": "maintain"},
        http=(Exchange("GET", f"{R}/collaborators/alice/permission",
                       reply={"permission": "write", "role_name": "maintain"}),),
    ),
    "get-user": Case(
        {"login": "alice"},
        {"login": "alice", "id": 583231, "type": "User"},
        http=(Exchange("GET", "/users/alice",
                       reply={"login": "alice", "id": 583231, "type": "User"}),),
    ),
    "list-reviews": Case(
        {"repo": REPO, "number": 7},
        {"reviews": [{"id": 3, "user": "alice", "state": "APPROVED", "commit_id": HEAD}]},
        http=(Exchange("GET", f"{R}/pulls/7/reviews", {"per_page": "100"},
                       reply=[{"id": 3, "user": {"login": "alice"}, "state": "APPROVED",
                               "commit_id": HEAD, "body": "lgtm"}]),),
    ),
    "create-check-run": Case(
        {"repo": REPO, "head_sha": HEAD, "name": "the-loop", "status": "in_progress",
         "title": "design", "summary": "waiting for an approval"},
        {"id": 77},
        http=(Exchange("POST", f"{R}/check-runs", status=201, reply=RUN,
                       sent={"name": "the-loop", "head_sha": HEAD, "status": "in_progress",
                             "output": {"title": "design",
                                        "summary": "waiting for an approval"}}),),
    ),
    "update-check-run": Case(
        {"repo": REPO, "check_run_id": 77, "status": "completed", "conclusion": "success",
         "title": "done"},
        {"id": 77},
        http=(Exchange("PATCH", f"{R}/check-runs/77", reply=RUN,
                       sent={"status": "completed", "conclusion": "success",
                             "output": {"title": "done", "summary": "done"}}),),
    ),
    "list-check-runs": Case(
        {"repo": REPO, "head_sha": HEAD, "name": "the-loop"},
        {"check_runs": [RUN]},
        http=(Exchange("GET", f"{R}/commits/{HEAD}/check-runs",
                       {"per_page": "100", "check_name": "the-loop"},
                       reply={"total_count": 1, "check_runs": [RUN | {"head_sha": HEAD}]}),),
    ),
    "get-check-run": Case(
        {"repo": REPO, "check_run_id": 77},
        {"id": 77, "name": "tests", "head_sha": HEAD, "status": "completed",
         "conclusion": "failure", "details_url": None, "app": "github-actions",
         "output": {"title": "2 failed", "summary": "pytest", "text": None,
                    "annotations_count": 2}},
        http=(Exchange("GET", f"{R}/check-runs/77", reply={
            "id": 77, "name": "tests", "head_sha": HEAD, "status": "completed",
            "conclusion": "failure", "details_url": None,
            "app": {"id": 15368, "slug": "github-actions"},
            "output": {"title": "2 failed", "summary": "pytest", "text": None,
                       "annotations_count": 2,
                       "annotations_url": f"https://api.github.com{R}/check-runs/77/annotations"}}),),
    ),
    "list-check-run-annotations": Case(
        {"repo": REPO, "check_run_id": 77, "limit": 150},
        {"annotations": [ANNOTATION] * 101, "truncated": False},
        http=(Exchange("GET", f"{R}/check-runs/77/annotations", {"per_page": "100"},
                       reply=[ANNOTATION_JSON] * 100,
                       headers=_next(f"{R}/check-runs/77/annotations", 2)),
              Exchange("GET", f"{R}/check-runs/77/annotations",
                       {"per_page": "100", "page": "2"}, reply=[ANNOTATION_JSON])),
    ),
    # GitHub answers 302 to a signed URL elsewhere; read without the API's token (the
    # canned answer is JSON-encoded by the mock: a quoted string).
    "download-job-logs": Case(
        {"repo": REPO, "job_id": 77, "tail_bytes": 100},
        {"text": '"step 2\\n"', "truncated": False},
        http=(Exchange("GET", f"{R}/actions/jobs/77/logs", status=302,
                       headers={"Location": f"{GITHUB}/_blobs/77?sig=s"}),
              Exchange("GET", "/_blobs/77", {"sig": "s"}, reply="step 2\n")),
    ),
}

BLOCKS = [{"type": "section", "text": {"type": "mrkdwn", "text": "*design* needs you"}}]
SLACK_CASES: dict[str, Case] = {
    "post-message": Case(
        {"channel": "C0123ABC", "text": "design needs your approval", "blocks": BLOCKS},
        {"ok": True},
        effects=[("post-message", "design needs your approval", BLOCKS)],
        canned={"sdk": {"ok": True, "channel": "C0123ABC", "ts": "1700000000.000100"},
                "webhook": "ok"},
    ),
    # The outbox's read-back of a pending post (graph.ports.EffectFinder): the channel's
    # history from the effect's recorded time, messages known by their metadata.
    "find-effect": Case(
        {"operation": "post-message", "effect": "github:o/r#1/n/1/notify/0",
         "params": {"channel": "C0123ABC", "text": "x"}, "since": 1700000000.0},
        {"found": True, "result": {"ok": True, "ts": "1700000000.000100", "reused": True}},
        canned={"sdk": {"ok": True, "has_more": False, "messages": [
            {"type": "message", "ts": "1700000001.000200", "text": "other"},
            {"type": "message", "ts": "1700000000.000100", "text": "x", "metadata": {
                "event_type": "the_loop_effect",
                "event_payload": {"effect": "github:o/r#1/n/1/notify/0"}}}]}},
    ),
}

TRANSITIONS = {"transitions": [
    {"id": "11", "name": "To Do", "to": {"name": "To Do"}},
    {"id": "21", "name": "Start work", "to": {"name": "In Progress"}},
]}
JIRA_CASES: dict[str, Case] = {
    "add-comment": Case(
        {"issue": "PROJ-12", "body": "Approved by @alice.\n\nNext: design."},
        {"issue": "PROJ-12"},
        effects=[("add-comment", "PROJ-12", "Approved by @alice.\n\nNext: design.")],
        canned={
            "api": [Exchange("POST", "/rest/api/3/issue/PROJ-12/comment", status=201,
                             reply={"id": "10001"})],
            "cli": ["✓ Comment added to issue \"PROJ-12\"\n"],
        },
    ),
    "add-label": Case(
        {"issue": "PROJ-12", "label": "the-loop"},
        {"issue": "PROJ-12", "label": "the-loop"},
        effects=[("add-label", "PROJ-12", "the-loop")],
        canned={
            "api": [Exchange("PUT", "/rest/api/3/issue/PROJ-12", status=204)],
            "cli": ["✓ Issue updated\n"],
        },
    ),
    "transition-issue": Case(
        {"issue": "PROJ-12", "name": "Start work"},
        {"issue": "PROJ-12", "transition": "Start work"},
        effects=[("transition-issue", "PROJ-12", "Start work")],
        canned={
            "api": [Exchange("GET", "/rest/api/3/issue/PROJ-12/transitions", reply=TRANSITIONS),
                    Exchange("POST", "/rest/api/3/issue/PROJ-12/transitions", status=204)],
            "cli": ["✓ Issue transitioned to \"Start work\"\n"],
        },
    ),
}

CASES: dict[tuple[str, str], Case] = {
    **{("github", op): c for op, c in GITHUB_CASES.items()},
    **{("slack", op): c for op, c in SLACK_CASES.items()},
    **{("jira", op): c for op, c in JIRA_CASES.items()},
}

#: Result shapes of the Slack and Jira operations (GitHub's: test_github_api.SHAPES).
SHAPES: dict[tuple[str, str], dict[str, tuple[type, ...]]] = {
    ("slack", "post-message"): {"ok": (bool,), "ts": (str, type(None))},
    ("slack", "find-effect"): {"found": (bool,), "result": (dict,)},
    ("jira", "add-comment"): {"issue": (str,), "id": (str, type(None))},
    ("jira", "add-label"): {"issue": (str,), "label": (str,)},
    ("jira", "transition-issue"): {"issue": (str,), "transition": (str,)},
}


def assert_shape(integration: str, op: str, result: dict[str, Any]) -> None:
    json.dumps(result)
    if integration == "github":
        assert_github_shape(op, result)
        return
    shape = SHAPES[(integration, op)]
    assert set(result) == set(shape), (op, result)
    for key, types in shape.items():
        assert isinstance(result[key], types), (op, key, result[key])


# ----------------------------------------------------------------------------- harnesses


def _http_effect(method: str, url: str, body: Any) -> tuple[str, str, dict[str, str], Any]:
    parsed = urllib.parse.urlsplit(url)
    path = parsed.path.removeprefix("/api/v3")
    query = {k: v[0] for k, v in urllib.parse.parse_qs(parsed.query).items()}
    if isinstance(body, bytes):
        body = body.decode()
    return method, path, query, json.loads(body) if body else None


def _canned(harness: Harness, case: Case) -> Any:
    if harness.transport not in case.canned:
        pytest.fail(f"contract case lacks canned answers for {harness.integration} "
                    f"transport {harness.transport!r}")
    return case.canned[harness.transport]


class Harness:
    """Runs one provider class under the contract: primes canned answers, calls the
    operation, and returns the result and the side effects it caused (normalized)."""

    cls: type
    integration: str
    transport: str

    def run(self, op: str, case: Case, tmp: Path) -> tuple[dict[str, Any], list[Any]]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.integration}-{self.transport}"


class GitHubApiHarness(Harness):
    cls, integration, transport = GitHubApi, "github", "api"

    def run(self, op: str, case: Case, tmp: Path) -> tuple[dict[str, Any], list[Any]]:
        with responses.RequestsMock(assert_all_requests_are_fired=True) as rs:
            for e in case.http:
                rs.add(e.method, GITHUB + e.path, json=e.reply, status=e.status,
                       headers=e.headers, match=[matchers.query_param_matcher(e.query)])
            settings = GitHubSettings(token="ghp_contract", write_interval=0.0,
                                      read_interval=0.0, retries=0)
            api = GitHubClients(settings).for_installation(None)
            result = api.call(op, **case.params)
            effects = [_http_effect(c.request.method, c.request.url, c.request.body)
                       for c in rs.calls]
        return result, effects


class GitHubCliHarness(Harness):
    cls, integration, transport = GitHubCli, "github", "cli"

    def run(self, op: str, case: Case, tmp: Path) -> tuple[dict[str, Any], list[Any]]:
        gh = FakeCli(tmp / "gh-bin", "gh")
        for e in case.http:
            gh.http(e.status, e.reply, e.headers)
        cli = GitHubCli(str(gh.path), env={"PATH": "/usr/bin:/bin"}, retries=0)
        result = cli.call(op, **case.params)
        assert gh.pending == 0, "a canned answer was not used"
        effects = []
        for call in gh.calls:
            argv = call["argv"]
            assert argv[:2] == ["api", "--method"] and "--include" in argv
            endpoint = next(a for a in argv[2:]
                            if a.startswith(("repos/", "users/", "https://", "graphql")))
            url = endpoint if "://" in endpoint else "/" + endpoint
            body = call["stdin"] if "--input" in argv else None
            effects.append(_http_effect(argv[2], url, body))
        return result, effects


class SlackSdkHarness(Harness):
    cls, integration, transport = SlackSdk, "slack", "sdk"

    def run(self, op: str, case: Case, tmp: Path) -> tuple[dict[str, Any], list[Any]]:
        with loopback.serve() as server:
            server.answer(200, _canned(self, case))
            sdk = SlackSdk("xoxb-contract", base_url=server.url + "/api/")
            if op == "find-effect":  # not a port operation: the outbox calls it directly
                result = sdk.find_effect(**case.params)
            else:
                result = sdk.call(op, **case.params)
        effects = []
        if op == "find-effect":  # a read: conversations.history, from the recorded time
            (seen,) = server.seen
            assert (seen.method, seen.path) == ("POST", "/api/conversations.history")
            sent = dict(urllib.parse.parse_qsl(seen.body.decode()))
            assert sent == {"channel": "C0123ABC", "oldest": "1699999880.000000",
                            "inclusive": "1", "include_all_metadata": "1", "limit": "200"}
            return result, effects
        for seen in server.seen:
            assert (seen.method, seen.path) == ("POST", "/api/chat.postMessage")
            assert seen.headers["Authorization"] == "Bearer xoxb-contract"
            sent = seen.json()
            assert sent["channel"] == case.params["channel"]
            effects.append(("post-message", sent["text"], sent.get("blocks")))
        return result, effects


class SlackWebhookHarness(Harness):
    cls, integration, transport = SlackWebhook, "slack", "webhook"

    def run(self, op: str, case: Case, tmp: Path) -> tuple[dict[str, Any], list[Any]]:
        with loopback.serve() as server:
            server.answer(200, _canned(self, case))
            hook = SlackWebhook(server.url + "/services/T000/B000/XXXX")
            result = hook.call(op, **case.params)
        effects = []
        for seen in server.seen:
            assert (seen.method, seen.path) == ("POST", "/services/T000/B000/XXXX")
            sent = seen.json()
            effects.append(("post-message", sent["text"], sent.get("blocks")))
        return result, effects


def _jira_server(version: int, exchange: Exchange) -> Any:
    """A responses callback answering ``exchange`` as Jira REST ``version`` does, refusing
    a comment body of the other version's form with Jira's 400
    (:func:`tests.support.jira_fake.refusal`: v2, Data Center, takes the plain string; v3,
    Cloud, an ADF document)."""
    def answer(request: Any) -> tuple[int, dict[str, str], str]:
        body = json.loads(request.body) if request.body else None
        if request.method == "POST" and request.url.endswith("/comment"):
            refused = jira_fake.refusal(version, body)
            if refused is not None:
                return 400, {}, json.dumps(refused)
        return exchange.status, {}, json.dumps(exchange.reply) if exchange.reply else ""
    return answer


class JiraApiHarness(Harness):
    """Jira Cloud: REST v3, ADF bodies."""

    cls, integration, transport = JiraApi, "jira", "api"
    version = 3
    #: ``None``: the version is given; else the site's serverInfo ``deploymentType``
    #: (the transport asks, with the other version as its fallback).
    deployment: str | None = None

    def __repr__(self) -> str:
        asked = f"-{self.deployment}" if self.deployment else ""
        return f"{self.integration}-{self.transport}-v{self.version}{asked}"

    def run(self, op: str, case: Case, tmp: Path) -> tuple[dict[str, Any], list[Any]]:
        exchanges = _canned(self, case)
        with responses.RequestsMock(assert_all_requests_are_fired=True) as rs:
            if self.deployment:
                rs.get(JIRA + jira_fake.SERVER_INFO,
                       json={"baseUrl": JIRA, "deploymentType": self.deployment})
            for e in exchanges:
                path = e.path.replace("/rest/api/3/", f"/rest/api/{self.version}/")
                rs.add_callback(e.method, JIRA + path, callback=_jira_server(self.version, e),
                                content_type="application/json")
            api = JiraApi(JIRA, "jira-contract-token", user="bot@example.com", retries=0,
                          api_version=None if self.deployment else self.version,
                          fallback_version=5 - self.version)
            result = api.call(op, **case.params)
            requests_seen = [(c.request.method, urllib.parse.urlsplit(c.request.url).path,
                              json.loads(c.request.body) if c.request.body else None)
                             for c in rs.calls]
        effects = []
        transitions = {t["id"]: t["name"] for t in TRANSITIONS["transitions"]}
        if self.deployment:  # asked once, first
            assert requests_seen[0] == ("GET", jira_fake.SERVER_INFO, None), requests_seen
            requests_seen = requests_seen[1:]
        for method, path, body in requests_seen:
            key = path.split("/")[5]
            assert path.startswith(f"/rest/api/{self.version}/"), path
            if method == "POST" and path.endswith("/comment"):
                text = body["body"] if self.version == 2 else jira_fake.adf_text(body["body"])
                effects.append(("add-comment", key, text))
            elif method == "PUT":
                (change,) = body["update"]["labels"]
                effects.append(("add-label", key, change["add"]))
            elif method == "POST" and path.endswith("/transitions"):
                effects.append(("transition-issue", key, transitions[body["transition"]["id"]]))
            else:
                assert method == "GET", (method, path)  # reads cause no effect
        return result, effects


class JiraDataCenterHarness(JiraApiHarness):
    """Jira Data Center / Server: REST v2, plain-text bodies."""

    version = 2


class JiraCloudAskedHarness(JiraApiHarness):
    """Jira Cloud, the version not given: serverInfo says ``Cloud`` -> v3."""

    deployment = "Cloud"


class JiraDataCenterAskedHarness(JiraDataCenterHarness):
    """Jira Data Center, the version not given: serverInfo says ``DataCenter`` -> v2."""

    deployment = "DataCenter"


class JiraCliHarness(Harness):
    cls, integration, transport = JiraCli, "jira", "cli"

    def run(self, op: str, case: Case, tmp: Path) -> tuple[dict[str, Any], list[Any]]:
        jira = FakeCli(tmp / "jira-bin", "jira")
        for stdout in _canned(self, case):
            jira.answer(stdout)
        result = JiraCli(str(jira.path), env={"PATH": "/usr/bin:/bin"}).call(op, **case.params)
        effects = []
        for call in jira.calls:
            argv = call["argv"]
            rest = argv[argv.index("--") + 1:]
            if argv[:3] == ["issue", "comment", "add"]:
                effects.append(("add-comment", rest[0], rest[1]))
            elif argv[:2] == ["issue", "edit"]:
                label = next(a for a in argv if a.startswith("--label="))
                effects.append(("add-label", rest[0], label.removeprefix("--label=")))
            elif argv[:2] == ["issue", "move"]:
                effects.append(("transition-issue", rest[0], rest[1]))
            else:
                pytest.fail(f"unexpected jira invocation {argv}")
        return result, effects


#: Every provider class under contract. Adding a transport means adding its harness.
PROVIDERS: list[Harness] = [
    GitHubApiHarness(),
    GitHubCliHarness(),
    SlackSdkHarness(),
    SlackWebhookHarness(),
    JiraApiHarness(),
    JiraDataCenterHarness(),
    JiraCloudAskedHarness(),
    JiraDataCenterAskedHarness(),
    JiraCliHarness(),
]

MATRIX = [(h, op) for h in PROVIDERS for op in sorted(h.cls.operations)]


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize(("harness", "op"), MATRIX, ids=[f"{h!r}:{op}" for h, op in MATRIX])
def test_operation(harness: Harness, op: str, tmp_path: Path) -> None:
    case = CASES.get((harness.integration, op))
    if case is None:
        pytest.fail(
            f"{harness.cls.__name__} declares {harness.integration} operation {op!r} but the "
            "contract suite has no case for it: add one to CASES in "
            "tests/integrations/test_contract.py"
        )
    result, effects = harness.run(op, case, tmp_path)
    assert_shape(harness.integration, op, result)
    for key, value in case.expect.items():
        assert result[key] == value, (key, result)
    assert effects == case.expected_effects()


def _provider_classes() -> set[type]:
    """Every class in the ``integrations`` package that looks like a provider: it has a
    non-empty ``operations``, a ``call`` method and a concrete ``transport`` (the in-memory
    fake, ``transport = "fake"``, has its own contract: test_github_fake_contract.py)."""
    found: set[type] = set()
    for info in pkgutil.iter_modules(integrations.__path__):
        module = importlib.import_module(f"integrations.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                cls.__module__ == module.__name__
                and isinstance(getattr(cls, "operations", None), frozenset)
                and cls.operations
                and callable(getattr(cls, "call", None))
                and getattr(cls, "transport", "?") not in ("?", "fake", None)
            ):
                found.add(cls)
    return found


def test_every_provider_is_under_contract() -> None:
    registered = {cls for by_name in TRANSPORTS.values() for cls in by_name.values()}
    harnessed = {h.cls for h in PROVIDERS}
    assert _provider_classes() <= registered, "provider classes missing from TRANSPORTS"
    assert registered == harnessed, "TRANSPORTS and the contract harnesses differ"
    for integration, by_name in TRANSPORTS.items():
        for name, cls in by_name.items():
            assert (cls.name, cls.transport) == (integration, name)  # type: ignore[attr-defined]
    for h in PROVIDERS:
        assert (h.integration, h.transport) == (h.cls.name, h.cls.transport)  # type: ignore


def test_every_case_is_declared_by_some_provider() -> None:
    declared = {(h.integration, op) for h, op in MATRIX}
    assert set(CASES) <= declared, set(CASES) - declared


def test_a_provider_without_a_case_fails_the_suite(tmp_path: Path) -> None:
    """The guarantee itself: a harness whose class declares an operation with no case."""

    class Extra(GitHubCli):
        operations = GitHubCli.operations | {"lock-issue"}

    class ExtraHarness(GitHubCliHarness):
        cls = Extra

    with pytest.raises(pytest.fail.Exception, match="no case for it"):
        test_operation(ExtraHarness(), "lock-issue", tmp_path)


def test_docs_table_lists_every_operation_of_every_transport() -> None:
    """docs/integrations.md has one row per (integration, operation), with a ✓ in
    exactly the columns of the transports that implement it."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()
    rows: dict[tuple[str, str], set[str]] = {}
    header: list[str] = []
    for line in doc.splitlines():
        cells = [c.strip() for c in line.replace("\\|", "/").strip().strip("|").split("|")]
        if cells[:2] == ["integration", "operation"]:
            header = cells
            continue
        if header and len(cells) == len(header) and cells[1].startswith("`"):
            marked = {header[i] for i, c in enumerate(cells) if c == "✓"}
            rows[(cells[0], cells[1].strip("`"))] = marked
        elif header and not line.startswith("|"):
            header = [] if rows else header
    expected = {
        (integration, op): {name for name, cls in by_name.items() if op in cls.operations}
        for integration, by_name in TRANSPORTS.items()
        for cls in by_name.values()
        for op in cls.operations  # type: ignore[attr-defined]
    }
    assert rows == expected
