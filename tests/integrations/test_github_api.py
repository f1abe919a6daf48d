"""Unit tests of integrations.github against canned HTTP answers (``responses``).

They pin the exact URL, method, payload and auth header PyGithub sends for each operation,
the result shapes, App-installation token handling, error mapping and settings parsing.
Note: PyGithub puts the port into every URL (``https://api.github.com:443/...``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest
import requests
import responses
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from responses import matchers

from graph.ports import (
    Integration,
    IntegrationError,
    NotFound,
    RateLimited,
    Unavailable,
    Unsupported,
)
from integrations.github import (
    GitHubApi,
    GitHubClients,
    GitHubConfigError,
    GitHubSettings,
)

API = "https://api.github.com:443"
REPO = "Codertocat/Hello-World"
R = f"{API}/repos/{REPO}"
TOKEN = "ghp_SECRETtoken0123456789"
APP_ID = 4242

PULL_SHAPE: dict[str, tuple[type, ...]] = {
    "number": (int,),
    "head_sha": (str,),
    "head_ref": (str,),
    "base_ref": (str,),
    "state": (str,),
    "draft": (bool,),
    "html_url": (str,),
    "head_repo": (str, type(None)),
    "maintainer_can_modify": (bool,),
    "merged": (bool,),
    "merged_by": (str, type(None)),
    "node_id": (str,),
    "body": (str,),
}
# Result shape of every operation: key -> accepted types. Shared with the fake contract test.
SHAPES: dict[str, dict[str, tuple[type, ...]]] = {
    "get-repository": {"full_name": (str,), "default_branch": (str,)},
    "get-pull-request": PULL_SHAPE,
    "find-pull-request": PULL_SHAPE,
    "create-pull-request": PULL_SHAPE,
    "update-pull-request": PULL_SHAPE,
    "add-label": {"labels": (list,)},
    "remove-label": {"labels": (list, type(None))},
    "ensure-label": {"label": (str,), "created": (bool,)},
    "comment": {"id": (int,), "url": (str,)},
    "update-comment": {"id": (int,), "url": (str,)},
    "list-comments": {"comments": (list,)},
    "add-reaction": {"id": (int,)},
    "add-review-comment-reaction": {"id": (int,)},
    "get-file": {"path": (str,), "sha": (str,), "ref": (str, type(None)), "text": (str,)},
    "put-file": {"path": (str,), "sha": (str,), "commit": (str,)},
    "list-pull-files": {"files": (list,)},
    "request-reviewers": {"requested": (list,), "teams": (list,)},
    "mark-pull-request-ready": PULL_SHAPE,
    "get-permission": {"permission": (str,)},
    "get-user": {"login": (str,), "id": (int,), "type": (str,)},
    "get-authenticated-user": {"login": (str,), "id": (int,), "type": (str,)},
    "list-reviews": {"reviews": (list,)},
    "create-check-run": {"id": (int,)},
    "update-check-run": {"id": (int,)},
    "list-check-runs": {"check_runs": (list,)},
    "merge-pull-request": {"sha": (str, type(None)), "merged": (bool,), "message": (str,)},
    "delete-branch": {"deleted": (bool,)},
    "get-check-run": {"id": (int,), "name": (str, type(None)), "head_sha": (str, type(None)),
                      "status": (str, type(None)), "conclusion": (str, type(None)),
                      "details_url": (str, type(None)), "app": (str, type(None)),
                      "output": (dict,)},
    "list-check-run-annotations": {"annotations": (list,), "truncated": (bool,)},
    "download-job-logs": {"text": (str,), "truncated": (bool,)},
}
#: Keys (and value types) of the items of list results.
ITEM_SHAPES: dict[str, tuple[str, dict[str, tuple[type, ...]]]] = {
    "list-comments": ("comments", {"id": (int,), "user": (str,),
                                   "user_id": (int, type(None)), "body": (str,)}),
    "list-reviews": (
        "reviews",
        {"id": (int,), "user": (str,), "state": (str,), "commit_id": (str, type(None))},
    ),
    "list-check-runs": (
        "check_runs",
        {"id": (int,), "name": (str,), "status": (str,), "conclusion": (str, type(None))},
    ),
    "list-check-run-annotations": (
        "annotations",
        {"path": (str, type(None)), "start_line": (int, type(None)),
         "end_line": (int, type(None)), "annotation_level": (str, type(None)),
         "title": (str, type(None)), "message": (str, type(None))},
    ),
}
PERMISSIONS = ("admin", "maintain", "write", "triage", "read", "none")


def assert_shape(op: str, result: dict[str, Any]) -> None:
    """Assert ``result`` has exactly the keys and value types of operation ``op``."""
    shape = SHAPES[op]
    assert set(result) == set(shape), (op, result)
    for key, types in shape.items():
        assert isinstance(result[key], types), (op, key, result[key])
    if op in ("add-label", "remove-label") and result["labels"] is not None:
        assert all(isinstance(n, str) for n in result["labels"])
    if op in ("list-pull-files", "request-reviewers"):
        assert all(isinstance(n, str) for n in next(iter(result.values())))
    if op == "get-permission":
        assert result["permission"] in PERMISSIONS
    if op in ITEM_SHAPES:
        key, item_shape = ITEM_SHAPES[op]
        for item in result[key]:
            assert set(item) == set(item_shape), (op, item)
            for name, types in item_shape.items():
                assert isinstance(item[name], types), (op, name, item[name])
    json.dumps(result)  # JSON-serialisable, as the Integration protocol requires


@pytest.fixture(scope="session")
def rsa_pem() -> tuple[str, Any]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    return pem, key.public_key()


def fast(**kw: Any) -> GitHubSettings:
    base: dict[str, Any] = {"write_interval": 0.0, "read_interval": 0.0, "retries": 0}
    base.update(kw)
    return GitHubSettings(**base)


@pytest.fixture
def api() -> GitHubApi:
    return GitHubClients(fast(token=TOKEN)).for_installation(None)


@pytest.fixture
def rs():
    with responses.RequestsMock() as mock:
        yield mock


def label(name: str) -> dict[str, Any]:
    return {"id": 1, "name": name, "color": "ededed", "url": f"{R}/labels/{name}"}


def comment_json(cid: int, body: str, login: str = "octocat") -> dict[str, Any]:
    return {
        "id": cid,
        "url": f"{R}/issues/comments/{cid}",
        "html_url": f"https://github.com/{REPO}/issues/1#issuecomment-{cid}",
        "body": body,
        "user": {"login": login, "id": 1, "url": "https://api.github.com/users/" + login},
    }


def body_of(call: Any) -> Any:
    return json.loads(call.request.body)


# --------------------------------------------------------------------------- operations


def test_provider_satisfies_integration_protocol(api: GitHubApi) -> None:
    assert isinstance(api, Integration)
    assert api.name == "github"
    assert api.operations == frozenset(SHAPES)


def test_get_user_and_the_tokens_own_user(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(f"{API}/users/alice", json={"login": "alice", "id": 7, "type": "User"})
    rs.get(f"{API}/users/nobody", status=404, json={"message": "Not Found"})
    rs.get(f"{API}/user", json={"login": "me", "id": 9, "type": "User", "name": None})
    assert api.call("get-user", login="alice") == {"login": "alice", "id": 7, "type": "User"}
    with pytest.raises(NotFound):
        api.call("get-user", login="nobody")
    me = api.get_authenticated_user()
    assert me == {"login": "me", "id": 9, "type": "User"}
    assert_shape("get-authenticated-user", me)
    assert "get-app" not in api.operations  # a token has no App
    with pytest.raises(Unsupported):
        api.get_app()


def test_get_repository(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(R, json={"full_name": REPO, "default_branch": "trunk", "url": R})
    result = api.call("get-repository", repo=REPO)
    assert result == {"full_name": REPO, "default_branch": "trunk"}
    assert_shape("get-repository", result)
    assert len(rs.calls) == 1
    assert rs.calls[0].request.headers["Authorization"] == f"token {TOKEN}"


def test_get_repository_reports_githubs_spelling(
    api: GitHubApi, rs: responses.RequestsMock
) -> None:
    # A lazy PyGithub Repository would answer full_name from its URL; we want GitHub's.
    rs.get(f"{API}/repos/codertocat/hello-world", json={"full_name": REPO, "default_branch": "m"})
    assert api.call("get-repository", repo="codertocat/hello-world")["full_name"] == REPO


def test_get_pull_request(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(
        f"{R}/pulls/7",
        json={
            "number": 7,
            "state": "open",
            "url": f"{R}/pulls/7",
            "head": {"sha": "a" * 40, "ref": "feature",
                     "repo": {"full_name": "forker/Hello-World"}},
            "base": {"sha": "b" * 40, "ref": "main"},
            "draft": True,
            "maintainer_can_modify": True,
            "html_url": f"https://github.com/{REPO}/pull/7",
        },
    )
    result = api.call("get-pull-request", repo=REPO, number=7)
    assert result == {
        "number": 7,
        "head_sha": "a" * 40,
        "head_ref": "feature",
        "base_ref": "main",
        "state": "open",
        "draft": True,
        "html_url": f"https://github.com/{REPO}/pull/7",
        "head_repo": "forker/Hello-World",
        "maintainer_can_modify": True,
        "merged": False,
        "merged_by": None,
        "node_id": "",
        "body": "",
    }
    assert_shape("get-pull-request", result)
    assert len(rs.calls) == 1


def test_add_label(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.post(
        f"{R}/issues/1/labels",
        json=[label("bug"), label("phase:requirements")],
        match=[matchers.json_params_matcher({"labels": ["phase:requirements"]})],
    )
    result = api.call("add-label", repo=REPO, number=1, label="phase:requirements")
    assert result == {"labels": ["bug", "phase:requirements"]}
    assert_shape("add-label", result)
    assert len(rs.calls) == 1  # the lazy Issue object costs no GET


def test_remove_label_quotes_name_and_returns_rest(
    api: GitHubApi, rs: responses.RequestsMock
) -> None:
    rs.delete(f"{R}/issues/1/labels/phase%3Areq%2Fx%20y", json=[label("bug")])
    result = api.call("remove-label", repo=REPO, number=1, label="phase:req/x y")
    assert result == {"labels": ["bug"]}
    assert_shape("remove-label", result)


def test_remove_absent_label_is_success(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.delete(f"{R}/issues/1/labels/gone", status=404, json={"message": "Label does not exist"})
    result = api.call("remove-label", repo=REPO, number=1, label="gone")
    assert result == {"labels": None}
    assert_shape("remove-label", result)


def test_ensure_label_existing(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(f"{R}/labels/Phase%3ADesign", json=label("phase:design"))
    result = api.call("ensure-label", repo=REPO, label="Phase:Design")
    assert result == {"label": "phase:design", "created": False}
    assert_shape("ensure-label", result)
    assert len(rs.calls) == 1


def test_ensure_label_creates_on_404(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(f"{R}/labels/phase%3Adesign", status=404, json={"message": "Not Found"})
    rs.post(
        f"{R}/labels",
        status=201,
        json=label("phase:design"),
        match=[
            matchers.json_params_matcher(
                {"name": "phase:design", "color": "0e8a16", "description": "Design phase"}
            )
        ],
    )
    result = api.call(
        "ensure-label", repo=REPO, label="phase:design", color="#0e8a16", description="Design phase"
    )
    assert result == {"label": "phase:design", "created": True}


def test_ensure_label_race_already_exists(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(f"{R}/labels/x", status=404, json={"message": "Not Found"})
    rs.post(
        f"{R}/labels",
        status=422,
        json={
            "message": "Validation Failed",
            "errors": [{"resource": "Label", "code": "already_exists", "field": "name"}],
        },
    )
    assert api.call("ensure-label", repo=REPO, label="x") == {"label": "x", "created": False}


def test_ensure_label_other_422_raises(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(f"{R}/labels/x", status=404, json={"message": "Not Found"})
    rs.post(
        f"{R}/labels",
        status=422,
        json={"message": "Validation Failed", "errors": [{"code": "invalid", "field": "color"}]},
    )
    with pytest.raises(IntegrationError) as info:
        api.call("ensure-label", repo=REPO, label="x", color="zzzzzz")
    assert info.value.status == 422 and not info.value.retriable


def test_comment(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.post(
        f"{R}/issues/3/comments",
        status=201,
        json=comment_json(55, "hello"),
        match=[matchers.json_params_matcher({"body": "hello"})],
    )
    result = api.call("comment", repo=REPO, number=3, body="hello")
    assert result == {"id": 55, "url": f"https://github.com/{REPO}/issues/1#issuecomment-55"}
    assert_shape("comment", result)


def test_update_comment(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.patch(
        f"{R}/issues/comments/55",
        json=comment_json(55, "edited"),
        match=[matchers.json_params_matcher({"body": "edited"})],
    )
    result = api.call("update-comment", repo=REPO, comment_id=55, body="edited")
    assert result["id"] == 55 and result["url"].endswith("#issuecomment-55")
    assert_shape("update-comment", result)
    assert len(rs.calls) == 1


def test_list_comments_follows_pages(api: GitHubApi, rs: responses.RequestsMock) -> None:
    # GitHub's Link header has no port; PyGithub's requests do.
    page2 = f"https://api.github.com/repos/{REPO}/issues/1/comments?per_page=100&page=2"
    rs.get(
        f"{R}/issues/1/comments",
        json=[comment_json(1, "one"), comment_json(2, "two", "the-loop[bot]")],
        headers={"Link": f'<{page2}>; rel="next", <{page2}>; rel="last"'},
        match=[matchers.query_param_matcher({"per_page": "100"})],
    )
    rs.get(
        f"{R}/issues/1/comments",
        json=[comment_json(3, "three") | {"user": None}],
        match=[matchers.query_param_matcher({"per_page": "100", "page": "2"})],
    )
    result = api.call("list-comments", repo=REPO, number=1)
    assert result == {
        "comments": [
            {"id": 1, "user": "octocat", "user_id": 1, "body": "one"},
            {"id": 2, "user": "the-loop[bot]", "user_id": 1, "body": "two"},
            {"id": 3, "user": "ghost", "user_id": None, "body": "three"},
        ]
    }
    assert_shape("list-comments", result)


def test_add_reaction(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.post(
        f"{R}/issues/comments/55/reactions",
        status=201,
        json={"id": 9, "content": "eyes", "user": {"login": "octocat"}},
        match=[matchers.json_params_matcher({"content": "eyes"})],
    )
    result = api.call("add-reaction", repo=REPO, comment_id=55, content="eyes")
    assert result == {"id": 9}
    assert_shape("add-reaction", result)


def test_add_reaction_rejects_unknown_content_without_request(api: GitHubApi) -> None:
    with pytest.raises(IntegrationError, match="content must be one of"):
        api.call("add-reaction", repo=REPO, comment_id=55, content="thumbsup")


def _file(path: str, data: bytes, **kw: Any) -> dict[str, Any]:
    import base64

    return {
        "type": "file",
        "encoding": "base64",
        "path": path,
        "name": path.rsplit("/", 1)[-1],
        "sha": "f" * 40,
        "size": len(data),
        "content": base64.encodebytes(data).decode(),
        "url": f"{R}/contents/{path}",
    } | kw


def test_get_file(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(
        f"{R}/contents/docs/the%20spec.md",
        json=_file("docs/the spec.md", "héllo\n".encode()),
        match=[matchers.query_param_matcher({"ref": "feature"})],
    )
    result = api.call("get-file", repo=REPO, path="docs/the spec.md", ref="feature")
    assert result == {
        "path": "docs/the spec.md",
        "sha": "f" * 40,
        "ref": "feature",
        "text": "héllo\n",
    }
    assert_shape("get-file", result)


def test_get_file_default_ref_sends_no_ref(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(
        f"{R}/contents/a.txt", json=_file("a.txt", b"x"), match=[matchers.query_param_matcher({})]
    )
    assert api.call("get-file", repo=REPO, path="/a.txt")["ref"] is None


def test_get_file_large_uses_blob(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(f"{R}/contents/big.txt", json=_file("big.txt", b"", encoding="none", content=""))
    rs.get(
        f"{R}/git/blobs/{'f' * 40}",
        json={"sha": "f" * 40, "encoding": "base64", "content": "YmlnCg==", "size": 4},
    )
    assert api.call("get-file", repo=REPO, path="big.txt")["text"] == "big\n"


@pytest.mark.parametrize(
    "answer",
    [
        {"json": [_file("d/a.txt", b"x")]},  # a directory listing
        {"json": {"type": "submodule", "path": "d", "sha": "1" * 40, "url": f"{R}/contents/d"}},
        {"status": 404, "json": {"message": "Not Found"}},
    ],
)
def test_get_file_not_a_file(api: GitHubApi, rs: responses.RequestsMock, answer: Any) -> None:
    rs.get(f"{R}/contents/d", **answer)
    with pytest.raises(NotFound):
        api.call("get-file", repo=REPO, path="d")


def test_get_file_not_utf8(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(f"{R}/contents/logo.png", json=_file("logo.png", b"\x89PNG\xff"))
    with pytest.raises(IntegrationError, match="not UTF-8") as info:
        api.call("get-file", repo=REPO, path="logo.png")
    assert not info.value.retriable


def _put_answer(path: str, sha: str = "b" * 40, commit: str = "c" * 40) -> dict[str, Any]:
    return {"content": {"path": path, "sha": sha, "type": "file"}, "commit": {"sha": commit}}


def test_put_file_updates_with_sha_precondition(
    api: GitHubApi, rs: responses.RequestsMock
) -> None:
    import base64

    rs.put(
        f"{R}/contents/specs/1/the%20design.md",
        json=_put_answer("specs/1/the design.md"),
        match=[
            matchers.json_params_matcher(
                {
                    "message": "record review",
                    "content": base64.b64encode("héllo\n".encode()).decode(),
                    "branch": "feature",
                    "sha": "a" * 40,
                }
            )
        ],
    )
    result = api.call(
        "put-file",
        repo=REPO,
        path="/specs/1/the design.md",
        branch="feature",
        text="héllo\n",
        sha="a" * 40,
        message="record review",
    )
    assert result == {"path": "specs/1/the design.md", "sha": "b" * 40, "commit": "c" * 40}
    assert_shape("put-file", result)


def test_put_file_without_sha_creates(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.put(f"{R}/contents/new.md", status=201, json=_put_answer("new.md"))
    api.call("put-file", repo=REPO, path="new.md", branch="main", text="", sha=None)
    sent = body_of(rs.calls[0])
    assert "sha" not in sent and sent["message"] == "the-loop: update new.md"


def test_put_file_stale_sha_is_a_409_conflict(rs: responses.RequestsMock) -> None:
    api = GitHubClients(fast(token=TOKEN, retries=2)).for_installation(None)
    rs.put(f"{R}/contents/a.md", status=409, json={"message": "a.md does not match"})
    with pytest.raises(IntegrationError) as info:
        api.call("put-file", repo=REPO, path="a.md", branch="b", text="x", sha="1" * 40)
    assert (info.value.status, info.value.retriable) == (409, False)
    assert "conflict" in str(info.value)


def test_put_file_is_not_retried_on_5xx(rs: responses.RequestsMock) -> None:
    api = GitHubClients(fast(token=TOKEN, retries=2)).for_installation(None)
    rs.put(f"{R}/contents/a.md", status=502, json={"message": "x"})
    with pytest.raises(IntegrationError) as info:
        api.call("put-file", repo=REPO, path="a.md", branch="b", text="x", sha="1" * 40)
    assert (info.value.status, info.value.retriable) == (502, True)
    assert len(rs.calls) == 1


def test_list_pull_files_follows_pages_and_renames(
    api: GitHubApi, rs: responses.RequestsMock
) -> None:
    page2 = f"https://api.github.com/repos/{REPO}/pulls/4/files?per_page=100&page=2"
    rs.get(
        f"{R}/pulls/4/files",
        json=[{"filename": "a.py"}, {"filename": "docs/b.md", "previous_filename": "b.md"}],
        headers={"Link": f'<{page2}>; rel="next"'},
        match=[matchers.query_param_matcher({"per_page": "100"})],
    )
    rs.get(f"{R}/pulls/4/files", json=[{"filename": "c.md"}])
    result = api.call("list-pull-files", repo=REPO, number=4)
    assert result == {"files": ["a.py", "docs/b.md", "b.md", "c.md"]}
    assert_shape("list-pull-files", result)


def pull_json(number: int, head: str = "the-loop/12-login", *, draft: bool = True,
              sha: str = "a" * 40) -> dict[str, Any]:
    return {"number": number, "state": "open", "draft": draft, "title": "t",
            "html_url": f"https://github.com/{REPO}/pull/{number}",
            "head": {"sha": sha, "ref": head, "label": f"Codertocat:{head}",
                     "repo": {"full_name": REPO}},
            "base": {"sha": "b" * 40, "ref": "main"}}


def test_create_pull_request_opens_a_draft(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.post(f"{R}/pulls", status=201, json=pull_json(9))
    result = api.call("create-pull-request", repo=REPO, head="the-loop/12-login", base="main",
                      title="Login page", body="Work item #12")
    assert result == {"number": 9, "head_sha": "a" * 40, "head_ref": "the-loop/12-login",
                      "base_ref": "main", "state": "open", "draft": True,
                      "html_url": f"https://github.com/{REPO}/pull/9",
                      "head_repo": REPO, "maintainer_can_modify": False,
                      "merged": False, "merged_by": None,
                      "node_id": "", "body": ""}
    assert_shape("create-pull-request", result)
    assert body_of(rs.calls[0]) == {"title": "Login page", "head": "the-loop/12-login",
                                    "base": "main", "body": "Work item #12", "draft": True}


def test_create_pull_request_that_exists_returns_it(
    api: GitHubApi, rs: responses.RequestsMock
) -> None:
    """A retried create whose first answer was lost: GitHub says 422, the PR is there."""
    rs.post(f"{R}/pulls", status=422, json={
        "message": "Validation Failed",
        "errors": [{"resource": "PullRequest", "code": "custom",
                    "message": "A pull request already exists for Codertocat:the-loop/12-login."}]})
    rs.get(f"{R}/pulls", json=[pull_json(9)],
           match=[matchers.query_param_matcher(
               {"head": "Codertocat:the-loop/12-login", "state": "open", "per_page": "100"})])
    result = api.call("create-pull-request", repo=REPO, head="the-loop/12-login", base="main",
                      title="t", body="")
    assert result["number"] == 9


def test_create_pull_request_refused_for_another_reason_raises(
    api: GitHubApi, rs: responses.RequestsMock
) -> None:
    rs.post(f"{R}/pulls", status=422, json={"message": "Validation Failed", "errors": [
        {"resource": "PullRequest", "code": "custom", "message": "No commits between main and x"}]})
    rs.get(f"{R}/pulls", json=[])
    with pytest.raises(IntegrationError) as info:
        api.call("create-pull-request", repo=REPO, head="x", base="main", title="t", body="")
    assert info.value.status == 422 and not info.value.retriable


@pytest.mark.parametrize("params", [
    {"head": "octo:branch", "base": "main", "title": "t", "body": ""},
    {"head": "b", "base": "main", "title": "", "body": ""},
    {"head": "b", "base": "main", "title": "t", "body": None},
    {"head": "b", "base": "main", "title": "t", "body": "", "draft": "yes"},
])
def test_create_pull_request_bad_parameters(api: GitHubApi, params: dict[str, Any]) -> None:
    with pytest.raises(IntegrationError, match="bad parameters"):
        api.call("create-pull-request", repo=REPO, **params)


def test_find_pull_request(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(f"{R}/pulls", json=[pull_json(11), pull_json(9)],
           match=[matchers.query_param_matcher(
               {"head": "Codertocat:the-loop/12-login", "state": "open", "per_page": "100"})])
    result = api.call("find-pull-request", repo=REPO, head="the-loop/12-login")
    assert result is not None and result["number"] == 9
    assert_shape("find-pull-request", result)


def test_find_pull_request_none(api: GitHubApi, rs: responses.RequestsMock) -> None:
    # GitHub ignores an unknown head filter's owner and may list others: match the ref too.
    rs.get(f"{R}/pulls", json=[pull_json(3, head="someone-else")])
    assert api.find_pull_request(repo=REPO, head="the-loop/12-login") is None


def test_update_pull_request_sends_only_given_fields(
    api: GitHubApi, rs: responses.RequestsMock
) -> None:
    rs.patch(f"{R}/pulls/9", json=pull_json(9))
    result = api.call("update-pull-request", repo=REPO, number=9, body="new body")
    assert result["number"] == 9 and body_of(rs.calls[0]) == {"body": "new body"}
    assert_shape("update-pull-request", result)
    with pytest.raises(IntegrationError, match="nothing to update"):
        api.call("update-pull-request", repo=REPO, number=9)


def test_request_reviewers(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.post(
        f"{R}/pulls/4/requested_reviewers",
        status=201,
        json={"number": 4, "requested_reviewers": [{"login": "alice"}, {"login": "bob"}]},
        match=[matchers.json_params_matcher({"reviewers": ["bob"]})],
    )
    result = api.call("request-reviewers", repo=REPO, number=4, reviewers=["bob"])
    assert result == {"requested": ["alice", "bob"], "teams": []}
    assert_shape("request-reviewers", result)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"permission": "write", "role_name": "maintain"}, "maintain"),
        ({"permission": "read", "role_name": "triage"}, "triage"),
        ({"permission": "admin", "role_name": "admin"}, "admin"),
        ({"permission": "write", "role_name": "security-reviewer"}, "write"),  # custom role
        ({"permission": "none"}, "none"),
    ],
)
def test_get_permission_prefers_role_name(
    api: GitHubApi, rs: responses.RequestsMock, answer: dict[str, Any], expected: str
) -> None:
    rs.get(f"{R}/collaborators/some%5Bbot%5D/permission", json=answer | {"user": {}})
    result = api.call("get-permission", repo=REPO, login="some[bot]")
    assert result == {"permission": expected}
    assert_shape("get-permission", result)


def test_list_reviews(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(
        f"{R}/pulls/4/reviews",
        json=[
            {"id": 1, "user": {"login": "alice"}, "state": "APPROVED", "commit_id": "a" * 40},
            {"id": 2, "user": None, "state": "COMMENTED", "commit_id": None, "body": "x"},
        ],
    )
    result = api.call("list-reviews", repo=REPO, number=4)
    assert result == {
        "reviews": [
            {"id": 1, "user": "alice", "state": "APPROVED", "commit_id": "a" * 40},
            {"id": 2, "user": "ghost", "state": "COMMENTED", "commit_id": None},
        ]
    }
    assert_shape("list-reviews", result)


def test_check_runs(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.post(
        f"{R}/check-runs",
        status=201,
        json={"id": 77, "name": "the-loop"},
        match=[
            matchers.json_params_matcher(
                {
                    "name": "the-loop",
                    "head_sha": "a" * 40,
                    "status": "in_progress",
                    "output": {"title": "design", "summary": "waiting for approval"},
                }
            )
        ],
    )
    rs.patch(
        f"{R}/check-runs/77",
        json={"id": 77},
        match=[
            matchers.json_params_matcher(
                {"conclusion": "success", "output": {"title": "done", "summary": "done"}}
            )
        ],
    )
    rs.get(
        f"{R}/commits/{'a' * 40}/check-runs",
        json={
            "total_count": 1,
            "check_runs": [
                {"id": 77, "name": "the-loop", "status": "completed", "conclusion": "success"}
            ],
        },
        match=[matchers.query_param_matcher({"per_page": "100", "check_name": "the-loop"})],
    )
    created = api.call(
        "create-check-run",
        repo=REPO,
        head_sha="a" * 40,
        name="the-loop",
        status="in_progress",
        title="design",
        summary="waiting for approval",
    )
    assert created == {"id": 77}
    assert_shape("create-check-run", created)
    updated = api.call(
        "update-check-run", repo=REPO, check_run_id=77, conclusion="success", title="done"
    )
    assert updated == {"id": 77}
    assert_shape("update-check-run", updated)
    listed = api.call("list-check-runs", repo=REPO, head_sha="a" * 40, name="the-loop")
    assert listed == {
        "check_runs": [
            {"id": 77, "name": "the-loop", "status": "completed", "conclusion": "success"}
        ]
    }
    assert_shape("list-check-runs", listed)


@pytest.mark.parametrize(
    "params",
    [
        {"status": "done"},
        {"status": "completed"},  # needs a conclusion
        {"status": "in_progress", "conclusion": "success"},
        {"status": "completed", "conclusion": "great"},
        {"status": "queued", "summary": "no title"},
    ],
)
def test_check_run_parameters_are_checked_before_any_request(
    api: GitHubApi, params: dict[str, Any]
) -> None:
    with pytest.raises(IntegrationError, match="bad parameters"):
        api.call("create-check-run", repo=REPO, head_sha="a" * 40, name="x", **params)


# --------------------------------------------------------------------------- dispatch


def test_unknown_operation(api: GitHubApi) -> None:
    with pytest.raises(Unsupported) as info:
        api.call("lock-issue", repo=REPO, number=1)
    assert info.value.op == "lock-issue" and info.value.integration == "github"


@pytest.mark.parametrize(
    ("op", "params"),
    [
        ("add-label", {"repo": REPO, "number": 1}),  # missing label
        ("add-label", {"repo": REPO, "number": 1, "label": "x", "colour": "red"}),
        ("add-label", {"repo": "no-slash", "number": 1, "label": "x"}),
        ("add-label", {"repo": REPO, "number": 0, "label": "x"}),
        ("add-label", {"repo": REPO, "number": True, "label": "x"}),
        ("comment", {"repo": REPO, "number": 1, "body": ""}),
    ],
)
def test_bad_parameters(api: GitHubApi, op: str, params: dict[str, Any]) -> None:
    with pytest.raises(IntegrationError, match="bad parameters") as info:
        api.call(op, **params)
    assert not info.value.retriable and info.value.status is None


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("status", "body", "headers", "exc_type", "retriable"),
    [
        (404, {"message": "Not Found"}, {}, NotFound, False),
        (502, {"message": "Bad Gateway"}, {}, Unavailable, True),
        (500, {"message": "oops"}, {}, Unavailable, True),
        (429, {"message": "Too many"}, {"Retry-After": "30"}, RateLimited, True),
        (
            403,
            {"message": "API rate limit exceeded for installation ID 1."},
            {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1700000000"},
            RateLimited,
            True,
        ),
        (
            403,
            {
                "message": "You have exceeded a secondary rate limit. Please wait a few minutes "
                "before you try again."
            },
            {"Retry-After": "60"},
            RateLimited,
            True,
        ),
        (403, {"message": "Resource not accessible by integration"}, {}, IntegrationError, False),
        (401, {"message": "Bad credentials"}, {}, IntegrationError, False),
        (422, {"message": "Validation Failed"}, {}, IntegrationError, False),
    ],
)
def test_error_mapping(
    api: GitHubApi,
    rs: responses.RequestsMock,
    status: int,
    body: dict[str, Any],
    headers: dict[str, str],
    exc_type: type,
    retriable: bool,
) -> None:
    leaky = body | {"echo": f"token {TOKEN} and body-marker-xyz"}
    rs.get(R, status=status, json=leaky, headers=headers)
    with pytest.raises(IntegrationError) as info:
        api.call("get-repository", repo=REPO)
    exc = info.value
    assert type(exc) is exc_type
    assert (exc.status, exc.retriable, exc.op, exc.integration) == (
        status,
        retriable,
        "get-repository",
        "github",
    )
    assert f"HTTP {status}" in str(exc) and "get-repository" in str(exc)
    assert TOKEN not in str(exc) and "body-marker-xyz" not in str(exc)
    assert body["message"] not in str(exc)


def test_network_error_is_retriable(api: GitHubApi, rs: responses.RequestsMock) -> None:
    rs.get(R, body=requests.exceptions.ConnectTimeout("timed out"))
    with pytest.raises(IntegrationError) as info:
        api.call("get-repository", repo=REPO)
    assert isinstance(info.value, Unavailable)
    assert info.value.retriable and info.value.status is None


def test_retry_policy_retries_reads_not_comment_posts(rs: responses.RequestsMock) -> None:
    api = GitHubClients(fast(token=TOKEN, retries=1)).for_installation(None)
    rs.get(R, status=502, json={"message": "x"})
    rs.get(R, json={"full_name": REPO, "default_branch": "main"})
    assert api.call("get-repository", repo=REPO)["default_branch"] == "main"
    assert len(rs.calls) == 2

    rs.post(f"{R}/issues/1/comments", status=502, json={"message": "x"})
    with pytest.raises(IntegrationError) as info:
        api.call("comment", repo=REPO, number=1, body="once")
    assert info.value.retriable and info.value.status == 502
    assert len(rs.calls) == 3  # the POST was sent once: no duplicate comment


def test_exhausted_retries_still_report_status(rs: responses.RequestsMock) -> None:
    api = GitHubClients(fast(token=TOKEN, retries=1)).for_installation(None)
    rs.get(R, status=503, json={"message": "x"})
    rs.get(R, status=503, json={"message": "x"})
    with pytest.raises(IntegrationError) as info:
        api.call("get-repository", repo=REPO)
    assert (info.value.status, info.value.retriable) == (503, True)


# --------------------------------------------------------------------------- App auth


def _token_answer(token: str, expires_in: timedelta = timedelta(hours=1)) -> dict[str, Any]:
    expires = (datetime.now(UTC) + expires_in).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"token": token, "expires_at": expires, "permissions": {}}


def test_app_auth_token_requested_once_and_reused(rs: responses.RequestsMock, rsa_pem) -> None:
    pem, public = rsa_pem
    clients = GitHubClients(fast(app_id=APP_ID, private_key=pem))
    rs.post(f"{API}/app/installations/99/access_tokens", status=201, json=_token_answer("ghs_one"))
    rs.get(R, json={"full_name": REPO, "default_branch": "main"})
    rs.post(f"{R}/issues/1/labels", json=[label("a")])

    api = clients.for_installation(99)
    api.call("get-repository", repo=REPO)
    assert clients.for_installation(99) is api
    clients.for_installation(99).call("add-label", repo=REPO, number=1, label="a")

    token_calls = [c for c in rs.calls if "access_tokens" in c.request.url]
    assert len(token_calls) == 1
    scheme, _, encoded = token_calls[0].request.headers["Authorization"].partition(" ")
    assert scheme == "Bearer"
    claims = jwt.decode(encoded, public, algorithms=["RS256"])
    assert claims["iss"] == str(APP_ID) and claims["exp"] > claims["iat"]
    for call in rs.calls:
        if "access_tokens" not in call.request.url:
            assert call.request.headers["Authorization"] == "token ghs_one"


def test_app_auth_refreshes_token_near_expiry(rs: responses.RequestsMock, rsa_pem) -> None:
    pem, _ = rsa_pem
    api = GitHubClients(fast(app_id=APP_ID, private_key=pem)).for_installation(5)
    url = f"{API}/app/installations/5/access_tokens"
    rs.post(url, status=201, json=_token_answer("ghs_old", timedelta(seconds=10)))
    rs.post(url, status=201, json=_token_answer("ghs_new"))
    rs.get(R, json={"full_name": REPO, "default_branch": "main"})
    api.call("get-repository", repo=REPO)
    api.call("get-repository", repo=REPO)
    auths = [c.request.headers["Authorization"] for c in rs.calls if c.request.url == R]
    assert auths == ["token ghs_old", "token ghs_new"]


def test_app_auth_one_token_per_installation(rs: responses.RequestsMock, rsa_pem) -> None:
    pem, _ = rsa_pem
    clients = GitHubClients(fast(app_id=APP_ID, private_key=pem))
    rs.post(f"{API}/app/installations/1/access_tokens", status=201, json=_token_answer("ghs_a"))
    rs.post(f"{API}/app/installations/2/access_tokens", status=201, json=_token_answer("ghs_b"))
    rs.get(R, json={"full_name": REPO, "default_branch": "main"})
    assert clients.for_installation(1) is not clients.for_installation(2)
    clients.for_installation(1).call("get-repository", repo=REPO)
    clients.for_installation(2).call("get-repository", repo=REPO)
    auths = [c.request.headers["Authorization"] for c in rs.calls if c.request.url == R]
    assert auths == ["token ghs_a", "token ghs_b"]


def test_app_mode_needs_installation(rsa_pem) -> None:
    clients = GitHubClients(fast(app_id=APP_ID, private_key=rsa_pem[0]))
    with pytest.raises(IntegrationError, match="no 'installation'"):
        clients.for_installation(None)


def test_app_token_refused_maps_to_error(rs: responses.RequestsMock, rsa_pem) -> None:
    api = GitHubClients(fast(app_id=APP_ID, private_key=rsa_pem[0])).for_installation(3)
    rs.post(
        f"{API}/app/installations/3/access_tokens",
        status=401,
        json={"message": "A JSON web token could not be decoded"},
    )
    with pytest.raises(IntegrationError) as info:
        api.call("get-repository", repo=REPO)
    assert info.value.status == 401 and "THE_LOOP_GITHUB_APP_ID" in str(info.value)
    assert "BEGIN" not in str(info.value)


def test_installation_token_for_git_is_the_installations_token(
    rs: responses.RequestsMock, rsa_pem
) -> None:
    clients = GitHubClients(fast(app_id=APP_ID, private_key=rsa_pem[0]))
    rs.post(f"{API}/app/installations/6/access_tokens", status=201, json=_token_answer("ghs_g"))
    rs.get(R, json={"full_name": REPO, "default_branch": "main"})
    assert clients.installation_token(6) == "ghs_g"
    clients.for_installation(6).call("get-repository", repo=REPO)
    assert clients.installation_token(6) == "ghs_g"
    assert len([c for c in rs.calls if "access_tokens" in c.request.url]) == 1


def test_installation_token_refused(rs: responses.RequestsMock, rsa_pem) -> None:
    clients = GitHubClients(fast(app_id=APP_ID, private_key=rsa_pem[0]))
    rs.post(f"{API}/app/installations/6/access_tokens", status=404, json={"message": "Not Found"})
    with pytest.raises(IntegrationError) as info:
        clients.installation_token(6)
    assert info.value.status == 404 and info.value.op == "installation-token"
    with pytest.raises(IntegrationError, match="installation"):
        clients.installation_token(None)


def test_installation_token_in_token_mode_is_the_token() -> None:
    assert GitHubClients(fast(token=TOKEN)).installation_token(None) == TOKEN


def test_token_mode_ignores_installation(rs: responses.RequestsMock) -> None:
    clients = GitHubClients(fast(token=TOKEN))
    assert clients.for_installation(1) is clients.for_installation(None)


def test_ghes_base_url(rs: responses.RequestsMock, rsa_pem) -> None:
    ghes = "https://ghe.example.com:443/api/v3"
    settings = fast(api_url="https://ghe.example.com/api/v3", app_id=APP_ID, private_key=rsa_pem[0])
    rs.post(f"{ghes}/app/installations/8/access_tokens", status=201, json=_token_answer("ghs_e"))
    rs.get(f"{ghes}/repos/{REPO}", json={"full_name": REPO, "default_branch": "main"})
    rs.post(f"{ghes}/repos/{REPO}/issues/2/labels", json=[label("x")])
    api = GitHubClients(settings).for_installation(8)
    assert api.call("get-repository", repo=REPO)["full_name"] == REPO
    assert api.call("add-label", repo=REPO, number=2, label="x") == {"labels": ["x"]}


# --------------------------------------------------------------------------- settings


def test_settings_repr_hides_secrets(rsa_pem) -> None:
    s = GitHubSettings(app_id=1, private_key=rsa_pem[0], token=TOKEN)
    text = repr(s) + repr(GitHubClients(s)) + repr(GitHubClients(s).for_installation(1))
    assert "PRIVATE KEY" not in text and TOKEN not in text and "MII" not in text


def test_no_credentials_at_all() -> None:
    with pytest.raises(GitHubConfigError) as info:
        GitHubClients(GitHubSettings())
    for name in ("THE_LOOP_GITHUB_APP_ID", "THE_LOOP_GITHUB_PRIVATE_KEY", "GH_TOKEN"):
        assert name in str(info.value)


def test_rate_limit_does_not_block_the_worker(rs: responses.RequestsMock) -> None:
    # With retries on, PyGithub would sleep 60 s for a secondary rate limit; the policy caps
    # the wait, so the caller gets a retriable error at once and the queue can back off.
    import time

    api = GitHubClients(fast(token=TOKEN, retries=2)).for_installation(None)
    rs.get(
        R,
        status=403,
        json={
            "message": "You have exceeded a secondary rate limit. Please retry your request "
            "again later."
        },
    )
    started = time.monotonic()
    with pytest.raises(IntegrationError) as info:
        api.call("get-repository", repo=REPO)
    assert time.monotonic() - started < 5
    assert (info.value.status, info.value.retriable) == (403, True)
