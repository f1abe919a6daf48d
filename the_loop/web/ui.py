"""``/ui/``: the dashboard, server-rendered with Flask's templates.

Pages: the board of work items by phase (``/ui/``), a work item (``/ui/work-items/{ref}``:
its graph drawn with Mermaid, current node highlighted and forced moves in a warning
colour, the hooks of its current node with their messages, its decisions linked to the
comment or review on GitHub, its sessions and turns, and its timeline), and the parked
deliveries with the exact ``the-loop deliveries retry ID`` command
(``/ui/deliveries/failed``). Signing in: ``/ui/login`` (a token of
``THE_LOOP_API_TOKENS``, or "Sign in with GitHub", ``/ui/auth/github``).

Every page refreshes without a full reload: ``ui.js`` asks for the page's main part
again every :data:`REFRESH_SECONDS` seconds (header ``X-The-Loop-Refresh: 1``) with the
``ETag`` it has, and swaps it in when it changed (304 otherwise). JavaScript is our own
``static/ui.js`` and Mermaid's ``mermaid.min.js`` from the npm package ``make venv``
installs (``tools/mermaid``), served from ``/ui/vendor/``: nothing is fetched from
anywhere else, which the Content-Security-Policy header also says (``'self'`` only).
"""

from __future__ import annotations

import hashlib
import logging
import re
import urllib.parse
from pathlib import Path
from typing import Any

import redis
from flask import (
    Blueprint,
    Response,
    g,
    make_response,
    redirect,
    render_template,
    request,
    send_file,
)
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import NotFound
from werkzeug.wrappers import Response as BaseResponse

from foundation import links
from graph.envelope import metadata, timestamp
from graph.export import Overlay, to_mermaid
from graph.refs import WorkItemRef
from graph.state import Past
from the_loop.web.auth import OAUTH_COOKIE, OAUTH_TTL, SESSION_COOKIE, Principal, cookie_options
from the_loop.web.common import web
from the_loop.web.oauth import OAuthError
from the_loop.web.readmodel import STATUSES, Query, QueryError

log = logging.getLogger("the_loop.web")

ui = Blueprint("ui", __name__, url_prefix=links.UI_PREFIX, template_folder="templates",
               static_folder="static", static_url_path="/static")

_SHA = re.compile(r"[0-9a-f]{40}")
#: Seconds between a page's looks for a change.
REFRESH_SECONDS = 5
#: Events a work item's timeline shows at most (the newest; the API pages the rest).
TIMELINE_LIMIT = 300
#: Work items the board shows at most.
BOARD_LIMIT = 500
#: The vendored files ``/ui/vendor/NAME`` serves: name -> path under the Mermaid
#: packages' directory (``THE_LOOP_MERMAID_PARSER``, else ``<venv>/mermaid``).
VENDOR = {"mermaid.min.js": Path("node_modules/mermaid/dist/mermaid.min.js")}
#: No script, style or image from anywhere but here (Mermaid puts style elements in the
#: SVG it draws, hence the inline styles).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
PUBLIC = frozenset({"ui.login", "ui.login_token", "ui.github_start", "ui.github_callback",
                    "ui.static", "ui.vendor", "ui.logout"})


# -- request hooks ------------------------------------------------------------------------


@ui.before_request
def require_sign_in() -> ResponseReturnValue | None:
    """A page needs a session (or a bearer token); without one: to ``/ui/login``."""
    g.principal = web().principal()
    if g.principal is None and request.endpoint not in PUBLIC:
        if request.headers.get("X-The-Loop-Refresh"):
            return Response("sign in again", 401, mimetype="text/plain")
        # The path as the browser sent it (a ref's "#" stays %23, never a fragment).
        query = request.query_string.decode("latin-1")
        target = urllib.parse.quote(request.path, safe="/:") + (f"?{query}" if query else "")
        return redirect(f"{links.UI_PREFIX}/login?{urllib.parse.urlencode({'next': target})}")
    return None


@ui.after_request
def headers(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    if request.endpoint not in ("ui.static", "ui.vendor"):
        response.headers["Cache-Control"] = "private, no-cache"
    return response


@ui.errorhandler(redis.RedisError)
def redis_down(exc: redis.RedisError) -> Response:
    log.warning("dashboard: Redis unavailable (%s)", type(exc).__name__)
    return page("message.html", "Unavailable", status=503,
                message="The-loop's state (Redis) is unavailable; this page tries again.")


@ui.app_template_filter("when")
def when(value: str | None) -> str:
    """``2026-05-01T12:00:00.000Z`` -> ``2026-05-01 12:00:00 UTC``."""
    if not value:
        return "—"
    return value.replace("T", " ")[:19] + " UTC"


@ui.app_template_filter("short")
def short(value: Any, size: int = 10) -> str:
    return "—" if not value else str(value)[:size]


# -- rendering ----------------------------------------------------------------------------


def page(content: str, title: str, *, status: int = 200, mermaid: bool = False,
         **context: Any) -> Response:
    """Render ``content`` (a template of the main part) alone for a refresh, else inside
    ``base.html``; with an ``ETag`` over the main part (304 when the refresh has it)."""
    context.update(title=title, principal=g.get("principal"), links=links,
                   oauth=web().oauth is not None, refresh=REFRESH_SECONDS)
    main = render_template(content, **context)
    tag = hashlib.sha256(main.encode("utf-8")).hexdigest()[:32]
    if request.headers.get("X-The-Loop-Refresh"):
        if request.if_none_match.contains(tag):
            return Response(status=304, headers={"ETag": f'"{tag}"'})
        response = make_response(main, status)
    else:
        response = make_response(render_template("base.html", main=main, etag=tag,
                                                  mermaid=mermaid, **context), status)
    response.headers["ETag"] = f'"{tag}"'
    response.headers["Vary"] = "Cookie, X-The-Loop-Refresh"
    return response


def attributes(data: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """An event's metadata as ``(label, text, title)`` for the timeline: a digest shows
    its first hex digits (the whole in ``title``), a list its items, an object in a list
    its values."""
    out: list[tuple[str, str, str | None]] = []
    for key, value in data.items():
        if value is None or value == []:
            continue
        if key.endswith("_sha256"):
            out.append((key.removesuffix("_sha256"), f"{str(value)[:8]}…",
                        f"SHA-256 digest {value}"))
        elif isinstance(value, str) and _SHA.fullmatch(value):
            out.append((key, value[:12], f"commit {value}"))
        elif isinstance(value, list):
            out.append((key, ", ".join(" ".join(str(v) for v in x.values())
                                       if isinstance(x, dict) else str(x) for x in value), None))
        else:
            out.append((key, str(value).lower() if isinstance(value, bool) else str(value), None))
    return out


# -- pages --------------------------------------------------------------------------------


@ui.get("/")
def board() -> Response:
    """The board: work items by phase, in the graph's order (filters: repository,
    status)."""
    model = web().model
    args = {k: v for k, v in request.args.items() if k in ("repository", "status")}
    try:
        query = model.query(args)
    except QueryError as exc:
        return page("message.html", "Board", status=400, message=str(exc))
    everything = model.states()
    chosen = model.matching(Query(repository=query.repository, status=query.status),
                            everything)
    columns: dict[str, list[dict[str, Any]]] = {p: [] for p in model.phases()}
    for state in chosen[:BOARD_LIMIT]:
        item = model.summary(state)
        columns.setdefault(item["phase"] or "unknown node", []).append(item)
    repositories = sorted({WorkItemRef.parse(s.ref).repository for s in everything},
                          key=str.casefold)
    return page("board.html", "Board", columns=columns, total=len(chosen),
                shown=min(len(chosen), BOARD_LIMIT), repositories=repositories,
                statuses=STATUSES, query=query, active="board")


@ui.get("/work-items/<path:ref>")
def work_item(ref: str) -> Response:
    """One work item: graph, hooks, decisions, forced moves, sessions, timeline."""
    model = web().model
    parsed = WorkItemRef.parse_or_none(ref)
    state = model.state(parsed.format()) if parsed is not None else None
    if state is None:
        return page("message.html", "Not found", status=404,
                    message="No such work item. The board lists every one.")
    detail = model.detail(state)
    graph = model.graph
    log = model.events_of(state.ref)
    past = Past.of(log, state.legacy)
    overlay = Overlay(ref=state.ref, current=state.current_node,
                      visited=tuple(str(h.get("node")) for h in past.history),
                      forced=tuple(str(m.get("to")) for m in past.forced),
                      status=str(state.status))
    events = [{"seq": e.seq, "type": e.type, "at": timestamp(e.at), "caused_by": e.caused_by,
               "attrs": attributes(metadata(e.data))}
              for e in reversed(log[-TIMELINE_LIMIT:])]
    path = " → ".join(str(h.get("node")) for h in past.history)
    return page("work_item.html", f"{parsed}", item=detail, mermaid_text=to_mermaid(
        graph, overlay), path=path, events=events, earlier=max(0, len(log) - TIMELINE_LIMIT),
        mermaid=True, active="board")


@ui.get("/deliveries/failed")
def deliveries() -> Response:
    """Parked deliveries, each with ``the-loop deliveries retry ID`` to copy."""
    return page("deliveries.html", "Failed deliveries", failed=web().model.failed(),
                active="deliveries")


@ui.get("/vendor/<name>")
def vendor(name: str) -> Response:
    """A vendored npm file (Mermaid), or 404 when ``make venv`` has not installed it."""
    relative = VENDOR.get(name)
    if relative is None:
        raise NotFound()
    path = Path(web().settings.dashboard.mermaid_dir) / relative
    if not path.is_file():
        raise NotFound()
    return send_file(path, mimetype="text/javascript", max_age=3600)


# -- signing in ---------------------------------------------------------------------------


def _controls(value: str | None) -> bool:
    """Whether ``value`` holds a control character (CR, LF, NUL...): such a ``next`` can
    never be a ``Location`` header (werkzeug refuses a header value with a newline)."""
    return any(ord(char) < 0x20 or ord(char) == 0x7F for char in value or "")


def _next(value: str | None) -> str:
    """A place on the dashboard to go after signing in (never another site, never a
    value with control characters)."""
    if value and value.startswith(f"{links.UI_PREFIX}/") and not value.startswith("//") \
            and "\\" not in value and not _controls(value):
        return value
    return f"{links.UI_PREFIX}/"


def _same_origin() -> bool:
    """A form post from this site (``Origin``, else ``Sec-Fetch-Site``): a sign-in or
    sign-out another site made the browser send is refused."""
    origin = request.headers.get("Origin")
    if origin:
        # The host, not the scheme: behind a proxy that ends TLS the request is http.
        public = web().settings.dashboard.public_url
        return (urllib.parse.urlsplit(origin).netloc == request.host
                or (public is not None and origin.rstrip("/") == public))
    return request.headers.get("Sec-Fetch-Site", "same-origin") in ("same-origin", "none")


def _signed_in(principal: Principal, next_path: str,
               token: str | None = None) -> BaseResponse:
    response = redirect(_next(next_path), 303)
    response.set_cookie(SESSION_COOKIE, web().auth.session_value(principal, token),
                        **cookie_options(web().settings.dashboard.session_ttl))
    log.info("dashboard: %s signed in (%s)", principal.name, principal.kind)
    return response


@ui.get("/login")
def login() -> Response:
    """The sign-in page: a token of ``THE_LOOP_API_TOKENS``, or "Sign in with GitHub"."""
    return page("login.html", "Sign in", next=_next(request.args.get("next")),
                configured=web().auth.configured)


@ui.post("/login")
def login_token() -> ResponseReturnValue:
    """Sign in with a token: 303 to the page asked for, or the sign-in page again."""
    if _controls(request.form.get("next")):
        return page("login.html", "Sign in", status=400, next=f"{links.UI_PREFIX}/",
                    configured=web().auth.configured,
                    error="The page to go to after signing in is not a dashboard path.")
    next_path = _next(request.form.get("next"))
    if not _same_origin():
        return page("login.html", "Sign in", status=403, next=next_path,
                    configured=web().auth.configured, error="Sign in from this site's page.")
    token = request.form.get("token", "").strip()
    principal = web().auth.token(token)
    if principal is None:
        return page("login.html", "Sign in", status=401, next=next_path,
                    configured=web().auth.configured,
                    error="That token is not one of THE_LOOP_API_TOKENS.")
    return _signed_in(principal, next_path, token)


@ui.post("/logout")
def logout() -> ResponseReturnValue:
    """End the session."""
    response = redirect(f"{links.UI_PREFIX}/login", 303)
    if _same_origin():
        response.delete_cookie(SESSION_COOKIE, path="/", secure=True, httponly=True,
                               samesite="Lax")
    return response


@ui.get("/auth/github")
def github_start() -> ResponseReturnValue:
    """To GitHub's authorize page, with a fresh ``state`` kept in a signed cookie."""
    oauth = web().oauth
    if oauth is None:
        return page("message.html", "Sign in", status=404,
                    message="Sign in with GitHub is not configured (THE_LOOP_GITHUB_CLIENT_ID).")
    state, cookie = web().auth.oauth_start(_next(request.args.get("next")))
    response = redirect(oauth.authorize_url(state), 302)
    response.set_cookie(OAUTH_COOKIE, cookie, **{**cookie_options(OAUTH_TTL),
                                                 "path": f"{links.UI_PREFIX}/auth/"})
    return response


@ui.get("/auth/github/callback")
def github_callback() -> ResponseReturnValue:
    """GitHub sends the person back here: check ``state``, exchange ``code``, check the
    membership, start the session (403 when the person is not a member)."""
    oauth = web().oauth
    if oauth is None:
        raise NotFound()
    next_path = web().auth.oauth_finish(request.cookies.get(OAUTH_COOKIE),
                                        request.args.get("state"))
    code = request.args.get("code")
    if next_path is None or not code:
        return page("login.html", "Sign in", status=400, next=f"{links.UI_PREFIX}/",
                    configured=True, error="The sign-in with GitHub did not complete "
                    "(it was refused, expired or came from elsewhere); sign in again.")
    try:
        login_name, allowed = oauth.sign_in(code)
    except OAuthError as exc:
        log.warning("dashboard: sign-in with GitHub failed: %s", exc)
        return page("login.html", "Sign in", status=502, next=next_path, configured=True,
                    error=str(exc))
    if not allowed:
        log.warning("dashboard: %s signed in with GitHub but is not a member of %s",
                    login_name, ", ".join(web().settings.dashboard.github_members))
        return page("login.html", "Sign in", status=403, next=next_path, configured=True,
                    error=f"@{login_name} is not a member of an organization or team "
                          "allowed to read the-loop (THE_LOOP_UI_GITHUB_MEMBERS).")
    response = _signed_in(Principal("github", login_name), next_path)
    response.delete_cookie(OAUTH_COOKIE, path=f"{links.UI_PREFIX}/auth/")
    return response
