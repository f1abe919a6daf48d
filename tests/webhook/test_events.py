"""webhook.events: header checks, body decoding, Delivery fields."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from foundation.inbox.record import Delivery
from tests.conftest import load_fixture
from webhook.events import (
    BadHeadersError,
    BadPayloadError,
    PayloadTooLargeError,
    SignatureError,
    UnsupportedContentTypeError,
    parse_delivery,
    read_delivery_headers,
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



def test_bad_payload_reason_does_not_echo_body() -> None:
    with pytest.raises(BadPayloadError) as info:
        parse_delivery(headers(), b'{"secret-looking-text": ')
    assert "secret-looking-text" not in info.value.reason


def test_the_loops_own_event_names_are_refused_from_outside() -> None:
    with pytest.raises(BadHeadersError, match="only the-loop itself sends"):
        read_delivery_headers({"X-GitHub-Event": "the-loop.turn", "X-GitHub-Delivery": "d-1"})
