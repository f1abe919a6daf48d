"""What every route of the fake GitHub's HTTP front shares: the fake serving the request
(:func:`fake`), GitHub's error answer (:func:`error`) and the validation answers built on
it, the ``Authorization`` header's parts (:func:`auth_kind`), the
API and web roots of the request (:func:`api_base`, :func:`web_base`), GitHub's
pagination (:func:`paged`) and the paths the request gate treats apart.

Call these only while Flask serves a request (they read :data:`flask.request` and
:data:`flask.current_app`).
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from flask import Response, current_app, g, jsonify, request

from graph.ports import REACTIONS
from the_loop.sandbox.fakegithub.store import Repo

if TYPE_CHECKING:
    from the_loop.sandbox.fakegithub.http.fake import HttpFakeState

__all__ = [
    "APP_PATH", "DOCS", "EXTENSION", "GHES_PREFIX", "GIT_PATH", "MANIFEST_PATH", "api_base",
    "auth_kind", "b64_lines", "created", "error", "fake", "invalid_reaction", "invalid_request",
    "json_body",
    "lookup", "missing_field", "needs_app", "not_found", "paged",
    "reaction_content", "requires_login", "validation_failed", "web_base",
]

#: The path prefix of the GitHub Enterprise Server layout (every API route is also there).
GHES_PREFIX = "/api/v3"
#: The ``documentation_url`` of every error answer.
DOCS = "https://docs.github.com/rest"
#: The key of :attr:`flask.Flask.extensions` that holds the fake an app serves.
EXTENSION = "fake_github"
#: The manifest flow's paths: the "new App" form and the code conversion.
MANIFEST_PATH = re.compile(r"(^(/organizations/[^/]+)?/settings/apps/new$)"
                           r"|(/app-manifests/[^/]+/conversions$)")
#: "Get the authenticated app" (a JWT, checked by the route).
APP_PATH = re.compile(r"^(/api/v3)?/app$")
#: Git's smart HTTP paths: ``/{owner}/{name}.git/{service path}`` (groups: owner, name,
#: the service path); the sandbox matches pushes with it too.
GIT_PATH = re.compile(r"^/([A-Za-z0-9._-]+)/([A-Za-z0-9._-]+)\.git(/.*)$")


def fake() -> HttpFakeState:
    """The fake whose app serves the current request (kept in the app's extensions by
    :func:`the_loop.sandbox.fakegithub.http.factory.create_app`)."""
    return cast("HttpFakeState", current_app.extensions[EXTENSION])


# -- answers --------------------------------------------------------------------------


def error(status: int, message: str, **extra: Any) -> Response:
    """GitHub's error answer: ``{"message", "documentation_url", **extra}`` with
    ``status``."""
    resp = jsonify({"message": message, "documentation_url": DOCS, **extra})
    resp.status_code = status
    return resp


def not_found() -> Response:
    """404 ``Not Found``, GitHub's answer for anything missing or hidden."""
    return error(404, "Not Found")


def invalid_request() -> Response:
    """422 ``Invalid request.``, GitHub's answer for a body of the wrong shape."""
    return error(422, "Invalid request.")


def validation_failed(resource: str, code: str, field: str | None = None, **more: str
                      ) -> Response:
    """422 ``Validation Failed`` with one entry in ``errors``: ``{"resource", "code",
    "field"}`` (``field`` left out when ``None``) plus ``more`` (e.g. ``message``)."""
    entry = {"resource": resource, "code": code}
    if field is not None:
        entry["field"] = field
    return error(422, "Validation Failed", errors=[entry | more])


def missing_field(resource: str, field: str) -> Response:
    """422 ``Validation Failed``: ``field`` of ``resource`` is missing (``missing_field``)."""
    return validation_failed(resource, "missing_field", field)


def created(resp: Response) -> Response:
    """``resp`` with status 201 Created."""
    resp.status_code = 201
    return resp


# -- the request ----------------------------------------------------------------------


def json_body() -> Any:
    """The request's JSON body, or ``None`` when it has none or it does not parse."""
    return request.get_json(silent=True)


def reaction_content() -> str | None:
    """The ``content`` of a "create reaction" body when it is one of GitHub's reactions,
    else ``None`` (answer :func:`invalid_reaction`)."""
    body = json_body()
    content = body.get("content") if isinstance(body, dict) else None
    return content if content in REACTIONS else None


def invalid_reaction() -> Response:
    """422 for a reaction whose ``content`` is not one of GitHub's."""
    return validation_failed("Reaction", "invalid", "content")


def lookup(owner: str, name: str) -> Repo | None:
    """Repository ``owner/name`` of the fake, if it exists (case-insensitive)."""
    return fake().lookup(f"{owner}/{name}")


def needs_app() -> Response | None:
    """403 unless an installation token authenticated the request (check runs are the
    App's), else ``None``."""
    if g.installation is None:
        return error(403, "You must authenticate via a GitHub App.")
    return None


def requires_login() -> Response | None:
    """401 unless a token named who is asking, else ``None``."""
    if g.login is None:
        return error(401, "Requires authentication")
    return None


def auth_kind(header: str | None) -> tuple[str, str]:
    """``(kind, credential)`` of an ``Authorization`` header: kind is ``bearer``,
    ``token``, ``basic``, ``other`` or ``none`` (no header, credential ``""``)."""
    if not header:
        return "none", ""
    scheme, _, value = header.partition(" ")
    kind = scheme.lower()
    return (kind if kind in ("bearer", "token", "basic") else "other"), value.strip()


# -- rendering --------------------------------------------------------------------------


def api_base() -> str:
    """The API root of the request: ``http://host:port``, plus ``/api/v3`` when the
    request came in the GHES layout."""
    prefix = GHES_PREFIX if request.path.startswith(GHES_PREFIX + "/") else ""
    return request.host_url.rstrip("/") + prefix


def web_base() -> str:
    """The web root of the request (``http://host:port``)."""
    return request.host_url.rstrip("/")


def b64_lines(data: bytes) -> str:
    """``data`` in base64, 60 characters a line, each ending in a newline (as GitHub
    sends a file's or blob's ``content``)."""
    text = base64.b64encode(data).decode("ascii")
    return "".join(text[i : i + 60] + "\n" for i in range(0, len(text), 60))


def paged(
    items: list[Any],
    to_json: Callable[[Any], Any],
    envelope: Callable[[list[Any]], Any] | None = None,
) -> Response:
    """One page of ``items`` (``per_page``/``page`` query) with GitHub's Link header;
    other query parameters are kept in the links.

    Args:
        to_json: renders one item.
        envelope: wraps the page's rendered items (e.g. ``{"total_count", ...}``);
            ``None``: the page is a JSON array.

    Returns:
        the page, or 422 ``Invalid pagination`` for a ``per_page``/``page`` that is not
        a number.
    """
    try:
        per_page = max(1, min(100, int(request.args.get("per_page", 30))))
        page = max(1, int(request.args.get("page", 1)))
    except ValueError:
        return error(422, "Invalid pagination")
    chunk = [to_json(x) for x in items[(page - 1) * per_page : page * per_page]]
    resp = jsonify(envelope(chunk) if envelope else chunk)
    last = max(1, -(-len(items) // per_page))
    url = f"{api_base()}{request.path.removeprefix(GHES_PREFIX)}"
    extra = "".join(
        f"&{urllib.parse.quote(k)}={urllib.parse.quote(v)}"
        for k, v in request.args.items()
        if k not in ("per_page", "page")
    )
    links = []
    if page < last:
        links.append(f'<{url}?per_page={per_page}&page={page + 1}{extra}>; rel="next"')
        links.append(f'<{url}?per_page={per_page}&page={last}{extra}>; rel="last"')
    if page > 1:
        links.append(f'<{url}?per_page={per_page}&page={page - 1}{extra}>; rel="prev"')
        links.append(f'<{url}?per_page={per_page}&page=1{extra}>; rel="first"')
    if links:
        resp.headers["Link"] = ", ".join(links)
    return resp
