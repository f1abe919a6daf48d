"""``/api/v1/``: the authenticated, read-only API over work items and deliveries.

Every route needs a bearer token (``Authorization: Bearer TOKEN``, a token of
``THE_LOOP_API_TOKENS``) or a dashboard session cookie; without one the answer is 401
with ``WWW-Authenticate: Bearer`` and no data. Answers are JSON, deterministic for the
same state (canonical bytes, :func:`graph.envelope.encode`), with an ``ETag``; a request
whose ``If-None-Match`` holds it gets 304. Errors are ``{"ok": false, "error": TEXT}``
(the receiver's shape), the text our own, naming the parameter and what it accepts.

==========================================  =============================================
``GET /api/v1/work-items``                  ``?repository=OWNER/REPO&phase=P&status=S``
                                            ``&page=N&per_page=M`` (newest first, 30 per
                                            page, at most 100)
``GET /api/v1/work-items/{ref}``            where it is and how it got there
``GET /api/v1/work-items/{ref}/graph``      the ``the-loop.graph/v1`` envelope (``?since=SEQ``)
``GET /api/v1/work-items/{ref}/events``     the event log (``?after=SEQ&limit=N``, at most 500)
``GET /api/v1/deliveries/failed``           parked deliveries, with the commands for each
==========================================  =============================================

``{ref}`` is ``github:OWNER/REPO%23N`` (the ``#`` percent-encoded; any encoding of the
ref is taken).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import redis
from flask import Blueprint, Response, g, request

from foundation.links import API_PREFIX
from graph.envelope import EnvelopeLimitError, encode
from graph.refs import WorkItemRef
from the_loop.web.common import web
from the_loop.web.readmodel import QueryError

log = logging.getLogger("the_loop.web")

api = Blueprint("api", __name__, url_prefix=API_PREFIX)

JSON = "application/json"
_BAD_REF = ("the work item ref must be github:OWNER/REPO#N with its # written %23, e.g. "
            f"{API_PREFIX}/work-items/github:octo-org/octo-repo%2312")


def error(status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    """``{"ok": false, "error": text}`` with ``status``."""
    return Response(encode({"ok": False, "error": text}), status, headers, mimetype=JSON)


def answer(document: Any) -> Response:
    """``document``'s canonical bytes, with an ``ETag`` (304 when the client has it)."""
    body = encode(document)
    tag = hashlib.sha256(body).hexdigest()[:32]
    headers = {"ETag": f'"{tag}"', "Cache-Control": "private, no-cache",
               "Vary": "Authorization, Cookie"}
    if request.if_none_match.contains(tag):
        return Response(status=304, headers=headers)
    return Response(body, 200, headers, mimetype=JSON)


@api.before_request
def authenticate() -> Response | None:
    """401 without a valid bearer token or session; the principal goes in ``g``."""
    principal = web().principal()
    if principal is None:
        how = ("send Authorization: Bearer TOKEN (a token of THE_LOOP_API_TOKENS) or sign in "
               "at /ui/login" if web().auth.configured else
               "no way to sign in is configured: set THE_LOOP_API_TOKENS (or "
               "THE_LOOP_GITHUB_CLIENT_ID for Sign in with GitHub)")
        return error(401, f"authentication required: {how}",
                     {"WWW-Authenticate": 'Bearer realm="the-loop"'})
    g.principal = principal
    return None


@api.errorhandler(redis.RedisError)
def redis_down(exc: redis.RedisError) -> Response:
    log.warning("api: Redis unavailable (%s)", type(exc).__name__)
    return error(503, "state unavailable (Redis), retry later", {"Retry-After": "5"})


@api.errorhandler(QueryError)
def bad_query(exc: QueryError) -> Response:
    return error(400, str(exc))


def _ref(text: str) -> str:
    parsed = WorkItemRef.parse_or_none(text)
    if parsed is None:
        raise QueryError(_BAD_REF)
    return parsed.format()


@api.get("/")
def index() -> Response:
    """The endpoints."""
    return answer({"endpoints": [f"{API_PREFIX}/work-items", f"{API_PREFIX}/work-items/{{ref}}",
                                 f"{API_PREFIX}/work-items/{{ref}}/graph",
                                 f"{API_PREFIX}/work-items/{{ref}}/events",
                                 f"{API_PREFIX}/deliveries/failed"],
                   "schema": "the-loop.graph/v1"})


@api.get("/work-items")
def work_items() -> Response:
    """One page of work items, newest first, filtered by ``repository``, ``phase`` and
    ``status``: ``{work_items: [{ref, repository, number, node, phase, status,
    parked_reason, escalated, held_by_delivery, created_at, updated_at, links}], page,
    per_page, total, pages, filters}``."""
    model = web().model
    return answer(model.work_items(model.query(request.args)))


@api.get("/work-items/<path:ref>")
def work_item(ref: str) -> Response:
    """The work item: node, phase, status, parked reason and escalation, the notes of
    the current visit (what its status comment notes: a hook's refusal), attempts,
    visits and outcomes per node, every hook of the current node with its last status
    and messages, decisions (who, outcome, when, source link, head SHA, body digest),
    approved SHAs, forced moves (reason as a digest), history, sessions with their
    turns (duration, cost), spend, and the delivery holding it with the retry command."""
    model = web().model
    state = model.state(_ref(ref))
    if state is None:
        return error(404, "no such work item (see /api/v1/work-items)")
    return answer(model.detail(state))


@api.get("/work-items/<path:ref>/events")
def events(ref: str) -> Response:
    """The event log, metadata only (see :meth:`ReadModel.events`)."""
    model = web().model
    key = _ref(ref)
    if model.state(key) is None:
        return error(404, "no such work item (see /api/v1/work-items)")
    return answer(model.events(key, request.args))


@api.get("/work-items/<path:ref>/graph")
def graph(ref: str) -> Response:
    """The ``the-loop.graph/v1`` envelope; 422 past its limits, naming them."""
    model = web().model
    state = model.state(_ref(ref))
    if state is None:
        return error(404, "no such work item (see /api/v1/work-items)")
    try:
        return answer(model.envelope(state, request.args))
    except EnvelopeLimitError as exc:
        hint = (f"; take the events after a sequence number with ?since=SEQ (the log has "
                f"{len(model.events_of(state.ref))}), or read them from /events"
                if exc.what in ("events", "bytes") else "")
        return error(422, f"{exc}{hint}")


@api.get("/deliveries/failed")
def failed() -> Response:
    """Parked deliveries with ``the-loop deliveries retry ID`` for each, and those
    waiting for a retry."""
    return answer(web().model.failed())
