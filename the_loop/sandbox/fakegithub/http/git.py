"""Git's smart HTTP protocol ("git-http-backend", gitprotocol-http) for the git-backed
repositories, at ``/{owner}/{name}.git/...`` on the web host only (:data:`web`): clone,
fetch and push through ``git http-backend`` run as a CGI program.

It needs HTTP Basic auth whose password is a token the fake issued: a live installation
token (acting as the bot) or a person's token (acting as them: their push is theirs);
anything else gets 401 with ``WWW-Authenticate: Basic realm="GitHub"``, as github.com
answers for a private repository, so git asks its credential helper or ``GIT_ASKPASS``
and retries. (github.com lets anyone read a public one; the fake asks for a token for
every repository.)
"""

from __future__ import annotations

import base64
import contextlib
import io
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from flask import Blueprint, Response, request

from the_loop.sandbox.fakegithub.git import GIT, git_env
from the_loop.sandbox.fakegithub.http.common import GIT_PATH, auth_kind, fake, lookup, not_found

__all__ = ["GIT_BACKEND_TIMEOUT", "web"]

#: Seconds one ``git http-backend`` run may take.
GIT_BACKEND_TIMEOUT = 60.0

web = Blueprint("git", __name__)


@web.route("/<owner>/<repo_git>/<path:rest>", methods=["GET", "POST"])
def git_smart_http(owner: str, repo_git: str, rest: str) -> Response:
    """One request of git's smart HTTP protocol for a git-backed repository: 404 for a
    path that is not one or a repository that is not git-backed, 401 (plain text, with
    ``WWW-Authenticate``) without a token the fake issued, else ``git http-backend``'s
    answer."""
    match = GIT_PATH.match(request.path)
    with fake().lock:
        r = lookup(owner, repo_git.removesuffix(".git")) if match else None
    if match is None or r is None or r.git_dir is None:
        return not_found()
    login = git_login()
    if login is None:
        resp = Response("Invalid username or token. Password authentication is not "
                        "supported for Git operations.\n", status=401,
                        mimetype="text/plain")
        resp.headers["WWW-Authenticate"] = 'Basic realm="GitHub"'
        return resp
    return http_backend(r.git_dir, "/" + rest, login)


def git_login() -> str | None:
    """The login the request's HTTP Basic password (a token the fake issued) acts as:
    the bot for a live installation token, the person for theirs; else ``None``."""
    gh = fake()
    kind, credential = auth_kind(request.headers.get("Authorization"))
    if kind != "basic":
        return None
    try:
        _user, _, password = base64.b64decode(credential).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return gh.git_login(password)


def http_backend(git_dir: Path, rest: str, login: str) -> Response:
    """Run ``git http-backend`` for bare repository ``git_dir`` and service path
    ``rest``, as ``login`` (``REMOTE_USER``, which enables pushes): the request body is
    streamed into it and its answer streamed back; it is killed after
    :data:`GIT_BACKEND_TIMEOUT` seconds."""
    env = git_env(
        GIT_PROJECT_ROOT=str(git_dir.parent),
        GIT_HTTP_EXPORT_ALL="1",
        PATH_INFO=f"/{git_dir.name}{rest}",
        REQUEST_METHOD=request.method,
        QUERY_STRING=request.query_string.decode("latin-1"),
        CONTENT_TYPE=request.headers.get("Content-Type", ""),
        REMOTE_USER=login,  # enables receive-pack (push) for this request
        REMOTE_ADDR=request.remote_addr or "127.0.0.1",
        GATEWAY_INTERFACE="CGI/1.1",
        # As GitHub.com serves partial clones (``--filter=blob:none``) and the lazy
        # fetches of the blobs they leave out (git-config(1): uploadpack.allowFilter,
        # uploadpack.allowAnySHA1InWant).
        GIT_CONFIG_COUNT="2",
        GIT_CONFIG_KEY_0="uploadpack.allowFilter", GIT_CONFIG_VALUE_0="true",
        GIT_CONFIG_KEY_1="uploadpack.allowAnySHA1InWant", GIT_CONFIG_VALUE_1="true",
    )
    for header, variable in (("Content-Length", "CONTENT_LENGTH"),
                             ("Content-Encoding", "HTTP_CONTENT_ENCODING"),
                             ("Git-Protocol", "GIT_PROTOCOL")):
        if request.headers.get(header):
            env[variable] = request.headers[header]
    proc = subprocess.Popen([GIT, "http-backend"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    killer = threading.Timer(GIT_BACKEND_TIMEOUT, proc.kill)
    killer.daemon = True
    killer.start()
    stream = request.stream

    def feed() -> None:  # the request body, streamed into the CGI's stdin
        assert proc.stdin is not None
        with contextlib.suppress(OSError, ValueError):
            while chunk := stream.read(65536):
                proc.stdin.write(chunk)
        with contextlib.suppress(OSError):
            proc.stdin.close()

    feeder = threading.Thread(target=feed, name="git-http-backend-stdin", daemon=True)
    feeder.start()
    out = cast(io.BufferedReader, proc.stdout)
    status, headers, first = read_cgi_head(out)

    def body() -> Iterator[bytes]:  # the CGI's answer, streamed to the client
        try:
            if first:
                yield first
            while chunk := out.read1(65536):
                yield chunk
        finally:
            feeder.join(timeout=GIT_BACKEND_TIMEOUT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=GIT_BACKEND_TIMEOUT)
            killer.cancel()

    return Response(body(), status=status, headers=headers)


def read_cgi_head(out: io.BufferedReader) -> tuple[int, list[tuple[str, str]], bytes]:
    """Read a CGI answer's header block from ``out``.

    Returns:
        ``(status, headers, first)``: the ``Status`` header's code (200 without one), the
        other headers in order, and the body bytes read past the blank line.
    """
    head = b""
    while b"\r\n\r\n" not in head and b"\n\n" not in head:
        chunk = out.read1(65536)
        if not chunk:
            break
        head += chunk
    sep = b"\r\n\r\n" if b"\r\n\r\n" in head else b"\n\n"
    raw_headers, _, first = head.partition(sep)
    status, headers = 200, []
    for line in raw_headers.decode("latin-1").splitlines():
        key, _, value = line.partition(":")
        if key.lower() == "status":
            status = int(value.split()[0])
        elif key:
            headers.append((key.strip(), value.strip()))
    return status, headers, first
