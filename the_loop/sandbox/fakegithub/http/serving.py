"""Serving the fake GitHub over loopback: from a background thread (:func:`serve`, what the
tests and the sandbox use) or standalone (:func:`main`, ``python -m
the_loop.sandbox.fakegithub.http``)."""

from __future__ import annotations

import argparse
import contextlib
import threading
from collections.abc import Callable

from werkzeug.serving import WSGIRequestHandler, make_server

from the_loop.sandbox.fakegithub.http.common import GHES_PREFIX
from the_loop.sandbox.fakegithub.http.served import HttpFakeGitHub

__all__ = ["QuietHandler", "main", "serve"]


class QuietHandler(WSGIRequestHandler):
    """werkzeug's request handler without its access log line per request (the tests'
    and the sandbox's output stay readable; :attr:`HttpFakeGitHub.requests` records
    them)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Log nothing."""


def serve(
    fake: HttpFakeGitHub, host: str = "127.0.0.1", port: int = 0
) -> tuple[str, Callable[[], None]]:
    """Serve ``fake`` from a background thread (threaded werkzeug server).

    Args:
        port: 0 picks a free port.

    Returns:
        ``(base_url, stop)``: ``base_url`` like ``http://127.0.0.1:54321`` (append
        ``/api/v3`` for the GHES layout); ``stop()`` shuts the server down and joins the
        thread.
    """
    server = make_server(host, port, fake.app, threaded=True, request_handler=QuietHandler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-github", daemon=True
    )
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return f"http://{host}:{server.port}", stop


def main(argv: list[str] | None = None) -> None:
    """``python -m the_loop.sandbox.fakegithub.http [--host H] [--port N]
    [--repo OWNER/NAME]...``"""
    parser = argparse.ArgumentParser(description="Serve a fake GitHub REST API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--repo", action="append", default=[], help="repository OWNER/NAME to create (repeatable)"
    )
    parser.add_argument("--default-branch", default="main")
    args = parser.parse_args(argv)
    fake = HttpFakeGitHub()
    for full_name in args.repo:
        fake.add_repo(full_name, default_branch=args.default_branch)
    server = make_server(args.host, args.port, fake.app, threaded=True)
    print(
        f"fake GitHub listening on http://{args.host}:{server.port} "
        f"(GHES layout: http://{args.host}:{server.port}{GHES_PREFIX})",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
