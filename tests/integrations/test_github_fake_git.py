"""The fake GitHub's draft pull requests and git-backed repositories, in memory and
through the real ``api`` transport over loopback (the same state)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from graph.ports import IntegrationError, NotFound
from integrations.github import GitHubApi, GitHubClients, GitHubSettings
from tests.integrations.test_github_api import assert_shape, rsa_pem  # noqa: F401 (fixture)
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from the_loop.sandbox.fakegithub.state import FakeGitHub, run_git

REPO = "acme/widgets"
APP_ID = 77
SEED = {"README.md": "# widgets\n", ".the-loop/collaborators.yaml": "approvers: [alice]\n"}


@pytest.fixture
def served(tmp_path: Path, rsa_pem) -> Iterator[tuple[HttpFakeGitHub, GitHubApi, str]]:  # noqa: F811
    fake = HttpFakeGitHub(app_id=APP_ID, app_key=rsa_pem[0])
    fake.add_git_repo(REPO, tmp_path / "remote", SEED)
    url, stop = serve(fake)
    clients = GitHubClients(GitHubSettings(api_url=url, app_id=APP_ID, private_key=rsa_pem[0],
                                           write_interval=0.0, read_interval=0.0, retries=0))
    try:
        yield fake, clients.for_installation(5), url
    finally:
        clients.close()
        stop()


def test_git_backed_reads_at_a_branch_or_sha(served) -> None:
    fake, api, _ = served
    main = fake.branch_sha(REPO, "main")
    assert main is not None
    fake.add_file(REPO, "README.md", "# widgets v2\n")
    assert api.call("get-file", repo=REPO, path="README.md")["text"] == "# widgets v2\n"
    old = api.call("get-file", repo=REPO, path="README.md", ref=main)
    assert old["text"] == "# widgets\n" and old["ref"] == main
    assert old["sha"] == run_git(fake.repo(REPO).git_dir, "rev-parse",  # type: ignore[arg-type]
                                 f"{main}:README.md").stdout.decode().strip()
    nested = api.call("get-file", repo=REPO, path=".the-loop/collaborators.yaml")
    assert nested["text"] == SEED[".the-loop/collaborators.yaml"]
    for path, ref in ((".the-loop", None), ("missing.md", None), ("README.md", "nope")):
        with pytest.raises(NotFound):
            api.call("get-file", repo=REPO, path=path, ref=ref)


def test_put_file_commits_into_git(served) -> None:
    fake, api, _ = served
    got = api.call("get-file", repo=REPO, path="README.md")
    put = api.call("put-file", repo=REPO, path="README.md", branch="main", text="new\n",
                   sha=got["sha"], message="edit")
    assert fake.branch_sha(REPO, "main") == put["commit"]
    assert fake.file(REPO, "README.md") == "new\n"
    with pytest.raises(IntegrationError) as stale:
        api.call("put-file", repo=REPO, path="README.md", branch="main", text="x",
                 sha=got["sha"])
    assert stale.value.status == 409


def test_draft_pull_request_lifecycle(served) -> None:
    fake, api, url = served
    branch = "the-loop/12-login"
    with pytest.raises(IntegrationError) as missing:  # the head branch must exist
        api.call("create-pull-request", repo=REPO, head=branch, base="main", title="t",
                 body="")
    assert missing.value.status == 422
    run_git(fake.repo(REPO).git_dir, "update-ref", f"refs/heads/{branch}",  # type: ignore
            "refs/heads/main")
    with pytest.raises(IntegrationError) as empty:  # no commits between
        api.call("create-pull-request", repo=REPO, head=branch, base="main", title="t",
                 body="")
    assert empty.value.status == 422
    fake.add_file(REPO, "specs/12/requirements.md", "# R\n", ref=branch)
    assert api.call("find-pull-request", repo=REPO, head=branch) is None

    pr = api.call("create-pull-request", repo=REPO, head=branch, base="main",
                  title="Login page", body="Work item #12")
    assert_shape("create-pull-request", pr)
    assert pr["draft"] is True and pr["head_ref"] == branch and pr["base_ref"] == "main"
    assert pr["head_sha"] == fake.branch_sha(REPO, branch)
    assert pr["html_url"] == f"{url}/{REPO}/pull/{pr['number']}"

    # A retried create (its answer lost) finds the one that exists.
    assert api.call("create-pull-request", repo=REPO, head=branch, base="main",
                    title="Login page", body="x")["number"] == pr["number"]
    # A push moves the pull request's head, as on GitHub.
    fake.add_file(REPO, "specs/12/design.md", "# D\n", ref=branch)
    found = api.call("find-pull-request", repo=REPO, head=branch)
    assert found is not None and found["head_sha"] == fake.branch_sha(REPO, branch) \
        != pr["head_sha"]
    assert api.call("get-pull-request", repo=REPO, number=pr["number"]) == found

    updated = api.call("update-pull-request", repo=REPO, number=pr["number"],
                       title="Login page (design)")
    assert updated["number"] == pr["number"]
    assert fake.repo(REPO).pulls[pr["number"]]["title"] == "Login page (design)"
    assert fake.repo(REPO).pulls[pr["number"]]["body"] == "Work item #12"
    assert fake.actions[-2:] == [f"{REPO}#{pr['number']}:create-pull-request:{branch}",
                                 f"{REPO}#{pr['number']}:update-pull-request"]
    with pytest.raises(NotFound):
        api.call("update-pull-request", repo=REPO, number=999, body="x")


def test_in_memory_pull_requests_match_the_port() -> None:
    fake = FakeGitHub()
    fake.add_file(REPO, "README.md", "x")
    fake.add_file(REPO, "a.md", "a", ref="feature")
    fake.add_comment(REPO, 4, "an issue")
    pr = fake.call("create-pull-request", repo=REPO, head="feature", base="main", title="t",
                   body="b", draft=False)
    assert pr["number"] == 5 and pr["draft"] is False  # after issue 4 in the sequence
    assert_shape("create-pull-request", pr)
    assert fake.call("find-pull-request", repo=REPO, head="feature") == pr
    assert fake.call("find-pull-request", repo=REPO, head="other") is None
    with pytest.raises(IntegrationError):
        fake.call("create-pull-request", repo=REPO, head="feature", base="main", title="t",
                  body="")
    with pytest.raises(IntegrationError):
        fake.call("create-pull-request", repo=REPO, head="nope", base="main", title="t",
                  body="")
    assert_shape("update-pull-request",
                 fake.call("update-pull-request", repo=REPO, number=5, body="c"))


def test_git_http_needs_a_token_the_fake_issued(served) -> None:
    fake, _, url = served
    info = f"{url}/{REPO}.git/info/refs?service=git-upload-pack"
    anonymous = requests.get(info, timeout=10)
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"] == 'Basic realm="GitHub"'
    assert requests.get(info, auth=("x-access-token", "ghs_forged"), timeout=10).status_code \
        == 401
    token = fake.issue_token(5)
    ok = requests.get(info, auth=("x-access-token", token), timeout=10)
    assert ok.status_code == 200
    assert ok.headers["Content-Type"] == "application/x-git-upload-pack-advertisement"
    assert b"refs/heads/main" in ok.content
    assert requests.get(f"{url}/{REPO}-nope.git/info/refs", timeout=10).status_code == 404
    auth = base64.b64encode(b"x:" + token.encode()).decode()
    assert requests.get(f"{url}/repos/{REPO}", headers={"Authorization": f"Basic {auth}"},
                        timeout=10).status_code == 401  # REST takes no Basic auth
