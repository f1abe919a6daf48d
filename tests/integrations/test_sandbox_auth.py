"""The sandbox authenticates as GitHub does, so its gates mean something: a token it did
not issue is 401 ``Bad credentials`` and posts nothing (no comment, no delivery); the
person's token (issued by the sandbox into its directory, mode 0600) posts as them; an
installation token comes only for a JWT RS256-signed with the App's key whose
``iat``/``exp``/``iss`` GitHub would take, acts as the bot (``sender.type`` Bot) and
expires after an hour; over git, the person's credentials clone and their push is
delivered as theirs, and no credentials (or made-up ones) are refused with 401.

GitHub's answers: "Troubleshooting the REST API" (401 ``Bad credentials``), "Generating a
JSON Web Token (JWT) for a GitHub App" (RS256, ``exp`` at most 10 minutes ahead, ``iat``
not ahead of GitHub's clock, ``iss`` the App), "Generating an installation access token"
(one hour); git's smart HTTP without credentials: 401 with ``WWW-Authenticate: Basic``.
"""

from __future__ import annotations

import re
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import jwt
import pytest
import requests

from tests.e2e.test_end_to_end import wait_until
from tests.integrations.test_sandbox_deliveries import SECRET, receiver
from tests.support.app_key import app_jwt, new_app_key
from the_loop.sandbox import directory as sandbox_dir
from the_loop.sandbox.fakegithub.http import serve
from the_loop.sandbox.fakegithub.http.fake import (
    BAD_JWT,
    EXP_IN_PAST,
    EXP_TOO_FAR,
    IAT_IN_FUTURE,
)
from the_loop.sandbox.server import DEMO_REPO, Sandbox, build

USER = "octo-dev"
ISSUES = f"/repos/{DEMO_REPO}/issues"


@dataclass
class Served:
    box: Sandbox
    url: str
    key: str  # the App's private key, as the-loop holds it

    @property
    def fake(self):  # noqa: ANN201 (the SandboxGitHub)
        return self.box.github

    def comment(self, token_header: str, body: str = "/approve") -> requests.Response:
        return requests.post(f"{self.url}{ISSUES}/1/comments", json={"body": body},
                             headers={"Authorization": token_header}, timeout=10)

    def mint(self, assertion: str) -> requests.Response:
        return requests.post(f"{self.url}/app/installations/1/access_tokens", timeout=10,
                             headers={"Authorization": f"Bearer {assertion}"})


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    box = build(tmp_path / "sandbox", user=USER, webhook_url=None, secret=SECRET,
                base_url="http://127.0.0.1")
    key = (tmp_path / "sandbox" / sandbox_dir.APP_KEY).read_text()
    with box.github.acting_as(USER):
        box.github.open_issue(DEMO_REPO, "Add a login page", labels=["the-loop"])
    url, stop = serve(box.github)
    try:
        yield Served(box, url, key)
    finally:
        stop()


def comment_deliveries(fake) -> list:  # noqa: ANN001
    return [d for d in fake.deliveries if d.event == "issue_comment"]


def test_the_sandbox_issues_the_persons_token_into_its_directory_once(tmp_path):
    first = build(tmp_path / "sb", user=USER, webhook_url=None, secret="s",
                  base_url="http://127.0.0.1")
    again = build(tmp_path / "sb", user=USER, webhook_url=None, secret="s",
                  base_url="http://127.0.0.1")
    assert re.fullmatch(r"ghp_[A-Za-z0-9]{36}", first.user_token)
    assert again.user_token == first.user_token  # kept: what make run printed still works
    for name in (sandbox_dir.USER_TOKEN, sandbox_dir.ADMIN_TOKEN, sandbox_dir.APP_KEY):
        mode = (tmp_path / "sb" / name).stat().st_mode
        assert stat.S_IMODE(mode) == 0o600, name
    assert (tmp_path / "sb" / sandbox_dir.USER_TOKEN).read_text().strip() == first.user_token
    other = build(tmp_path / "elsewhere", user=USER, webhook_url=None, secret="s",
                  base_url="http://127.0.0.1")
    assert other.user_token != first.user_token  # random, not derived from the login


@pytest.mark.parametrize("header", [
    "token ghp_madeUpmadeUpmadeUpmadeUpmadeUpmadeUp",
    "Bearer ghp_madeUpmadeUpmadeUpmadeUpmadeUpmadeUp",
    "token ghs_madeUpmadeUpmadeUpmadeUpmadeUpmadeUp",
    "token x",
])
def test_a_made_up_token_is_bad_credentials_and_cannot_approve(served, header):
    answer = served.comment(header)
    assert answer.status_code == 401
    assert answer.json() == {"message": "Bad credentials",
                             "documentation_url": "https://docs.github.com/rest",
                             "status": "401"}
    assert served.fake.comments_on(DEMO_REPO, 1) == []
    assert comment_deliveries(served.fake) == []  # nothing reaches the receiver


def test_the_persons_token_posts_as_that_person(served):
    answer = served.comment(f"token {served.box.user_token}")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["user"]["login"] == USER
    assert [c["user"] for c in served.fake.comments_on(DEMO_REPO, 1)] == [USER]
    (delivery,) = comment_deliveries(served.fake)
    assert delivery.sender == USER
    me = requests.get(f"{served.url}/user", timeout=10,
                      headers={"Authorization": f"token {served.box.user_token}"})
    assert me.json()["login"] == USER and me.json()["type"] == "User"


def test_a_jwt_signed_with_the_apps_key_mints_a_bot_token_that_expires_in_an_hour(served):
    minted = served.mint(app_jwt(sandbox_dir.APP_ID, key=served.key))
    assert minted.status_code == 201, minted.json()
    token = minted.json()["token"]
    assert re.fullmatch(r"ghs_[A-Za-z0-9]{36}", token)
    expires = datetime.fromisoformat(minted.json()["expires_at"].replace("Z", "+00:00"))
    assert abs(expires.timestamp() - (time.time() + 3600)) < 120
    app = requests.get(f"{served.url}/app", timeout=10, headers={
        "Authorization": f"Bearer {app_jwt(sandbox_dir.APP_ID, key=served.key)}"})
    assert app.status_code == 200 and app.json()["id"] == sandbox_dir.APP_ID

    posted = served.comment(f"token {token}", "working on it")
    assert posted.status_code == 201
    assert posted.json()["user"]["login"] == served.fake.bot_login
    assert posted.json()["user"]["type"] == "Bot"
    (delivery,) = comment_deliveries(served.fake)
    assert delivery.sender == served.fake.bot_login
    assert served.fake.user_payload(delivery.sender)["type"] == "Bot"

    later = time.time() + 3601
    served.fake.clock = lambda: later  # an hour on
    assert served.comment(f"token {token}", "still here").status_code == 401
    info = f"{served.url}/{DEMO_REPO}.git/info/refs?service=git-upload-pack"
    assert requests.get(info, auth=("x-access-token", token), timeout=10).status_code == 401
    assert len(comment_deliveries(served.fake)) == 1


def _other_key() -> str:
    return new_app_key()


@pytest.mark.parametrize(("make", "message"), [
    (lambda key: jwt.encode({"iss": "1", "iat": int(time.time()) - 60,
                             "exp": int(time.time()) + 300}, "", algorithm="none"),
     BAD_JWT),  # unsigned
    (lambda key: jwt.encode({"iss": "1", "iat": int(time.time()) - 60,
                             "exp": int(time.time()) + 300}, "k" * 32, algorithm="HS256"),
     BAD_JWT),  # signed, but not with the App's key
    (lambda key: app_jwt(1, key=_other_key()), BAD_JWT),  # another key
    (lambda key: app_jwt(1, key=key, iat=-700, exp=-100), EXP_IN_PAST),  # expired
    (lambda key: app_jwt(1, key=key, exp=None), EXP_IN_PAST),
    (lambda key: app_jwt(1, key=key, iat=0, exp=660), EXP_TOO_FAR),  # beyond 10 minutes
    (lambda key: app_jwt(1, key=key, iat=300, exp=400), IAT_IN_FUTURE),
    (lambda key: app_jwt(None, key=key), BAD_JWT),
    (lambda key: app_jwt(99, key=key), "Integration not found"),  # another App's
    (lambda key: "not.a.jwt", BAD_JWT),
], ids=["unsigned", "hs256", "other-key", "expired", "no-exp", "exp-too-far",
        "iat-ahead", "no-iss", "other-app", "garbage"])
def test_a_jwt_github_would_refuse_mints_nothing(served, make, message):
    assertion = make(served.key)
    answer = served.mint(assertion)
    assert answer.status_code == 401
    assert answer.json()["message"] == message
    assert served.fake.token_requests == []
    app = requests.get(f"{served.url}/app", timeout=10,
                       headers={"Authorization": f"Bearer {assertion}"})
    assert app.status_code == 401
    # Nor is a JWT a token for the REST API (it cannot approve either).
    assert served.comment(f"Bearer {assertion}").status_code == 401
    assert comment_deliveries(served.fake) == []


def git(*args: str, cwd: Path | None = None, check: bool = True
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-c", "credential.helper=", "-c", "core.askPass=",
                           "-c", "user.name=Octo Dev", "-c", "user.email=octo@example.com",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          check=check, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd or "/"),
                                            "GIT_TERMINAL_PROMPT": "0"})


def test_a_persons_git_credentials_clone_and_their_push_is_delivered_as_theirs(
        served, tmp_path):
    host = served.url.removeprefix("http://")
    remote = f"http://{USER}:{served.box.user_token}@{host}/{DEMO_REPO}.git"
    checkout = tmp_path / "demo"
    git("clone", "-q", remote, str(checkout), cwd=tmp_path)
    (checkout / "notes.md").write_text("a person's change\n")
    git("add", ".", cwd=checkout)
    git("commit", "-qm", "notes", cwd=checkout)
    hook, got, receiving = receiver()
    served.fake.webhook_url = hook
    served.fake.start_delivering()
    try:
        git("push", "-q", "origin", "HEAD:refs/heads/octo-notes", cwd=checkout)
        push = wait_until(lambda: next((p for h, p in got if h["X-Github-Event"] == "push"),
                                       None), timeout=20, what="the push delivery")
    finally:
        served.fake.stop_delivering()
        receiving.shutdown()
    assert push["sender"]["login"] == USER and push["sender"]["type"] == "User"
    assert push["pusher"]["name"] == USER
    assert push["ref"] == "refs/heads/octo-notes"
    assert served.fake.branches(DEMO_REPO)["octo-notes"] == git(
        "rev-parse", "HEAD", cwd=checkout).stdout.strip()


@pytest.mark.parametrize("credentials", ["", f"{USER}:ghp_madeUpmadeUpmadeUpmadeUpmadeUpmadeUp@"],
                         ids=["none", "made-up"])
def test_git_without_the_persons_credentials_is_refused(served, tmp_path, credentials):
    host = served.url.removeprefix("http://")
    refs = requests.get(f"http://{credentials}{host}/{DEMO_REPO}.git/info/refs"
                        "?service=git-upload-pack", timeout=10)
    assert refs.status_code == 401
    assert refs.headers["WWW-Authenticate"] == 'Basic realm="GitHub"'
    done = git("clone", "-q", f"http://{credentials}{host}/{DEMO_REPO}.git",
               str(tmp_path / "nope"), cwd=tmp_path, check=False)
    assert done.returncode != 0
    assert not (tmp_path / "nope" / "README.md").exists()
