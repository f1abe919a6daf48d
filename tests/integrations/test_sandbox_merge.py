"""The sandbox's merge: ``PUT /repos/{owner}/{repo}/pulls/{n}/merge`` is SHA-guarded and
merges for real in the fake's bare repository (``squash``, ``merge``, ``rebase``), as
GitHub's "Merge a pull request" does; a merge is delivered as ``pull_request.closed``
(``merged: true``), the ``push`` to the base branch and ``issues.closed`` for each issue
the body closes (``Closes #N``), in that order; ``PATCH pulls/{n}`` with ``state:
closed`` is ``pull_request.closed`` with ``merged: false``; a deleted branch is a
``push`` with ``deleted: true``. The payloads carry what GitHub's published webhook
schema requires of a closed pull request and a closed issue (``state``, ``closed_at``,
``merged``)."""

from __future__ import annotations

import json

import pytest
import requests

from foundation.events import GitHubEvent
from foundation.webhook_schema import SCHEMA_PATH
from tests.integrations.test_sandbox_deliveries import SECRET, receiver
from tests.support.app_key import APP_KEY_PEM, app_jwt
from the_loop.sandbox.fakegithub.git import run_git
from the_loop.sandbox.fakegithub.http import serve
from the_loop.sandbox.fakegithub.state import closed_by, commit_files
from the_loop.sandbox.github import SandboxGitHub

REPO = "sandbox/demo"


@pytest.fixture
def sandbox(tmp_path):
    hook, got, server = receiver()
    fake = SandboxGitHub(webhook_url=hook, secret=SECRET, user_login="you",
                         app_key=APP_KEY_PEM)
    fake.add_git_repo(REPO, tmp_path / "git", {"README.md": "hi\n", "app.py": "x = 1\n"})
    url, stop = serve(fake)
    fake.start_delivering()
    token = requests.post(f"{url}/app/installations/1/access_tokens", timeout=5, headers={
        "Authorization": "Bearer " + app_jwt()}).json()["token"]
    try:
        yield fake, url, {"Authorization": f"token {token}"}, got
    finally:
        fake.stop_delivering()
        stop()
        server.shutdown()


def branch(fake: SandboxGitHub, name: str, files: dict[str, str], *, commits: int = 1) -> str:
    """A branch from main with ``commits`` commits (the last one sets ``files``)."""
    git_dir = fake.repo(REPO).git_dir
    assert git_dir is not None
    run_git(git_dir, "update-ref", f"refs/heads/{name}", "main")
    for i in range(commits - 1):
        commit_files(git_dir, name, {f"{name}-{i}.txt": f"{i}\n"}, message=f"step {i}",
                     author=("Dev", "dev@example.com"))
    return commit_files(git_dir, name, files, message="the change",
                        author=("Dev", "dev@example.com"))


def closing_fields(deliveries: list) -> None:
    """What GitHub's webhook schema (``pull_request$closed``, ``issues$closed``) requires
    beyond the event's shared shapes: ``state: closed``, a ``closed_at`` string, and a
    pull request's ``merged`` boolean."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["definitions"]
    for headers, payload in deliveries:
        if payload.get("action") != "closed":
            continue
        event = headers["X-Github-Event"]
        subject = payload["pull_request" if event == "pull_request" else "issue"]
        extra = schema[f"{event}$closed"]["properties"][
            "pull_request" if event == "pull_request" else "issue"]["allOf"][1]
        for key in extra["required"]:
            assert key in subject, (event, key)
        assert subject["state"] == "closed" and isinstance(subject["closed_at"], str)
        if event == "pull_request":
            assert isinstance(subject["merged"], bool)


def kinds(got: list) -> list[tuple[str, str | None]]:
    return [(h["X-Github-Event"], p.get("action")) for h, p in got]


def test_closing_keywords_name_the_issues_of_the_same_repository():
    assert closed_by("Closes #3, fixes: #4 and see #5; Resolved #3, o/r#9, Fixes#2") == [3, 4]
    assert closed_by(None) == []


def test_a_stale_sha_is_refused_409_and_nothing_merges(sandbox):
    fake, url, h, got = sandbox
    with fake.acting_as("you"):
        issue = fake.open_issue(REPO, "Login")
    head = branch(fake, "the-loop/1-login", {"login.py": "ok = True\n"})
    pull = requests.post(f"{url}/repos/{REPO}/pulls", headers=h, timeout=5, json={
        "title": "Login", "head": "the-loop/1-login", "base": "main",
        "body": f"Closes #{issue}"}).json()
    main = fake.branch_sha(REPO, "main")
    answer = requests.put(f"{url}/repos/{REPO}/pulls/{pull['number']}/merge", headers=h,
                          timeout=5, json={"sha": "f" * 40, "merge_method": "squash"})
    assert answer.status_code == 409
    assert answer.json()["message"] == "Head branch was modified. Review and try the merge again."
    assert fake.branch_sha(REPO, "main") == main
    assert fake.get_pull_request(REPO, pull["number"])["state"] == "open"
    assert head == pull["head"]["sha"]
    assert fake.wait_delivered(10)
    assert ("pull_request", "closed") not in kinds(got)


def test_a_conflict_is_refused_405(sandbox):
    fake, url, h, _ = sandbox
    branch(fake, "the-loop/2-x", {"app.py": "x = 2\n"})
    pull = requests.post(f"{url}/repos/{REPO}/pulls", headers=h, timeout=5, json={
        "title": "X", "head": "the-loop/2-x", "base": "main"}).json()
    git_dir = fake.repo(REPO).git_dir
    commit_files(git_dir, "main", {"app.py": "x = 3\n"}, message="meanwhile",
                 author=("Dev", "dev@example.com"))
    for method in ("merge", "squash", "rebase"):
        answer = requests.put(f"{url}/repos/{REPO}/pulls/{pull['number']}/merge", headers=h,
                              timeout=5, json={"sha": pull["head"]["sha"],
                                               "merge_method": method})
        assert answer.status_code == 405, method
        assert answer.json()["message"] == "Pull Request is not mergeable"
    assert fake.git_text(fake.repo(REPO), "main", "app.py") == "x = 3\n"


@pytest.mark.parametrize("method", ["squash", "merge", "rebase"])
def test_a_merge_lands_the_content_closes_the_issue_and_is_delivered_in_order(sandbox, method):
    fake, url, h, got = sandbox
    with fake.acting_as("you"):
        issue = fake.open_issue(REPO, "Login", labels=["the-loop"])
        other = fake.open_issue(REPO, "Unrelated")
    head = branch(fake, "the-loop/1-login", {"login.py": "ok = True\n"}, commits=2)
    pull = requests.post(f"{url}/repos/{REPO}/pulls", headers=h, timeout=5, json={
        "title": "Login", "head": "the-loop/1-login", "base": "main",
        "body": f"Work for the issue.\n\nCloses #{issue}\n"}).json()
    assert fake.wait_delivered(10)
    before = len(got)
    with fake.acting_as("you"):
        merged = fake.merge_pull(REPO, pull["number"], method)
    assert fake.wait_delivered(10)
    main = fake.branch_sha(REPO, "main")
    assert merged == {"sha": main, "merged": True,
                      "message": "Pull Request successfully merged"}
    r = fake.repo(REPO)
    assert fake.git_text(r, "main", "login.py") == "ok = True\n"
    assert fake.git_text(r, "main", "the-loop/1-login-0.txt") == "0\n"
    parents = run_git(r.git_dir, "rev-list", "--parents", "-n", "1", main).stdout.split()
    assert len(parents) == (3 if method == "merge" else 2)
    if method == "rebase":  # each commit replayed, its author kept
        subjects = run_git(r.git_dir, "log", "--format=%s|%an", "-3", "main").stdout.decode()
        assert subjects.splitlines()[:2] == ["the change|Dev", "step 0|Dev"]
    assert head != main
    shown = fake.get_pull_request(REPO, pull["number"])
    assert (shown["state"], shown["merged"], shown["merged_by"]) == ("closed", True, "you")
    assert fake.issues[(REPO, issue)]["state"] == "closed"
    assert fake.issues[(REPO, other)]["state"] == "open"
    after = got[before:]
    assert kinds(after) == [("pull_request", "closed"), ("push", None), ("issues", "closed")]
    closed, push, issue_closed = (p for _, p in after)
    assert closed["pull_request"]["merged"] is True
    assert closed["pull_request"]["merged_by"]["login"] == "you"
    assert closed["pull_request"]["merge_commit_sha"] == main
    assert (push["ref"], push["after"], push["pusher"]["name"]) == ("refs/heads/main", main,
                                                                    "you")
    assert issue_closed["issue"]["number"] == issue
    assert issue_closed["issue"]["state"] == "closed"
    closing_fields(after)
    event = GitHubEvent.parse("pull_request", closed)
    assert (event.merged, event.merged_by, event.pull_number) == (True, "you", pull["number"])
    again = requests.put(f"{url}/repos/{REPO}/pulls/{pull['number']}/merge", headers=h,
                         timeout=5, json={"sha": head})
    assert again.status_code == 405


def test_closing_unmerged_and_deleting_the_branch_are_delivered(sandbox):
    fake, url, h, got = sandbox
    branch(fake, "the-loop/3-y", {"y.py": "y = 1\n"})
    pull = requests.post(f"{url}/repos/{REPO}/pulls", headers=h, timeout=5, json={
        "title": "Y", "head": "the-loop/3-y", "base": "main", "body": "Closes #1"}).json()
    assert fake.wait_delivered(10)
    before = len(got)
    answer = requests.patch(f"{url}/repos/{REPO}/pulls/{pull['number']}", headers=h,
                            timeout=5, json={"state": "closed"})
    assert answer.status_code == 200
    assert (answer.json()["state"], answer.json()["merged"]) == ("closed", False)
    assert requests.patch(f"{url}/repos/{REPO}/pulls/{pull['number']}", headers=h, timeout=5,
                          json={"state": "closed"}).status_code == 200  # nothing twice
    deleted = requests.delete(f"{url}/repos/{REPO}/git/refs/heads/the-loop/3-y", headers=h,
                              timeout=5)
    assert deleted.status_code == 204
    assert requests.delete(f"{url}/repos/{REPO}/git/refs/heads/the-loop/3-y", headers=h,
                           timeout=5).status_code == 422
    assert requests.delete(f"{url}/repos/{REPO}/git/refs/heads/main", headers=h,
                           timeout=5).status_code == 422
    assert fake.wait_delivered(10)
    after = got[before:]
    assert kinds(after) == [("pull_request", "closed"), ("push", None)]
    assert after[0][1]["pull_request"]["merged"] is False
    assert after[0][1]["sender"]["login"] == fake.bot_login
    assert (after[1][1]["deleted"], after[1][1]["ref"]) == (True, "refs/heads/the-loop/3-y")
    assert "the-loop/3-y" not in fake.branches(REPO)
    closing_fields(after)
