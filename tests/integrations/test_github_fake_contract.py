"""Contract test: the real GitHub transports against the one fake GitHub.

The fake (``the_loop.sandbox.fakegithub.state.FakeGitHub``) is served on loopback by its HTTP front
(``tests/support/fake_github.HttpFakeGitHub``, the same state and operations).

Each operation runs through the same code path as production, over HTTP: the ``api``
transport (PyGithub) in both URL layouts (github.com and GHES ``/api/v3``) and both auth
modes, and the ``cli`` transport through a stand-in ``gh`` that forwards each ``gh api``
run to the fake (``tests/integrations/fakecli.gh_forwarder``). Results must have the
shapes the ``responses`` tests pin (``SHAPES``) and the fake must record the writes.
If PyGithub starts calling an endpoint the fake lacks, these tests fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from graph.ports import IntegrationError, NotFound, Unsupported
from integrations.github import GitHubApi, GitHubClients, GitHubSettings
from integrations.github_cli import GitHubCli
from tests.integrations.fakecli import gh_forwarder
from tests.integrations.test_github_api import assert_shape, rsa_pem  # noqa: F401 (fixture)
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from the_loop.sandbox.fakegithub.state import FakeGitHub as MemoryGitHub
from workers.identities import Accounts, IdentityKeys

REPO = "Codertocat/Hello-World"
APP_ID = 77
PAT = "ghp_contract_token"


@dataclass
class Env:
    fake: HttpFakeGitHub
    api: GitHubApi | GitHubCli
    clients: GitHubClients | None
    base_url: str
    ghes: bool = False  # the API root is GitHub Enterprise Server's /api/v3


@pytest.fixture(params=["app", "token-ghes", "cli"])
def env(request: pytest.FixtureRequest, rsa_pem, tmp_path) -> Iterator[Env]:  # noqa: F811
    fake = HttpFakeGitHub(app_id=APP_ID, tokens=[PAT], app_key=rsa_pem[0])
    fake.add_repo(REPO, default_branch="main")
    fake.add_file(REPO, "README.md", "# Hello ✓\n")
    fake.add_file(REPO, "docs/spec.md", "on a branch\n", ref="feature")
    fake.add_pull(REPO, 2, head_sha="c0ffee" + "0" * 34, head_ref="feature")
    url, stop = serve(fake)
    timing = {"write_interval": 0.0, "read_interval": 0.0, "retries": 0}
    if request.param == "cli":
        binary = gh_forwarder(tmp_path / "bin")
        cli = GitHubCli(str(binary), env={"FAKE_GH_BASE": url, "GH_TOKEN": PAT}, retries=0)
        try:
            yield Env(fake, cli, None, url)
        finally:
            stop()
        return
    if request.param == "app":
        settings = GitHubSettings(api_url=url, app_id=APP_ID, private_key=rsa_pem[0], **timing)
        installation = 31
    else:
        settings = GitHubSettings(api_url=f"{url}/api/v3", token=PAT, **timing)
        installation = None
    clients = GitHubClients(settings)
    try:
        yield Env(fake, clients.for_installation(installation), clients, url,
                  ghes=request.param == "token-ghes")
    finally:
        clients.close()
        stop()


def test_read_operations(env: Env) -> None:
    result = env.api.call("get-repository", repo=REPO)
    assert result == {"full_name": REPO, "default_branch": "main"}
    assert_shape("get-repository", result)

    result = env.api.call("get-pull-request", repo=REPO, number=2)
    assert result == {
        "number": 2,
        "head_sha": "c0ffee" + "0" * 34,
        "head_ref": "feature",
        "base_ref": "main",
        "state": "open",
        "draft": False,
        "html_url": f"{env.base_url}/{REPO}/pull/2",
        "head_repo": REPO,
        "maintainer_can_modify": False,
        "merged": False,
        "merged_by": None,
        "node_id": env.fake.pull_node_id(env.fake.repo(REPO).pulls[2]),
        "body": "",
    }
    assert_shape("get-pull-request", result)

    result = env.api.call("get-file", repo=REPO, path="README.md")
    assert result["text"] == "# Hello ✓\n" and result["ref"] is None
    assert_shape("get-file", result)
    on_branch = env.api.call("get-file", repo=REPO, path="docs/spec.md", ref="feature")
    assert on_branch["text"] == "on a branch\n"
    for path, ref in (("docs", "feature"), ("missing.md", None), ("docs/spec.md", None)):
        with pytest.raises(NotFound):
            env.api.call("get-file", repo=REPO, path=path, ref=ref)
    with pytest.raises(NotFound):
        env.api.call("get-pull-request", repo=REPO, number=404)
    with pytest.raises(NotFound):
        env.api.call("get-repository", repo="nobody/nothing")
    assert env.fake.actions == []


def test_label_operations(env: Env) -> None:
    fake, api = env.fake, env.api
    result = api.call("ensure-label", repo=REPO, label="phase:requirements", color="0e8a16")
    assert result == {"label": "phase:requirements", "created": True}
    assert_shape("ensure-label", result)
    again = api.call("ensure-label", repo=REPO, label="phase:requirements")
    assert again == {"label": "phase:requirements", "created": False}

    result = api.call("add-label", repo=REPO, number=1, label="phase:requirements")
    assert result == {"labels": ["phase:requirements"]}
    assert_shape("add-label", result)
    assert api.call("add-label", repo=REPO, number=1, label="needs/review") == {
        "labels": ["phase:requirements", "needs/review"]
    }
    result = api.call("remove-label", repo=REPO, number=1, label="phase:requirements")
    assert result == {"labels": ["needs/review"]}
    assert_shape("remove-label", result)
    absent = api.call("remove-label", repo=REPO, number=1, label="phase:requirements")
    assert absent == {"labels": None}
    assert_shape("remove-label", absent)

    assert fake.labels(REPO, 1) == ["needs/review"]
    assert set(fake.repo_labels(REPO)) == {"phase:requirements", "needs/review"}
    assert fake.actions == [
        f"{REPO}:create-label:phase:requirements",
        f"{REPO}#1:add-label:phase:requirements",
        f"{REPO}#1:add-label:needs/review",
        f"{REPO}#1:remove-label:phase:requirements",
    ]


def test_comment_operations(env: Env) -> None:
    fake, api = env.fake, env.api
    human = fake.add_comment(REPO, 1, "/approve", user="octocat")

    created = api.call("comment", repo=REPO, number=1, body="Requirements phase started.")
    assert_shape("comment", created)
    assert created["url"].endswith(f"#issuecomment-{created['id']}")
    updated = api.call("update-comment", repo=REPO, comment_id=created["id"], body="Done.")
    assert updated == created
    assert_shape("update-comment", updated)
    reaction = api.call("add-reaction", repo=REPO, comment_id=human, content="eyes")
    assert_shape("add-reaction", reaction)
    assert api.call("add-reaction", repo=REPO, comment_id=human, content="eyes") == reaction

    listed = api.call("list-comments", repo=REPO, number=1)
    assert_shape("list-comments", listed)
    me = fake.bot_login if env.api.installation_id else fake.user_login
    assert listed == {
        "comments": [
            {"id": human, "user": "octocat", "user_id": fake.user_id("octocat"),
             "body": "/approve"},
            {"id": created["id"], "user": me, "user_id": fake.user_id(me), "body": "Done."},
        ]
    }
    assert fake.comments(REPO, 1) == [{k: c[k] for k in ("id", "user", "body")}
                                      for c in listed["comments"]]
    assert fake.reactions(REPO, human) == [(me, "eyes")]
    assert fake.actions == [
        f"{REPO}#1:comment:{created['id']}",
        f"{REPO}:update-comment:{created['id']}",
        f"{REPO}:add-reaction:{human}:eyes",
        f"{REPO}:add-reaction:{human}:eyes",
    ]
    with pytest.raises(NotFound):
        api.call("update-comment", repo=REPO, comment_id=999999, body="x")


def test_list_comments_paginates(env: Env) -> None:
    for i in range(230):
        env.fake.add_comment(REPO, 5, f"c{i}")
    result = env.api.call("list-comments", repo=REPO, number=5)
    assert [c["body"] for c in result["comments"]] == [f"c{i}" for i in range(230)]
    pages = [r for r in env.fake.requests if r.path.endswith("/issues/5/comments")]
    assert len(pages) == 3


def test_large_file_goes_through_blob_api(env: Env) -> None:
    env.fake.contents_inline_limit = 4
    env.fake.add_file(REPO, "big.txt", "more than four bytes")
    assert env.api.call("get-file", repo=REPO, path="big.txt")["text"] == "more than four bytes"
    assert any("/git/blobs/" in r.path for r in env.fake.requests)


def test_auth_and_token_reuse(env: Env) -> None:
    if env.clients is None:
        pytest.skip("the cli transport authenticates as the operator's gh login")
    env.api.call("get-repository", repo=REPO)
    env.clients.for_installation(env.api.installation_id).call(
        "add-label", repo=REPO, number=1, label="x"
    )
    kinds = [(r.method, r.auth) for r in env.fake.requests]
    if env.api.installation_id:
        assert env.fake.token_requests == [31]
        assert kinds[0] == ("POST", "bearer")
        assert all(kind == "token" for _, kind in kinds[1:])
    else:
        assert env.fake.token_requests == []
        assert all(kind == "token" for _, kind in kinds)
        assert all(r.path.startswith("/api/v3/") for r in env.fake.requests)


def test_injected_faults_map_to_errors(env: Env) -> None:
    env.fake.fail_next(r"/repos/[^/]+/[^/]+$", 502)
    with pytest.raises(IntegrationError) as info:
        env.api.call("get-repository", repo=REPO)
    assert (info.value.status, info.value.retriable) == (502, True)
    env.fake.fail_next(
        r"/labels$",
        403,
        {"X-RateLimit-Remaining": "0"},
        method="POST",
        body={"message": "API rate limit exceeded"},
    )
    with pytest.raises(IntegrationError) as info:
        env.api.call("add-label", repo=REPO, number=1, label="x")
    assert (info.value.status, info.value.retriable) == (403, True)
    # the queue is drained: the next calls succeed
    assert env.api.call("get-repository", repo=REPO)["full_name"] == REPO
    assert env.api.call("add-label", repo=REPO, number=1, label="x") == {"labels": ["x"]}


def test_file_write_operations(env: Env) -> None:
    fake, api = env.fake, env.api
    created = api.call(
        "put-file", repo=REPO, path="specs/2/review.md", branch="feature", text="one\n"
    )
    assert_shape("put-file", created)
    assert created["path"] == "specs/2/review.md"
    read = api.call("get-file", repo=REPO, path="specs/2/review.md", ref="feature")
    assert (read["text"], read["sha"]) == ("one\n", created["sha"])
    updated = api.call(
        "put-file",
        repo=REPO,
        path="specs/2/review.md",
        branch="feature",
        text="two\n",
        sha=read["sha"],
        message="the-loop: record review",
    )
    assert updated["sha"] != created["sha"] and updated["commit"] != created["commit"]
    assert fake.file(REPO, "specs/2/review.md", "feature") == "two\n"
    with pytest.raises(IntegrationError) as stale:
        api.call("put-file", repo=REPO, path="specs/2/review.md", branch="feature",
                 text="three\n", sha=read["sha"])
    assert (stale.value.status, stale.value.retriable) == (409, False)
    with pytest.raises(IntegrationError) as missing_sha:
        api.call("put-file", repo=REPO, path="specs/2/review.md", branch="feature", text="x")
    assert missing_sha.value.status == 422
    assert fake.file(REPO, "specs/2/review.md", "feature") == "two\n"
    assert fake.actions == [f"{REPO}:put-file:feature:specs/2/review.md"] * 2


def test_a_draft_is_marked_ready_through_graphql(env: Env) -> None:
    """``mark-pull-request-ready`` through each transport against the fake's GraphQL
    endpoint (``/graphql``; GHES's ``/api/graphql`` for the ``/api/v3`` root): the draft
    is taken out of draft once; a second call reads it and writes nothing."""
    fake, api = env.fake, env.api
    fake.add_file(REPO, "x.md", "x\n", ref="draft-branch")
    fake.add_pull(REPO, 5, head_sha="d" * 40, head_ref="draft-branch", draft=True)
    fake.clear_records()
    result = api.call("mark-pull-request-ready", repo=REPO, number=5)
    assert_shape("mark-pull-request-ready", result)
    assert (result["number"], result["draft"]) == (5, False)
    assert fake.repo(REPO).pulls[5]["draft"] is False
    posted = [r.path for r in fake.requests
              if r.method == "POST" and not r.path.endswith("/access_tokens")]
    assert posted == ["/api/graphql" if env.ghes else "/graphql"]
    assert api.call("mark-pull-request-ready", repo=REPO, number=5)["draft"] is False
    assert fake.actions == [f"{REPO}#5:ready-for-review"]


def test_pull_request_operations(env: Env) -> None:
    fake, api = env.fake, env.api
    fake.set_pull_files(REPO, 2, [f"docs/{i}.md" for i in range(150)] + [("b.md", "a.md")])
    files = api.call("list-pull-files", repo=REPO, number=2)
    assert_shape("list-pull-files", files)
    assert files["files"] == [f"docs/{i}.md" for i in range(150)] + ["b.md", "a.md"]

    result = api.call("request-reviewers", repo=REPO, number=2, reviewers=["alice", "bob"],
                      team_reviewers=["reviewers"])
    assert result == {"requested": ["alice", "bob"], "teams": ["reviewers"]}
    assert_shape("request-reviewers", result)
    with pytest.raises(IntegrationError) as author:
        api.call("request-reviewers", repo=REPO, number=2, reviewers=[fake.user_login])
    assert author.value.status == 422
    assert fake.requested_reviewers(REPO, 2) == ["alice", "bob"]

    first = fake.add_review(REPO, 2, "alice", "CHANGES_REQUESTED")
    second = fake.add_review(REPO, 2, "alice", "APPROVED", commit_id="d" * 40)
    reviews = api.call("list-reviews", repo=REPO, number=2)
    assert_shape("list-reviews", reviews)
    assert reviews == {
        "reviews": [
            {"id": first, "user": "alice", "state": "CHANGES_REQUESTED",
             "commit_id": "c0ffee" + "0" * 34},
            {"id": second, "user": "alice", "state": "APPROVED", "commit_id": "d" * 40},
        ]
    }

    fake.set_permission(REPO, "alice", "maintain")
    fake.set_permission(REPO, "carol", "release-manager", permission="write")
    for login, expected in (("alice", "maintain"), ("carol", "write"), ("mallory", "none")):
        result = api.call("get-permission", repo=REPO, login=login)
        assert result == {"permission": expected}
        assert_shape("get-permission", result)
    with pytest.raises(NotFound):
        api.call("list-reviews", repo=REPO, number=999)
    assert fake.actions == [f"{REPO}#2:request-reviewers:alice", f"{REPO}#2:request-reviewers:bob",
                            f"{REPO}#2:request-team-reviewers:reviewers"]


def test_the_worker_learns_who_it_writes_as(env: Env, redis_ns) -> None:
    """The App's bot from ``GET /app`` (App mode), the token's user from ``GET /user``
    (token mode); the cli transport cannot say (``THE_LOOP_BOT_LOGINS`` names it)."""
    accounts = Accounts(redis_ns.client, IdentityKeys(redis_ns.prefix), ttl=60)
    own = accounts.own(env.api)
    fake = env.fake
    if env.clients is None:
        assert own.accounts == {}
        return
    me = fake.bot_login if env.api.installation_id else fake.user_login
    assert own.accounts == {me.casefold(): fake.user_id(me)}
    assert own.wrote(me, fake.user_id(me)) and not own.wrote("mallory", 1)


def test_get_user_names_the_account_that_has_the_login_now(env: Env) -> None:
    fake, api = env.fake, env.api
    first = api.call("get-user", login="alice")
    assert_shape("get-user", first)
    assert first == {"login": "alice", "id": fake.user_id("alice"), "type": "User"}
    fake.add_comment(REPO, 1, "an old comment", user="alice")
    taken = fake.recreate_user("alice")  # a new account took the freed login
    assert taken != first["id"]
    assert api.call("get-user", login="alice")["id"] == taken
    [old] = [c for c in api.call("list-comments", repo=REPO, number=1)["comments"]
             if c["body"] == "an old comment"]
    assert old["user"] == "alice" and old["user_id"] == first["id"]  # the author keeps theirs


def test_check_run_operations(env: Env) -> None:
    fake, api = env.fake, env.api
    head = "c0ffee" + "0" * 34
    if not api.installation_id:  # as on GitHub: only an App may write check runs
        with pytest.raises(IntegrationError) as info:
            api.call("create-check-run", repo=REPO, head_sha=head, name="the-loop",
                     status="queued")
        assert (info.value.status, info.value.retriable) == (403, False)
        assert api.call("list-check-runs", repo=REPO, head_sha=head) == {"check_runs": []}
        return
    created = api.call("create-check-run", repo=REPO, head_sha=head, name="the-loop",
                       status="in_progress", title="design", summary="waiting")
    assert_shape("create-check-run", created)
    other = api.call("create-check-run", repo=REPO, head_sha=head, name="lint",
                     status="completed", conclusion="neutral", title="lint")
    updated = api.call("update-check-run", repo=REPO, check_run_id=created["id"],
                       status="completed", conclusion="failure", title="blocked",
                       summary="design.md lacks a section")
    assert updated == created
    assert_shape("update-check-run", updated)
    listed = api.call("list-check-runs", repo=REPO, head_sha=head)
    assert_shape("list-check-runs", listed)
    assert listed == {"check_runs": [
        {"id": created["id"], "name": "the-loop", "status": "completed", "conclusion": "failure"},
        {"id": other["id"], "name": "lint", "status": "completed", "conclusion": "neutral"},
    ]}
    only = api.call("list-check-runs", repo=REPO, head_sha=head, name="lint")
    assert [r["id"] for r in only["check_runs"]] == [other["id"]]
    stored = {c["id"]: c for c in fake.check_runs(REPO)}
    assert stored[created["id"]]["output"] == {"title": "blocked",
                                               "summary": "design.md lacks a section",
                                               "text": None}
    assert fake.actions == [
        f"{REPO}:create-check-run:the-loop",
        f"{REPO}:create-check-run:lint",
        f"{REPO}:update-check-run:{created['id']}",
    ]


def test_a_failed_check_runs_output_annotations_and_job_log(env: Env) -> None:
    """Given a failed Actions job's check run with 120 annotations and a long log
    When the transport reads it
    Then get-check-run gives its output and app, list-check-run-annotations follows
    pages up to its limit (marked truncated), download-job-logs follows the 302 and
    keeps only the log's tail; a check run that is not an Actions job has no log."""
    fake, api = env.fake, env.api
    head = "c0ffee" + "0" * 34
    notes = [{"path": "pkg/mod.py", "start_line": n, "end_line": n,
              "annotation_level": "failure", "message": f"assert {n}"}
             for n in range(1, 121)]
    log = "".join(f"step {n}\n" for n in range(5000))
    job = fake.create_check_run(REPO, head, "tests", "completed", "failure", "2 failed",
                                "pytest: 2 failed", app="github-actions", log=log,
                                text="tail", annotations=notes[:50])
    fake.update_check_run(REPO, job["id"], annotations=notes[50:100])
    fake.update_check_run(REPO, job["id"], annotations=notes[100:])
    detail = api.call("get-check-run", repo=REPO, check_run_id=job["id"])
    assert detail == {"id": job["id"], "name": "tests", "head_sha": head,
                      "status": "completed", "conclusion": "failure", "details_url": None,
                      "app": "github-actions",
                      "output": {"title": "2 failed", "summary": "pytest: 2 failed",
                                 "text": "tail", "annotations_count": 120}}
    listed = api.call("list-check-run-annotations", repo=REPO, check_run_id=job["id"],
                      limit=110)
    assert [a["start_line"] for a in listed["annotations"]] == list(range(1, 111))
    assert listed["truncated"] is True
    assert listed["annotations"][0] == {"path": "pkg/mod.py", "start_line": 1,
                                        "end_line": 1, "annotation_level": "failure",
                                        "title": None, "message": "assert 1"}
    every = api.call("list-check-run-annotations", repo=REPO, check_run_id=job["id"],
                     limit=200)
    assert len(every["annotations"]) == 120 and every["truncated"] is False
    if "download-job-logs" not in api.operations:  # gh api follows the redirect itself
        assert env.clients is None
        return
    got = api.call("download-job-logs", repo=REPO, job_id=job["id"], tail_bytes=20)
    assert got["truncated"] is True and log.endswith(got["text"])
    assert got["text"].endswith("step 4999\n") and len(got["text"].encode()) <= 20
    blob = [r for r in fake.requests if r.path.startswith("/_blobs/job-logs/")]
    assert [(r.auth, r.status) for r in blob] == [("none", 206)]  # no API token sent
    own = fake.create_check_run(REPO, head, "the-loop", "completed", "success", "ok", "ok")
    with pytest.raises(NotFound):
        api.call("download-job-logs", repo=REPO, job_id=own["id"])
    with pytest.raises(NotFound):
        api.call("get-check-run", repo=REPO, check_run_id=own["id"] + 1000)


def test_fake_rejects_bad_credentials(env: Env) -> None:
    base = env.base_url
    anonymous_write = requests.post(f"{base}/repos/{REPO}/issues/1/comments", json={"body": "x"})
    assert anonymous_write.status_code == 401
    wrong = requests.get(f"{base}/repos/{REPO}", headers={"Authorization": "token ghp_wrong"})
    assert wrong.status_code == 401
    not_jwt = requests.post(
        f"{base}/app/installations/1/access_tokens", headers={"Authorization": "token x"}
    )
    assert not_jwt.status_code == 401
    unknown = requests.get(f"{base}/api/v3/repos/{REPO}/nothing-here")
    assert unknown.status_code == 404 and unknown.json()["message"] == "Not Found"


def _scenario(
    provider: Any, *, checks: bool = True
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Run one hook-like sequence of operations; return (op, result) pairs and id-free
    actions so providers that number comments and check runs differently can be
    compared. The provider's repository has pull request 2 (head ``feature``) changing
    ``docs/a.md``, a review by alice, and alice as a maintainer."""
    results: list[tuple[str, dict[str, Any]]] = []

    def run(op: str, **params: Any) -> dict[str, Any]:
        result = provider.call(op, **params)
        results.append((op, result))
        return result

    run("get-repository", repo=REPO)
    run("get-file", repo=REPO, path="README.md")
    run("ensure-label", repo=REPO, label="phase:design")
    run("add-label", repo=REPO, number=1, label="phase:design")
    run("remove-label", repo=REPO, number=1, label="phase:design")
    created = run("comment", repo=REPO, number=1, body="Design phase started.")
    run("update-comment", repo=REPO, comment_id=created["id"], body="Design phase done.")
    run("add-reaction", repo=REPO, comment_id=created["id"], content="rocket")
    run("list-comments", repo=REPO, number=1)
    run("list-pull-files", repo=REPO, number=2)
    run("request-reviewers", repo=REPO, number=2, reviewers=["alice"])
    run("list-reviews", repo=REPO, number=2)
    run("get-permission", repo=REPO, login="alice")
    run("get-user", login="alice")
    got = run("get-file", repo=REPO, path="docs/spec.md", ref="feature")
    run("put-file", repo=REPO, path="docs/spec.md", branch="feature", text="edited\n",
        sha=got["sha"], message="the-loop: edit")
    check_id = "<no check run>"
    if checks:
        head = "c0ffee" + "0" * 34
        check = run("create-check-run", repo=REPO, head_sha=head, name="the-loop",
                    status="queued")
        check_id = str(check["id"])
        run("update-check-run", repo=REPO, check_run_id=check["id"], conclusion="success")
        run("list-check-runs", repo=REPO, head_sha=head, name="the-loop")
    with pytest.raises(NotFound):
        provider.call("get-file", repo=REPO, path="missing.md")
    with pytest.raises(Unsupported):
        provider.call("delete-repository", repo=REPO)
    return results, [
        a.replace(str(created["id"]), "<id>").replace(check_id, "<check>")
        for a in provider.actions
    ]


def test_in_memory_fake_matches_real_client(env: Env) -> None:
    """The fake called in-process (as graph, hook and worker tests use it) agrees with
    GitHubApi talking to the same fake over HTTP: same operations, result shapes and
    actions."""
    memory = MemoryGitHub()
    memory.add_file(REPO, "README.md", "# Hello ✓\n")
    memory.add_file(REPO, "docs/spec.md", "on a branch\n", ref="feature")
    memory.add_pull(REPO, 2, head_sha="c0ffee" + "0" * 34, head_ref="feature",
                    files=["docs/a.md"])
    memory.add_review(REPO, 2, "alice")
    memory.set_permission(REPO, "alice", "maintain")
    env.fake.set_pull_files(REPO, 2, ["docs/a.md"])
    env.fake.add_review(REPO, 2, "alice")
    env.fake.set_permission(REPO, "alice", "maintain")
    # Who the client acts as: the in-process fake acts for an App; the real client does in
    # App mode, acts with the token's user in token mode, and the cli cannot say.
    who = {"get-app", "get-authenticated-user"}
    # gh follows a job log's redirect itself: the cli transport has no download-job-logs.
    unsaid = who | ({"download-job-logs"} if env.clients is None else set())
    assert memory.operations - unsaid == env.api.operations - unsaid
    assert "get-app" in memory.operations
    expected = (set() if env.clients is None else
                {"get-app"} if env.api.installation_id else {"get-authenticated-user"})
    assert env.api.operations & who == expected

    checks = env.api.installation_id is not None
    real_results, real_actions = _scenario(RecordingApi(env.api, env.fake), checks=checks)
    memory_results, memory_actions = _scenario(memory, checks=checks)
    assert [op for op, _ in memory_results] == [op for op, _ in real_results]
    for op, result in memory_results + real_results:
        assert_shape(op, result)
    assert memory_actions == real_actions


@dataclass
class RecordingApi:
    """GitHubApi plus the HTTP fake's action log, shaped like the in-memory fake."""

    api: GitHubApi
    fake: HttpFakeGitHub

    @property
    def actions(self) -> list[str]:
        return self.fake.actions

    def call(self, op: str, **params: Any) -> dict[str, Any]:
        return self.api.call(op, **params)


def test_merge_and_delete_branch_operations(env: Env) -> None:
    """``merge-pull-request`` is SHA-guarded as GitHub's "Merge a pull request" is: a
    stale ``sha`` is refused (409, GitHub's words as the reason), the head merges once,
    then the pull request is closed and merged (405 for a second merge); ``delete-branch``
    of a branch that is not there answers ``deleted: False`` (GitHub's 422)."""
    fake, api = env.fake, env.api
    head = "c0ffee" + "0" * 34
    with pytest.raises(IntegrationError) as stale:
        api.call("merge-pull-request", repo=REPO, number=2, sha="d" * 40,
                 merge_method="squash")
    assert stale.value.status == 409 and not stale.value.retriable
    assert "Head branch was modified" in stale.value.reason
    merged = api.call("merge-pull-request", repo=REPO, number=2, sha=head,
                      merge_method="squash")
    assert_shape("merge-pull-request", merged)
    assert merged["merged"] is True and merged["sha"]
    pull = api.call("get-pull-request", repo=REPO, number=2)
    assert (pull["state"], pull["merged"]) == ("closed", True)
    assert pull["merged_by"] == fake.repo(REPO).pulls[2]["merged_by"]
    assert pull["merged_by"] in (fake.bot_login, fake.user_login)  # the token's login
    with pytest.raises(IntegrationError) as again:
        api.call("merge-pull-request", repo=REPO, number=2, sha=head, merge_method="squash")
    assert again.value.status == 405
    gone = api.call("delete-branch", repo=REPO, branch="the-loop/2-gone")
    assert gone == {"deleted": False}
    assert_shape("delete-branch", gone)
    assert [a for a in fake.actions if ":merge-pull-request:" in a] == [
        f"{REPO}#2:merge-pull-request:squash:{merged['sha']}"]
