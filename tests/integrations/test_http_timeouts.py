"""Outbound HTTP cannot hang: GitHub, Slack and Jira transports against a loopback server
that accepts the connection and never answers give up with their own error after their
timeout, instead of waiting for ever."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from foundation.settings import GitHubSettings
from graph.errors import LoopError
from integrations.github import GitHubClients
from integrations.jira import JiraApi
from integrations.slack import SlackSdk

#: A hung call fails the test after this long (a bound, not a speed target).
HANG = 60.0


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """``http://127.0.0.1:PORT``: accepts connections, reads what is sent, never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def outcome(call: Callable[[], Any]) -> BaseException | None:
    """Run ``call`` in a thread; its exception, ``None`` if it returned. Fails the test if
    it is still waiting after :data:`HANG` seconds."""
    box: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            box.append(None)
        except BaseException as exc:  # noqa: BLE001 (reported to the test)
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    assert box, f"the call was still waiting after {HANG:g} s: no timeout"
    return box[0]


def test_github_gives_up_on_a_silent_server():
    with silent_server() as url:
        settings = GitHubSettings(token="ghp_timeout", api_url=url, timeout=1, retries=0,
                                  write_interval=0.0, read_interval=0.0)
        api = GitHubClients(settings).for_installation(None)
        error = outcome(lambda: api.call("get-file", repo="o/r", path="README.md"))
    assert isinstance(error, LoopError), error
    assert "ghp_timeout" not in str(error)


def test_slack_gives_up_on_a_silent_server():
    with silent_server() as url:
        sdk = SlackSdk("xoxb-timeout", base_url=url + "/api/", timeout=1, max_retries=0)
        error = outcome(lambda: sdk.call("post-message", channel="C0123ABC", text="hi"))
    assert isinstance(error, LoopError), error
    assert "xoxb-timeout" not in str(error)


@pytest.mark.parametrize("op, params", [("add-comment", {"issue": "PROJ-1", "body": "x"})])
def test_jira_gives_up_on_a_silent_server(op, params):
    with silent_server() as url:
        api = JiraApi(url, "jira-timeout", user="bot@example.com", timeout=1, retries=0)
        error = outcome(lambda: api.call(op, **params))
    assert isinstance(error, LoopError), error
    assert "jira-timeout" not in str(error)
