"""``the-loop sandbox merge REF [--as LOGIN]`` merges a pull request as that person
through the sandbox's admin API (``POST /_sandbox/merge``): the merge lands on the base
branch, the issue its body closes is closed, ``pull_request.closed`` (merged, sent by
that person) and the ``push`` are delivered, and ``the-loop sandbox show`` then names the
pull request ``merged`` and the issue ``closed``; a refusal (not mergeable) is GitHub's
reason, with no traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from the_loop.cli.base import main
from the_loop.sandbox.fakegithub.git import commit_files, run_git
from the_loop.sandbox.fakegithub.http import serve
from the_loop.sandbox.server import DEMO_REPO, build


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    made = build(tmp_path / "sandbox", user="octo-dev", webhook_url=None, secret="s",
                 base_url="http://127.0.0.1")
    url, stop = serve(made.github)
    monkeypatch.setenv("THE_LOOP_SANDBOX_URL", url)
    monkeypatch.setenv("THE_LOOP_SANDBOX_DIR", str(tmp_path / "sandbox"))
    try:
        yield made
    finally:
        stop()


def sandbox_cli(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(main, ["sandbox", *args], catch_exceptions=False)
    return done.exit_code, done.output


def pull_from(fake, branch: str, files: dict[str, str], body: str) -> int:
    git_dir = fake.repo(DEMO_REPO).git_dir
    run_git(git_dir, "update-ref", f"refs/heads/{branch}", "main")
    commit_files(git_dir, branch, files, message="work", author=("Bot", "bot@example.com"))
    return fake.create_pull_request(DEMO_REPO, branch, "main", "Login", body,
                                    draft=False)["number"]


def test_a_person_merges_a_pull_request_and_show_says_merged(sandbox):
    fake = sandbox.github
    code, out = sandbox_cli("issue", "create", "Add a login page", "--label", "the-loop")
    assert code == 0, out
    number = pull_from(fake, "the-loop/1-add-a-login-page", {"login.py": "ok = 1\n"},
                       "Closes #1\n")
    code, out = sandbox_cli("merge", str(number), "--as", "reviewer-1", "--method", "merge")
    assert code == 0, out
    main_sha = fake.branch_sha(DEMO_REPO, "main")
    assert out.strip() == f"merged github:{DEMO_REPO}#{number} (merge): {main_sha[:12]}"
    assert fake.git_text(fake.repo(DEMO_REPO), "main", "login.py") == "ok = 1\n"
    pull = fake.get_pull_request(DEMO_REPO, number)
    assert (pull["merged"], pull["merged_by"]) == (True, "reviewer-1")
    sent = [(d.event, d.action, d.sender) for d in fake.deliveries][-3:]
    assert sent == [("pull_request", "closed", "reviewer-1"), ("push", None, "reviewer-1"),
                    ("issues", "closed", "reviewer-1")]
    code, out = sandbox_cli("show", str(number))
    assert code == 0, out
    assert f"pull request #{number}: the-loop/1-add-a-login-page -> main (merged)" in out
    assert "(pull request, merged)" in out.splitlines()[0]
    code, out = sandbox_cli("show", "1")
    assert code == 0 and "(issue, closed)" in out.splitlines()[0], out


def test_a_refused_merge_says_why(sandbox):
    fake = sandbox.github
    number = pull_from(fake, "the-loop/2-x", {"README.md": "changed\n"}, "")
    commit_files(fake.repo(DEMO_REPO).git_dir, "main", {"README.md": "also changed\n"},
                 message="meanwhile", author=("Dev", "dev@example.com"))
    code, out = sandbox_cli("merge", str(number))
    assert code != 0
    assert "sandbox: Pull Request is not mergeable" in out and "Traceback" not in out
    code, out = sandbox_cli("merge", "99")
    assert code != 0 and "is not a pull request" in out
    code, out = sandbox_cli("merge", str(number), "--as", "not a login")
    assert code != 0 and "is not a GitHub login" in out
