"""OAuth, "Sign in with GitHub" (the web application flow of "Generating a user access
token for a GitHub App"), on the web host only (:data:`web`).

Register a client with
:meth:`~the_loop.sandbox.fakegithub.http.fake.HttpFakeState.add_oauth_app` and say who is
signed in with :meth:`~the_loop.sandbox.fakegithub.http.fake.HttpFakeState.sign_in_as`;
then ``GET /login/oauth/authorize`` approves at once and ``POST /login/oauth/access_token``
exchanges the code, once, for a ``ghu_...`` user access token.
"""

from __future__ import annotations

import urllib.parse

from flask import Blueprint, Response, jsonify, request

from the_loop.sandbox.fakegithub.http.common import fake

__all__ = ["web"]

web = Blueprint("oauth", __name__)


@web.get("/login/oauth/authorize")
def oauth_authorize() -> Response:
    """GitHub's authorize page, approving at once for whoever :meth:`sign_in_as`
    named: a redirect to ``redirect_uri`` with ``code`` and ``state`` (``error=
    access_denied`` when nobody is signed in); 404 (plain text) for an unknown client or
    a ``redirect_uri`` that is not http(s)."""
    gh = fake()
    client = request.args.get("client_id", "")
    redirect_uri = request.args.get("redirect_uri", "")
    with gh.lock:
        known = gh.oauth_client_known(client)
        login = gh.signed_in
    if not known or not redirect_uri.startswith(("http://", "https://")):
        return Response("Not Found", 404, mimetype="text/plain")
    query: dict[str, str] = {"state": request.args.get("state", "")}
    if login is None:
        query["error"] = "access_denied"
    else:
        query["code"] = gh.new_oauth_code(client, redirect_uri, login)
    separator = "&" if "?" in redirect_uri else "?"
    return Response(status=302, headers={
        "Location": f"{redirect_uri}{separator}{urllib.parse.urlencode(query)}"})


@web.post("/login/oauth/access_token")
def oauth_access_token() -> Response:
    """Exchange a code for a user access token, once; errors come with status 200
    and an ``error`` field, as GitHub sends them. JSON when the ``Accept`` header asks
    for it, else form-encoded."""
    gh = fake()
    sent = request.get_json(silent=True) if request.is_json else request.form
    form = sent if sent is not None and hasattr(sent, "get") else {}
    client, secret = form.get("client_id", ""), form.get("client_secret", "")
    code, redirect_uri = form.get("code", ""), form.get("redirect_uri")
    result = gh.exchange_oauth_code(client, secret, code, redirect_uri)
    if "json" in request.headers.get("Accept", ""):
        return jsonify(result)
    return Response(urllib.parse.urlencode(result), 200,
                    mimetype="application/x-www-form-urlencoded")
