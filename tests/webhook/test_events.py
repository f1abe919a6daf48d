"""webhook.events: header checks, body decoding, Delivery fields, work_item_ref."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from tests.conftest import load_fixture
from webhook.events import (
    BadHeadersError,
    BadPayloadError,
    Delivery,
    PayloadTooLargeError,
    SignatureError,
    UnsupportedContentTypeError,
    loads,
    parse_delivery,
    work_item_ref,
)

DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"  # GitHub's docs example GUID


def headers(event: str = "issues", delivery: str = DELIVERY, ctype: str = "application/json"):
    return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "Content-Type": ctype}


def test_error_statuses() -> None:
    assert BadHeadersError().status == 400
    assert BadPayloadError().status == 400
    assert UnsupportedContentTypeError().status == 415
    assert PayloadTooLargeError().status == 413
    assert SignatureError().status == 401


def test_parse_issue_delivery_fields() -> None:
    body = load_fixture("issues", "opened")
    d = parse_delivery(headers(), body)
    assert isinstance(d, Delivery)
    assert (d.delivery_id, d.event, d.action) == (DELIVERY, "issues", "opened")
    assert d.body == body
    assert d.payload["issue"]["number"] == 1
    assert d.repository == "Codertocat/Hello-World"
    assert d.work_item == "github:Codertocat/Hello-World#1"
    assert d.installation_id is None
    assert "body" not in repr(d) and "payload" not in repr(d)


def test_parse_installation_id_and_no_action() -> None:
    d = parse_delivery(headers("push"), load_fixture("push", "with-installation"))
    assert d.action is None
    assert d.installation_id == 1
    assert d.work_item is None


def test_headers_are_case_insensitive() -> None:
    lower = {k.lower(): v for k, v in headers().items()}
    assert parse_delivery(lower, b"{}").event == "issues"


def test_form_encoded_payload_is_decoded() -> None:
    document = load_fixture("issues", "opened")
    body = urlencode({"payload": document.decode()}).encode()
    d = parse_delivery(headers(ctype="application/x-www-form-urlencoded"), body)
    assert d.body == document
    assert d.work_item == "github:Codertocat/Hello-World#1"


def test_content_type_parameters_ignored() -> None:
    d = parse_delivery(headers(ctype="application/json; charset=utf-8"), b'{"a": 1}')
    assert d.payload == {"a": 1}


@pytest.mark.parametrize("missing", ["X-GitHub-Event", "X-GitHub-Delivery"])
def test_missing_headers(missing: str) -> None:
    h = headers()
    del h[missing]
    with pytest.raises(BadHeadersError, match=missing):
        parse_delivery(h, b"{}")


@pytest.mark.parametrize(
    "delivery", ["", "x" * 101, "has space", "a:b", "../etc", "ünï", "a\nb", "{id}"]
)
def test_bad_delivery_id(delivery: str) -> None:
    with pytest.raises(BadHeadersError) as info:
        parse_delivery(headers(delivery=delivery), b"{}")
    assert delivery not in info.value.reason or delivery == ""


def test_delivery_id_limits() -> None:
    assert parse_delivery(headers(delivery="A" * 100), b"{}").delivery_id == "A" * 100


@pytest.mark.parametrize("event", ["bad event", "x" * 65, "a\nb", "*"])
def test_bad_event_name(event: str) -> None:
    with pytest.raises(BadHeadersError):
        parse_delivery(headers(event=event), b"{}")


def test_unknown_event_is_plain_str() -> None:
    d = parse_delivery(headers(event="some_future_event"), b'{"action": "done"}')
    assert (d.event, d.action, d.work_item) == ("some_future_event", "done", None)


@pytest.mark.parametrize("ctype", ["text/plain", "", "multipart/form-data", "application/xml"])
def test_unsupported_content_type(ctype: str) -> None:
    with pytest.raises(UnsupportedContentTypeError):
        parse_delivery(headers(ctype=ctype), b"{}")


@pytest.mark.parametrize(
    ("ctype", "body"),
    [
        ("application/json", b"{not json"),
        ("application/json", b""),
        ("application/json", b"[1, 2]"),
        ("application/json", b'"str"'),
        ("application/json", b"\xff\xfe\x00"),
        ("application/json", b"[" * 100_000 + b"]" * 100_000),
        ("application/x-www-form-urlencoded", b"other=1"),
        ("application/x-www-form-urlencoded", b"payload=1&payload=2"),
        ("application/x-www-form-urlencoded", b"payload=%7Bbad"),
        ("application/x-www-form-urlencoded", b"payload=%FF"),
        ("application/x-www-form-urlencoded", b"\xff"),
    ],
)
def test_bad_payloads(ctype: str, body: bytes) -> None:
    with pytest.raises(BadPayloadError) as info:
        parse_delivery(headers(ctype=ctype), body)
    assert info.value.status == 400


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


def test_bad_payload_reason_does_not_echo_body() -> None:
    with pytest.raises(BadPayloadError) as info:
        parse_delivery(headers(), b'{"secret-looking-text": ')
    assert "secret-looking-text" not in info.value.reason


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
    assert work_item_ref(event, json.loads(load_fixture(event, name))) == expected


@pytest.mark.parametrize(("event", "name", "expected"), GHES_WORK_ITEMS)
def test_work_item_ref_ghes(event: str, name: str, expected: str | None) -> None:
    payload = json.loads(load_fixture(event, name, host="ghes-35"))
    assert work_item_ref(event, payload) == expected


def test_issue_comment_on_pull_request_uses_pr_number() -> None:
    payload = json.loads(load_fixture("issue_comment", "created"))
    payload["issue"]["number"] = 7
    payload["issue"]["pull_request"] = {
        "url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/7"
    }
    assert work_item_ref("issue_comment", payload) == "github:Codertocat/Hello-World#7"


def test_workflow_run_with_pull_request() -> None:
    payload = json.loads(load_fixture("workflow_run", "completed"))
    repo = payload["repository"]
    payload["workflow_run"]["pull_requests"] = [
        {"number": 9, "base": {"repo": {"id": repo["id"], "url": repo["url"]}}},
        {"number": 10, "base": {"repo": {"id": repo["id"], "url": repo["url"]}}},
    ]
    assert work_item_ref("workflow_run", payload) == "github:octo-org/octo-repo#9"


def test_check_run_pull_request_in_other_repository_uses_its_base_repo() -> None:
    payload = json.loads(load_fixture("check_run", "created"))
    payload["check_run"]["pull_requests"][0]["base"]["repo"] = {
        "id": 999, "url": "https://api.github.com/repos/upstream/project",
    }
    assert work_item_ref("check_run", payload) == "github:upstream/project#2"


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
    assert work_item_ref("issues", payload) is None


@pytest.mark.parametrize(
    "pulls", [None, "x", [], ["x"], [{"number": 1, "base": {"repo": {"id": 2, "url": 3}}}]]
)
def test_work_item_ref_malformed_check_run_is_none(pulls: object) -> None:
    payload = {"repository": {"id": 1, "full_name": "o/r"}, "check_run": {"pull_requests": pulls}}
    assert work_item_ref("check_run", payload) is None
