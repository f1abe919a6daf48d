"""The GitHub ``cli`` transport against a fake ``gh`` with canned answers: the argument
arrays it runs, bounded time and output, GH_HOST, failures and the retry policy."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from graph.ports import IntegrationError, NotFound, RateLimited, Unavailable
from integrations.cli import run_bounded
from integrations.github_cli import GitHubCli
from tests.integrations.fakecli import FakeCli

REPO = "Codertocat/Hello-World"


@pytest.fixture
def gh(tmp_path) -> FakeCli:
    return FakeCli(tmp_path / "bin", "gh")


def cli(gh: FakeCli, **kw: Any) -> GitHubCli:
    return GitHubCli(str(gh.path), env={"PATH": "/usr/bin:/bin"}, **kw)


def test_argument_array_body_on_stdin_and_no_placeholders(gh: FakeCli) -> None:
    gh.http(200, {"content": {"path": "a/{owner} b.md", "sha": "1" * 40},
                  "commit": {"sha": "2" * 40}})
    result = cli(gh).call("put-file", repo=REPO, path="a/{owner} b.md", branch="main",
                          text="x; rm -rf / $(id)", sha="0" * 40, message="m")
    assert result == {"path": "a/{owner} b.md", "sha": "1" * 40, "commit": "2" * 40}
    (call,) = gh.calls
    assert call["argv"] == [
        "api", "--method", "PUT", "--include",
        "-H", "Accept: application/vnd.github+json",
        "-H", "X-GitHub-Api-Version: 2022-11-28",
        f"repos/{REPO}/contents/a/%7Bowner%7D%20b.md",
        "--input", "-",
    ]
    body = json.loads(call["stdin"])
    assert body["sha"] == "0" * 40 and body["branch"] == "main" and body["message"] == "m"
    assert call["env"]["GH_PROMPT_DISABLED"] == "1" and call["env"]["GH_HOST"] is None


def test_reads_send_no_body_and_query_in_the_endpoint(gh: FakeCli) -> None:
    gh.http(200, [{"filename": "a.md"}])
    assert cli(gh).call("list-pull-files", repo=REPO, number=3) == {"files": ["a.md"]}
    (call,) = gh.calls
    assert call["argv"][-1] == f"repos/{REPO}/pulls/3/files?per_page=100"
    assert "--input" not in call["argv"] and call["stdin"] == ""


def test_pagination_follows_absolute_next_links(gh: FakeCli) -> None:
    nxt = f"https://ghe.example.com/api/v3/repos/{REPO}/pulls/3/reviews?per_page=100&page=2"
    gh.http(200, [{"id": 1, "user": {"login": "a"}, "state": "APPROVED", "commit_id": "c"}],
            {"Link": f'<{nxt}>; rel="next"'})
    gh.http(200, [{"id": 2, "user": {"login": "b"}, "state": "COMMENTED", "commit_id": "c"}])
    result = cli(gh, host="ghe.example.com").call("list-reviews", repo=REPO, number=3)
    assert [r["id"] for r in result["reviews"]] == [1, 2]
    assert [c["argv"][-1] for c in gh.calls] == [f"repos/{REPO}/pulls/3/reviews?per_page=100",
                                                 nxt]
    assert {c["env"]["GH_HOST"] for c in gh.calls} == {"ghe.example.com"}


@pytest.mark.parametrize(
    ("status", "headers", "body", "kind", "retriable"),
    [
        (404, {}, {"message": "Not Found"}, NotFound, False),
        (409, {}, {"message": "a.md does not match"}, IntegrationError, False),
        (422, {}, {"message": "Validation Failed"}, IntegrationError, False),
        (403, {}, {"message": "Resource not accessible by integration"}, IntegrationError, False),
        (403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1"},
         {"message": "API rate limit exceeded"}, RateLimited, True),
        (502, {}, {"message": "Bad Gateway"}, Unavailable, True),
    ],
)
def test_http_errors_map_like_the_api_transport(
    gh: FakeCli, status: int, headers: dict[str, str], body: Any, kind: type, retriable: bool
) -> None:
    gh.http(status, body | {"echo": "body-marker-xyz"}, headers)
    with pytest.raises(IntegrationError) as info:
        cli(gh, retries=0).call("get-repository", repo=REPO)
    assert type(info.value) is kind
    assert (info.value.status, info.value.retriable) == (status, retriable)
    assert "body-marker-xyz" not in str(info.value) and body["message"] not in str(info.value)


def test_reads_are_retried_on_5xx_writes_are_not(gh: FakeCli) -> None:
    gh.http(502, {"message": "x"})
    gh.http(200, {"full_name": REPO, "default_branch": "main"})
    assert cli(gh, retries=1).call("get-repository", repo=REPO)["default_branch"] == "main"
    gh.http(502, {"message": "x"})
    gh.http(201, {"id": 1, "html_url": "u"})  # must not be used
    with pytest.raises(IntegrationError) as info:
        cli(gh, retries=1).call("comment", repo=REPO, number=1, body="once")
    assert (info.value.status, info.value.retriable) == (502, True)
    assert len(gh.calls) == 3 and gh.pending == 1


def test_rate_limits_are_retried_after_a_short_retry_after_posts_are_not(
    gh: FakeCli,
) -> None:
    gh.http(429, {"message": "slow down"}, {"Retry-After": "0"})
    gh.http(200, {"id": 5, "html_url": "u"})
    assert cli(gh, retries=2).call("update-comment", repo=REPO, comment_id=5,
                                   body="b")["id"] == 5
    assert len(gh.calls) == 2
    gh.http(429, {"message": "slow down"}, {"Retry-After": "0"})
    gh.http(201, {"id": 6, "html_url": "u"})  # must not be used
    with pytest.raises(IntegrationError) as info:
        cli(gh, retries=2).call("comment", repo=REPO, number=1, body="b")
    assert (info.value.status, info.value.retriable) == (429, True)
    assert len(gh.calls) == 3 and gh.pending == 1


def test_a_long_retry_after_is_not_slept_in_the_worker(gh: FakeCli) -> None:
    gh.http(403, {"message": "You have exceeded a secondary rate limit"}, {"Retry-After": "600"})
    started = time.monotonic()
    with pytest.raises(IntegrationError) as info:
        cli(gh, retries=2).call("comment", repo=REPO, number=1, body="b")
    assert time.monotonic() - started < 5
    assert (info.value.status, info.value.retriable) == (403, True)
    assert len(gh.calls) == 1


def test_secondary_limit_without_retry_after_fails_fast(gh: FakeCli) -> None:
    gh.http(403, {"message": "You have exceeded a secondary rate limit. Retry later."})
    with pytest.raises(IntegrationError) as info:
        cli(gh, retries=2).call("get-repository", repo=REPO)
    assert (info.value.status, info.value.retriable) == (403, True)
    assert len(gh.calls) == 1


def test_not_logged_in_names_the_fix(gh: FakeCli) -> None:
    gh.answer("", exit=4, stderr="To get started with GitHub CLI, please run:  gh auth login\n")
    with pytest.raises(IntegrationError, match="gh auth login") as info:
        cli(gh, host="ghe.example.com").call("get-repository", repo=REPO)
    assert "--hostname ghe.example.com" in str(info.value) and not info.value.retriable


def test_no_http_answer_is_retriable(gh: FakeCli) -> None:
    gh.answer("", exit=1, stderr="error connecting to api.github.com\n")
    with pytest.raises(IntegrationError) as info:
        cli(gh).call("get-repository", repo=REPO)
    assert info.value.retriable and info.value.status is None


def test_timeout_kills_gh(gh: FakeCli) -> None:
    gh.answer("HTTP/2.0 200 OK\r\n\r\n{}", sleep=5)
    started = time.monotonic()
    with pytest.raises(IntegrationError, match="no answer within") as info:
        cli(gh, timeout=0.5).call("get-repository", repo=REPO)
    assert time.monotonic() - started < 4 and info.value.retriable


def test_output_is_bounded(gh: FakeCli) -> None:
    gh.http(200, {"full_name": "x" * 5000, "default_branch": "main"})
    with pytest.raises(IntegrationError, match="output larger than 1000 bytes") as info:
        cli(gh, max_output=1000).call("get-repository", repo=REPO)
    assert not info.value.retriable


def test_missing_binary(tmp_path) -> None:
    gh = GitHubCli(str(tmp_path / "nope"))
    with pytest.raises(IntegrationError, match="THE_LOOP_GITHUB_CLI_BINARY"):
        gh.call("get-repository", repo=REPO)
    assert not GitHubCli.available(str(tmp_path / "nope"))


def test_run_bounded_passes_arguments_verbatim(tmp_path) -> None:
    result = run_bounded(["/bin/echo", "$(id)", "a b", ";", "*"], timeout=5, max_output=100)
    assert result.ok and result.stdout == b"$(id) a b ; *\n"
    assert run_bounded(["/nonexistent/x"], timeout=1, max_output=1).error == "FileNotFoundError"


def test_pull_request_operations_as_gh_api_runs(gh: FakeCli) -> None:
    pr = {"number": 9, "state": "open", "draft": True, "html_url": "https://github.com/x/9",
          "head": {"sha": "a" * 40, "ref": "the-loop/12-x"}, "base": {"ref": "main"}}
    gh.http(200, [pr])
    gh.http(201, pr)
    gh.http(200, pr)
    transport = cli(gh)
    found = transport.call("find-pull-request", repo=REPO, head="the-loop/12-x")
    assert found is not None and found["number"] == 9 and found["draft"] is True
    created = transport.call("create-pull-request", repo=REPO, head="the-loop/12-x",
                             base="main", title="T", body="B")
    assert created["head_sha"] == "a" * 40
    transport.call("update-pull-request", repo=REPO, number=9, body="B2")
    find, create, update = gh.calls
    assert find["argv"][-1] == (f"repos/{REPO}/pulls?per_page=100"
                                "&head=Codertocat%3Athe-loop%2F12-x&state=open")
    assert create["argv"][1:3] == ["--method", "POST"]
    assert json.loads(create["stdin"]) == {"title": "T", "head": "the-loop/12-x",
                                           "base": "main", "body": "B", "draft": True}
    assert update["argv"][1:3] == ["--method", "PATCH"]
    assert update["argv"][-3] == f"repos/{REPO}/pulls/9"
    assert json.loads(update["stdin"]) == {"body": "B2"}
