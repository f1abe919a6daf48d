"""foundation.events: JSON parsing, the work item a payload names, and GitHubEvent."""

from __future__ import annotations

import json

import pytest

from foundation.events import GitHubEvent, loads, work_item_ref
from graph.refs import WorkItemRef
from tests.conftest import load_fixture


def ref_of(event: str, payload: dict) -> str | None:
    """The ref :func:`work_item_ref` derives, as the string the receiver stores."""
    ref = work_item_ref(event, payload)
    return ref.format() if ref else None


@pytest.mark.parametrize(
    "document",
    [
        b'{"a": 1, "b": [true, null, 1.5e3, "\\u00e9"], "c": {"d": "\xc3\xa9"}}',
        b'{"n": NaN, "i": Infinity}',  # the standard library accepts these; orjson does not
        b'{"lone": "\\ud800"}',  # a lone surrogate escape
        '{"utf16": "x"}'.encode("utf-16"),  # json.loads detects UTF-16/32 in bytes
        b'{"dup": 1, "dup": 2}',
    ],
)
def test_loads_accepts_exactly_what_the_standard_library_accepts(document: bytes) -> None:
    """loads (orjson first) gives the same value as json.loads, including for documents
    orjson refuses, so the receiver answers a body the same with or without orjson."""
    expected = json.loads(document)
    got = loads(document)
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


def test_loads_reads_integers_beyond_64_bits_as_numbers() -> None:
    """The one known difference from json.loads: orjson reads an integer beyond 64 bits
    as a float (GitHub's ids stay below 2**53)."""
    assert loads(b'{"big": 123456789012345678901234567890}')["big"] == pytest.approx(
        123456789012345678901234567890)
    assert loads(b'{"id": 9007199254740993}')["id"] == 9007199254740993  # int, exact


def test_loads_refuses_what_the_standard_library_refuses() -> None:
    for bad in (b"{not json", b"", b"\xff\xfe\x00"):
        with pytest.raises(ValueError):
            loads(bad)
    with pytest.raises((ValueError, RecursionError)):
        loads(b"[" * 100_000 + b"]" * 100_000)



# Table-driven from real fixtures: (event, fixture, expected work item).
WORK_ITEMS = [
    ("issues", "opened", "github:Codertocat/Hello-World#1"),
    ("issues", "transferred", "github:octo-org/octo-repo#1"),
    ("issues", "demilestoned", "github:Codertocat/Hello-World#2"),  # issue that is a PR
    ("issue_comment", "created", "github:Codertocat/Hello-World#1"),
    ("issue_comment", "deleted", "github:Codertocat/Hello-World#1"),
    ("pull_request", "opened", "github:Codertocat/Hello-World#2"),
    ("pull_request", "closed", "github:Codertocat/Hello-World#2"),
    ("pull_request_review", "submitted", "github:Codertocat/Hello-World#2"),
    ("pull_request_review", "dismissed", "github:Codertocat/Hello-World#2"),
    ("pull_request_review_comment", "created", "github:Codertocat/Hello-World#2"),
    ("check_run", "created", "github:Codertocat/Hello-World#2"),
    ("check_run", "completed", "github:Codertocat/Hello-World#2"),
    ("check_run", "rerequested", None),  # no pull_requests
    ("check_suite", "completed", "github:Codertocat/Hello-World#2"),
    ("check_suite", "requested.with-organization", None),
    ("workflow_run", "completed", None),  # fixture has no pull_requests
    ("workflow_run", "requested", None),
    ("push", "with-installation", None),
    ("status", "payload", None),
    ("installation", "created", None),
    ("installation_repositories", "added", None),
    ("label", "created", None),
    ("ping", "with-app_id", None),
]
GHES_WORK_ITEMS = [
    ("issues", "opened", "github:Codertocat/Hello-World#1"),
    ("issue_comment", "edited", "github:Codertocat/Hello-World#1"),
    ("pull_request", "labeled", "github:Codertocat/Hello-World#2"),
    ("pull_request_review_comment", "created", "github:Codertocat/Hello-World#2"),
    ("check_run", "created", "github:Codertocat/Hello-World#2"),
    ("check_suite", "rerequested", "github:Codertocat/Hello-World#2"),
    ("push", "payload", None),
    ("installation_repositories", "removed", None),
    ("ping", "payload", None),
]


@pytest.mark.parametrize(("event", "name", "expected"), WORK_ITEMS)
def test_work_item_ref_github_com(event: str, name: str, expected: str | None) -> None:
    assert ref_of(event, json.loads(load_fixture(event, name))) == expected


@pytest.mark.parametrize(("event", "name", "expected"), GHES_WORK_ITEMS)
def test_work_item_ref_ghes(event: str, name: str, expected: str | None) -> None:
    payload = json.loads(load_fixture(event, name, host="ghes-35"))
    assert ref_of(event, payload) == expected


def test_issue_comment_on_pull_request_uses_pr_number() -> None:
    payload = json.loads(load_fixture("issue_comment", "created"))
    payload["issue"]["number"] = 7
    payload["issue"]["pull_request"] = {
        "url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/7"
    }
    assert ref_of("issue_comment", payload) == "github:Codertocat/Hello-World#7"


def test_workflow_run_with_pull_request() -> None:
    payload = json.loads(load_fixture("workflow_run", "completed"))
    repo = payload["repository"]
    payload["workflow_run"]["pull_requests"] = [
        {"number": 9, "base": {"repo": {"id": repo["id"], "url": repo["url"]}}},
        {"number": 10, "base": {"repo": {"id": repo["id"], "url": repo["url"]}}},
    ]
    assert ref_of("workflow_run", payload) == "github:octo-org/octo-repo#9"


def test_check_run_pull_request_in_other_repository_uses_its_base_repo() -> None:
    payload = json.loads(load_fixture("check_run", "created"))
    payload["check_run"]["pull_requests"][0]["base"]["repo"] = {
        "id": 999, "url": "https://api.github.com/repos/upstream/project",
    }
    assert ref_of("check_run", payload) == "github:upstream/project#2"


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"repository": "x", "issue": {"number": 1}},
        {"repository": {"full_name": "o/r"}, "issue": "x"},
        {"repository": {"full_name": "o/r"}, "issue": {"number": "1"}},
        {"repository": {"full_name": "o/r"}, "issue": {"number": True}},
        {"repository": {"full_name": "o/r"}, "issue": {"number": -1}},
        {"repository": {"full_name": 5}, "issue": {"number": 1}},
    ],
)
def test_work_item_ref_malformed_is_none(payload: dict) -> None:
    assert ref_of("issues", payload) is None


@pytest.mark.parametrize(
    "pulls", [None, "x", [], ["x"], [{"number": 1, "base": {"repo": {"id": 2, "url": 3}}}]]
)
def test_work_item_ref_malformed_check_run_is_none(pulls: object) -> None:
    payload = {"repository": {"id": 1, "full_name": "o/r"}, "check_run": {"pull_requests": pulls}}
    assert ref_of("check_run", payload) is None


# --- GitHubEvent: every fact read off the payload once ------------------------------


def event_of(event: str, name: str) -> GitHubEvent:
    return GitHubEvent.parse(event, json.loads(load_fixture(event, name)))


def test_an_issue_labeled_delivery() -> None:
    got = event_of("issues", "labeled")
    assert (got.name, got.action, got.kind_name) == ("issues", "labeled", "issues.labeled")
    assert (got.repository, got.repository_id, got.default_branch) == (
        "Codertocat/Hello-World", 186853002, "master")
    assert got.ref == WorkItemRef("Codertocat/Hello-World", 1) and got.kind == "issue"
    assert got.labels == ("bug",) and got.label == "bug"
    assert got.sender.login == "Codertocat" and not got.sender.is_bot
    assert got.comment is None and got.ci is None and got.installation_id is None


def test_an_issue_comment_carries_the_comment_and_its_author() -> None:
    got = event_of("issue_comment", "created")
    assert got.comment is not None
    assert (got.comment.kind, got.comment.id, got.comment.author) == (
        "issue_comment", 492700400, "Codertocat")
    assert got.comment.body and got.comment.body.startswith("You are totally right")
    assert "totally" not in repr(got)  # untrusted text is never in a log line


def test_a_review_comment_and_a_review() -> None:
    comment = event_of("pull_request_review_comment", "created")
    assert comment.comment is not None and comment.comment.kind == "review_comment"
    assert comment.installation_id == 1 and comment.kind == "pull_request"
    review = event_of("pull_request_review", "submitted")
    assert review.comment is not None
    assert (review.comment.kind, review.comment.id, review.comment.review_state,
            review.comment.review_commit) == (
        "review", 237895671, "COMMENTED", "ec26c3e57ca3a959ca5aad62de7213c562f8c821")
    assert (review.head_sha, review.head_ref) == (
        "ec26c3e57ca3a959ca5aad62de7213c562f8c821", "changes")


def test_an_issue_comment_on_a_pull_request_is_about_a_pull_request() -> None:
    payload = json.loads(load_fixture("issue_comment", "created"))
    payload["issue"]["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/1"}
    got = GitHubEvent.parse("issue_comment", payload)
    assert got.kind == "pull_request" and got.head_sha is None


def test_ci_results_of_a_commit_status_and_a_check_suite() -> None:
    status = event_of("status", "payload")
    assert status.ref is None and status.kind is None
    assert status.ci is not None
    assert (status.ci.repository, status.ci.name, status.ci.conclusion) == (
        "Codertocat/Hello-World", "default", "success")
    payload = json.loads(load_fixture("check_suite", "completed"))
    payload["check_suite"].update(app={"slug": "ci-app"}, status="in_progress")
    suite = GitHubEvent.parse("check_suite", payload)
    assert suite.ci is not None and (suite.ci.name, suite.ci.conclusion) == (
        "ci-app", "pending")


def test_a_push_names_its_ref_and_new_head() -> None:
    got = event_of("push", "with-installation")
    assert (got.pushed_ref, got.after) == (
        "refs/tags/simple-tag", "0000000000000000000000000000000000000000")
    assert got.installation_id == 1 and got.ref is None


@pytest.mark.parametrize("payload", [
    {},
    {"repository": "x", "sender": 5, "installation": {"id": True}, "label": "y",
     "comment": "z", "issue": {"labels": ["a", {"name": "b"}]}},
])
def test_malformed_fields_read_as_none_never_raise(payload: dict) -> None:
    got = GitHubEvent.parse("issues", payload)
    assert got.repository is None and got.installation_id is None and got.comment is None
    assert got.label is None and got.sender.login is None


def test_the_graph_sees_the_work_item_and_the_inbound_event() -> None:
    got = event_of("pull_request_review", "submitted")
    ref = WorkItemRef("Codertocat/Hello-World", 2)
    item = got.work_item(ref, "docs/{number}")
    assert (item.ref, item.id, item.repository, item.kind, item.spec_dir) == (
        "github:Codertocat/Hello-World#2", 2, "Codertocat/Hello-World", "pull_request",
        "docs/2")
    inbound = got.inbound("d-1")
    assert (inbound.kind, inbound.delivery_id, inbound.actor, inbound.actor_type,
            inbound.review_state, inbound.comment_id, inbound.author, inbound.head_sha) == (
        "pull_request_review.submitted", "d-1", "Codertocat", "User", "COMMENTED",
        237895671, "Codertocat", "ec26c3e57ca3a959ca5aad62de7213c562f8c821")
    # A CI result fanned out to a work item: the item is the one given, not the payload's.
    fanned = event_of("status", "payload").work_item(ref)
    assert (fanned.ref, fanned.kind, fanned.tags) == (ref.format(), "issue", ())


def test_a_known_work_item_is_taken_as_given_not_derived_again() -> None:
    ref = WorkItemRef("Codertocat/Hello-World", 5)
    payload = json.loads(load_fixture("status", "payload"))
    assert GitHubEvent.parse("status", payload, ref).ref == ref  # fanned out to #5
    comment = json.loads(load_fixture("issue_comment", "created"))
    assert GitHubEvent.parse("issue_comment", comment, None).ref is None
    assert GitHubEvent.parse("issue_comment", comment).ref == WorkItemRef(
        "Codertocat/Hello-World", 1)
