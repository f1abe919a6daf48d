"""The request gate of the fake GitHub's HTTP front, around every route: the request log,
injected faults, token authentication, conditional requests (``ETag``/``Last-Modified``,
304), the primary rate limit's headers, and GitHub's 404 for an unknown path or method.

:func:`install` adds these to an app; the routes then find who is asking in
:data:`flask.g`: ``g.login`` (the token's login, or ``None``) and ``g.installation``
(the installation id of an installation token, or ``None``).
"""

from __future__ import annotations

import contextlib

from flask import Flask, Response, g, jsonify, request

from the_loop.sandbox.fakegithub.http.common import (
    APP_PATH,
    DOCS,
    GIT_PATH,
    MANIFEST_PATH,
    auth_kind,
    error,
    fake,
    not_found,
)
from the_loop.sandbox.fakegithub.http.records import Fault, RecordedRequest

__all__ = ["install"]


def install(app: Flask) -> None:
    """Add the gate to ``app``: :func:`gate` before each request; after it
    :func:`lose_answer` then :func:`conditional` (registered in the reverse order, as Flask
    runs them); 404 ``Not Found`` for an unknown path and for a method a path does not
    take (GitHub answers both so)."""
    app.before_request(gate)
    app.teardown_request(stop_acting)
    app.after_request(conditional)
    app.after_request(lose_answer)
    app.register_error_handler(404, unknown)
    app.register_error_handler(405, unknown)


def gate() -> Response | None:
    """Log the request, answer an injected fault, and authenticate a token: the request
    then acts (:meth:`~the_loop.sandbox.fakegithub.store.FakeStore.acting_as`) as the
    token's login, the bot for an installation token.

    Returns:
        the answer instead of the route's (a fault; 401 ``Bad credentials`` for a token
        the fake did not issue, an expired, revoked or suspended installation's token, or
        another scheme; 401 ``Requires authentication`` for an anonymous write), or
        ``None`` to go on to the route. The installation-token, App, manifest, OAuth and
        git paths check their own credentials. ``Authorization: Bearer TOKEN`` is taken
        as ``token TOKEN`` is (GitHub takes both).
    """
    gh = fake()
    kind, credential = auth_kind(request.headers.get("Authorization"))
    with gh.lock:
        g.request_index = gh.log_request(
            RecordedRequest(
                request.method, request.path, kind, request.query_string.decode("latin-1"),
                conditional=bool(request.headers.get("If-None-Match")
                                 or request.headers.get("If-Modified-Since")),
            )
        )
        fault = gh.take_fault(request.method, request.path)
    g.after_fault = fault if fault is not None and fault.after else None
    if fault is not None and not fault.after:
        return _fault_answer(fault)
    g.login = None
    g.installation = None
    if ("/access_tokens" in request.path or GIT_PATH.match(request.path)
            or APP_PATH.match(request.path)
            or MANIFEST_PATH.search(request.path)
            or request.path.startswith("/login/oauth/")):
        return None  # checked by the route (the manifest flow and OAuth need no token)
    if kind in ("token", "bearer"):
        installation, user = gh.token_holder(credential)
        if installation is not None and gh.is_suspended(installation):
            return bad_credentials()
        if user is not None:
            g.login = user
        elif installation is not None:
            g.login = gh.bot_login
            g.installation = installation
        else:
            return bad_credentials()
    elif kind != "none":
        return bad_credentials()
    elif request.method != "GET":
        return error(401, "Requires authentication")
    acting = contextlib.ExitStack()
    acting.enter_context(gh.acting_as(g.login))
    g.acting = acting
    return None


def stop_acting(_exc: BaseException | None) -> None:
    """After the request: its writes no longer act as its token's login."""
    acting = g.pop("acting", None)
    if acting is not None:
        acting.close()


def bad_credentials() -> Response:
    """GitHub's 401 for a token it does not know: ``{"message": "Bad credentials",
    "documentation_url", "status": "401"}``, as api.github.com answers it (its error
    bodies carry the status as a string; the OpenAPI description's ``basic-error``)."""
    resp = jsonify({"message": "Bad credentials", "documentation_url": DOCS, "status": "401"})
    resp.status_code = 401
    return resp


def conditional(resp: Response) -> Response:
    """ETag / Last-Modified on a successful GET, 304 for a matching conditional GET
    (werkzeug's ``make_conditional``), the rate-limit headers on every API answer,
    and the status in the request log. Registered before ``lose_answer``, so it sees
    the final answer (Flask runs these in reverse)."""
    gh = fake()
    api = not (GIT_PATH.match(request.path) or request.path.startswith("/login/oauth/"))
    if (request.method == "GET" and resp.status_code == 200 and api
            and not resp.is_streamed and resp.mimetype == "application/json"):
        resp.add_etag(weak=True)
        etag = str(resp.headers.get("ETag"))
        resp.last_modified = gh.first_served(etag)
        resp.make_conditional(request)
    if api:
        who = (f"installation:{g.installation}" if g.get("installation") is not None
               else g.get("login") or request.remote_addr or "anonymous")
        used, reset = gh.count_request(who, counted=resp.status_code != 304)
        for header, value in (
                ("x-ratelimit-limit", gh.rate_limit),
                ("x-ratelimit-remaining", max(0, gh.rate_limit - used)),
                ("x-ratelimit-used", used), ("x-ratelimit-reset", reset),
                ("x-ratelimit-resource", "core")):
            if header not in resp.headers:  # an injected fault's own headers win
                resp.headers[header] = str(value)
    index = g.get("request_index")
    if index is not None:
        gh.answered(index, resp.status_code)
    return resp


def lose_answer(resp: Response) -> Response:
    """A fault injected ``after``: the request was handled, its answer is lost."""
    fault = g.get("after_fault")
    if fault is None:
        return resp
    return _fault_answer(fault)


def _fault_answer(fault: Fault) -> Response:
    """A fault's answer: its JSON body, or a ``str`` body sent as it is (GitHub's HTML
    error page, given with a ``Content-Type: text/html`` header); its status and headers.
    """
    resp = Response(fault.body) if isinstance(fault.body, str) else jsonify(fault.body)
    resp.status_code = fault.status
    resp.headers.update(fault.headers)
    return resp


def unknown(_: Exception) -> Response:
    """404 ``Not Found`` (an unknown path, or a method the path does not take)."""
    return not_found()
