"""Property tests over the receiver's raw requests (hypothesis): whatever the method,
path, GitHub headers, signature, content type and body, signed or not, the receiver never
answers 5xx, and a 4xx never echoes a request header's value or the body.

Through the Flask test client on the app gunicorn serves (:func:`the_loop.wiring.build_receiver`,
real Redis), and, fewer, as raw bytes over a socket to real gunicorn."""

from __future__ import annotations

import json
from urllib.parse import quote_plus

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from foundation.settings import Settings
from tests.conftest import load_fixture, sign_body
from tests.webhook.test_chunked import SECRET, exchange
from tests.webhook.test_chunked import receiver as receiver  # noqa: F401  (the fixture)
from the_loop.wiring import build_receiver

METHODS = ["POST", "GET", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
PATHS = ["/webhook", "/webhook/", "/", "/healthz", "/readyz", "/metrics", "/webhook?x=1",
         "/api/v1/work-items", "/ui/", "/%ff", "/webhook/../webhook"]
EVENTS = ["issues", "issue_comment", "pull_request", "push", "ping", "check_run",
          "installation", "the-loop.turn", "", "issues\x00", "ISSUES", "a" * 200]
CONTENT_TYPES = ["application/json", "application/json; charset=utf-8",
                 "application/json; charset=latin-1", "application/x-www-form-urlencoded",
                 "text/plain", "multipart/form-data; boundary=x", "", "application/json;;;",
                 "application/x-www-form-urlencoded; charset=utf-16"]
#: Our own fixed texts: a header value that happens to be one of their substrings (a
#: Content-Type of ``application/json``) is not an echo.
OWN_TEXT = ("Content-Type must be application/json or application/x-www-form-urlencoded "
            "missing or malformed GitHub delivery headers payload is not a JSON object")

#: Header-safe text (what an HTTP client can put in a header value).
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=80)


def payloads() -> st.SearchStrategy[bytes]:
    fixture = load_fixture("issues", "opened")
    mutated = st.builds(
        lambda doc, key, value: json.dumps({**doc, key: value}).encode(),
        st.just(json.loads(fixture)),
        st.sampled_from(["action", "issue", "repository", "installation", "sender", "x"]),
        st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                     max_leaves=8))
    form = st.builds(lambda raw: b"payload=" + quote_plus(raw).encode(),
                     st.sampled_from([fixture.decode(), "{}", "[]", "not json"]))
    return st.one_of(st.just(fixture), mutated, form, st.binary(max_size=300),
                     st.just(b"payload=1&payload=2"), st.just(b"%zz=%"))


@st.composite
def raw_requests(draw: st.DrawFn) -> dict:
    """One request, mostly shaped like GitHub's (so the checks past the headers and the
    signature are reached too), otherwise anything."""

    def usually(common: st.SearchStrategy, rare: st.SearchStrategy):  # 4 in 5 common
        return draw(common if draw(st.sampled_from("cccc" "r")) == "c" else rare)

    body = draw(payloads())
    headers: dict[str, str] = {}
    event = usually(st.sampled_from(EVENTS[:7]), st.one_of(st.sampled_from(EVENTS),
                                                           header_text, st.none()))
    if event is not None:
        headers["X-GitHub-Event"] = event
    delivery = usually(st.uuids().map(str), st.one_of(header_text, st.none()))
    if delivery is not None:
        headers["X-GitHub-Delivery"] = delivery
    signature = usually(st.just("signed"), st.sampled_from(["wrong", "junk", "none", "sha1"]))
    if signature == "signed":
        headers["X-Hub-Signature-256"] = sign_body(body, SECRET)
    elif signature == "wrong":
        headers["X-Hub-Signature-256"] = "sha256=" + "0" * 64
    elif signature == "junk":
        headers["X-Hub-Signature-256"] = draw(header_text)
    elif signature == "sha1":
        headers["X-Hub-Signature"] = "sha1=" + "0" * 40
    content_type = usually(st.sampled_from(CONTENT_TYPES[:4]),
                           st.one_of(st.sampled_from(CONTENT_TYPES), header_text))
    if content_type:
        headers["Content-Type"] = content_type
    if draw(st.sampled_from("....L")) == "L":
        headers["Content-Length"] = str(draw(st.sampled_from([0, 1, len(body), 10**9])))
    method = usually(st.just("POST"), st.sampled_from(METHODS))
    path = usually(st.just("/webhook"), st.sampled_from(PATHS))
    return {"method": method, "path": path, "headers": headers, "body": body}


def echoed(request: dict, answer: bytes) -> list[str]:
    """The request's header values and body that appear in ``answer``."""
    text = answer.decode("utf-8", "replace")
    found = [v for v in request["headers"].values()
             if len(v) >= 6 and v in text and v not in OWN_TEXT]
    body = request["body"].decode("utf-8", "replace")
    if len(body) >= 6 and body in text:
        found.append("the body")
    return found


@pytest.fixture
def client(redis_ns):
    app = build_receiver(Settings.from_env({
        "THE_LOOP_WEBHOOK_SECRET": SECRET, "REDIS_URL": redis_ns.url,
        "THE_LOOP_REDIS_PREFIX": redis_ns.prefix, "THE_LOOP_QUEUE": redis_ns.queue_name,
        "THE_LOOP_ENV_FILE": ""}, process="receiver"), connection=redis_ns.client)
    return app.test_client()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=raw_requests())
def test_no_raw_request_gets_a_5xx_and_no_4xx_echoes_it(client, request):
    response = client.open(request["path"], method=request["method"],
                           headers=request["headers"], data=request["body"])
    event(f"status {response.status_code}")  # --hypothesis-show-statistics
    assert response.status_code < 500, (response.status_code, response.data[:200])
    if 400 <= response.status_code < 500:
        assert echoed(request, response.data) == []


def frame(request: dict, framing: str, size: str) -> bytes:
    """The request as bytes on the wire (HTTP/1.1): its body sized by Content-Length,
    chunked, or chunked with the chunk size line ``size`` (whatever it says)."""
    lines = [f"{request['method']} {request['path']} HTTP/1.1", "Host: loop.example.com",
             "Connection: close"]
    body = request["body"]
    headers = {k: v for k, v in request["headers"].items() if k != "Content-Length"}
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if framing != "length":
        lines.append("Transfer-Encoding: chunked")
        head = f"{len(body):x}" if framing == "chunked" else size
        body = b"%s\r\n%s\r\n0\r\n\r\n" % (head.encode("latin-1"), body)
    else:
        lines.append(f"Content-Length: {len(body)}")
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=raw_requests(), framing=st.sampled_from(["length", "chunked", "garbled"]),
       size=header_text)
def test_real_gunicorn_never_answers_a_raw_request_with_a_5xx(receiver, request,  # noqa: F811
                                                               framing, size):
    port, log, _ = receiver
    try:
        answer = exchange(port, frame(request, framing, size), half_close=True)
    except (TimeoutError, ConnectionResetError):  # gunicorn may drop a request it refuses
        answer = b""
    status = answer.split(b" ", 2)[1:2]
    event(f"status {status[0].decode() if status else 'none'}")
    assert not status or not status[0].startswith(b"5"), answer[:300]
    if status and status[0].startswith(b"4"):
        assert echoed(request, answer.partition(b"\r\n\r\n")[2]) == []
    assert "Traceback" not in log.read_text()
