"""The App's own endpoints: installation access tokens, "Get the authenticated app", and
the manifest flow ("Registering a GitHub App from a manifest").

:data:`bp` is served at the API root (and under ``/api/v3``); :data:`web` only on the web
host. Installation tokens: ``POST /app/installations/{id}/access_tokens`` needs
``Authorization: Bearer <JWT>``, a JWT GitHub would take from the App (RS256-signed with
the App's key, ``iat``/``exp``/``iss`` checked as GitHub does: :meth:`~the_loop.sandbox.
fakegithub.http.fake.HttpFakeState.app_jwt_refusal`), and issues a random ``ghs_...``
token valid for one hour; ``GET /app`` takes the same JWT.

The manifest flow: the web form (``POST /settings/apps/new`` or
``/organizations/{org}/settings/apps/new`` with the form field ``manifest`` and
``?state=``) creates the App at once (no page to confirm) and redirects to the manifest's
``redirect_url`` with a one-time ``code`` and the ``state``; ``POST
/app-manifests/{code}/conversions`` (no authentication) answers 201 with the App's id,
client id and secret, webhook secret and private key (``pem``), once; an unknown or used
code is 404.
"""

from __future__ import annotations

import json
import random
import re
import urllib.parse
import zlib
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, Response, jsonify, request

from the_loop.sandbox.fakegithub.http.common import (
    auth_kind,
    created,
    error,
    fake,
    not_found,
    web_base,
)
from the_loop.sandbox.fakegithub.http.fake import BAD_JWT
from the_loop.sandbox.fakegithub.http.shapes import user_json

__all__ = ["bp", "web"]

bp = Blueprint("apps", __name__)
web = Blueprint("app_forms", __name__)


@bp.post("/app/installations/<int:installation_id>/access_tokens")
def access_token(installation_id: int) -> Response:
    """"Create an installation access token for an app": 401 (GitHub's message) without
    a JWT the App signed, with a bad ``iat``/``exp`` or another App's ``iss``; 404 for an
    installation the fake does not have, 403 for a suspended one."""
    gh = fake()
    refused = app_jwt_refusal()
    if refused is not None:
        return refused
    with gh.lock:
        if not gh.has_installation(installation_id):
            return not_found()
        if gh.is_suspended(installation_id):
            return error(403, "This installation has been suspended")
        token = gh.issue_token(installation_id)
        until = gh.token_expires(token) or gh.clock()
    expires = datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return created(jsonify(
        {
            "token": token,
            "expires_at": expires,
            "permissions": {
                "issues": "write",
                "pull_requests": "write",
                "contents": "read",
                "metadata": "read",
            },
            "repository_selection": "all",
        }
    ))


@bp.get("/app")
def get_app() -> Response:
    """"Get the authenticated app": the App's JWT only (an installation token gets 401)."""
    gh = fake()
    refused = app_jwt_refusal()
    if refused is not None:
        return refused
    app_id = gh.app_id or 1
    slug = gh.bot_login.removesuffix("[bot]")
    return jsonify({
        "id": app_id, "slug": slug, "node_id": f"A_{app_id}", "name": slug,
        "owner": user_json(gh.user_login), "description": None,
        "external_url": web_base(), "html_url": f"{web_base()}/apps/{slug}",
        "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
        "permissions": {"issues": "write", "pull_requests": "write",
                        "contents": "write", "checks": "write", "metadata": "read"},
        "events": ["issues", "issue_comment", "pull_request", "pull_request_review"]})


def app_jwt_refusal() -> Response | None:
    """401 with GitHub's message unless the request's ``Authorization: Bearer`` is a JWT
    the App signed that GitHub would take now, else ``None``."""
    kind, credential = auth_kind(request.headers.get("Authorization"))
    reason = fake().app_jwt_refusal(credential) if kind == "bearer" else BAD_JWT
    return None if reason is None else error(401, reason)


# -- the manifest flow ------------------------------------------------------------------


@web.post("/organizations/<org>/settings/apps/new", endpoint="manifest_new_org_app")
@web.post("/settings/apps/new", endpoint="manifest_new_app")
def new_app(org: str | None = None) -> Response:
    """The "new App" form: 302 to the manifest's ``redirect_url`` with a one-time
    ``code`` (and the ``state``); 422 (plain text) for a manifest without ``url``,
    ``hook_attributes.url`` or an http(s) ``redirect_url``."""
    gh = fake()
    raw = request.form.get("manifest", "")
    try:
        manifest = json.loads(raw)
    except ValueError:
        manifest = None
    redirect = manifest.get("redirect_url") if isinstance(manifest, dict) else None
    hook = manifest.get("hook_attributes") if isinstance(manifest, dict) else None
    if (not isinstance(manifest, dict) or not isinstance(manifest.get("url"), str)
            or not isinstance(redirect, str) or not redirect.startswith(("http://",
                                                                          "https://"))
            or not isinstance(hook, dict) or not isinstance(hook.get("url"), str)):
        return Response("Invalid GitHub App configuration: the manifest needs url, "
                        "hook_attributes.url and redirect_url", status=422,
                        mimetype="text/plain")
    code = f"fake{gh.next_id()}x{random.randrange(16**8):08x}"
    with gh.lock:
        gh.manifests[code] = {"manifest": manifest, "owner": org or gh.user_login}
    query = urllib.parse.urlencode({"code": code, **({"state": request.args["state"]}
                                                     if "state" in request.args else {})})
    resp = Response(status=302)
    resp.headers["Location"] = f"{redirect}{'&' if '?' in redirect else '?'}{query}"
    return resp


@bp.post("/app-manifests/<code>/conversions")
def manifest_conversion(code: str) -> Response:
    """"Create a GitHub App from a manifest": 201 with the new App's credentials and a
    fresh RSA key, once per code; 404 for an unknown or used code."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    gh = fake()
    with gh.lock:
        found = gh.manifests.pop(code, None)
        app_id = gh.next_id()
    if found is None:
        return not_found()
    manifest, owner = found["manifest"], found["owner"]
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM,
                            serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption()).decode("ascii")
    name = str(manifest.get("name") or "the-loop")
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "app"
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return created(jsonify({
        "id": app_id, "slug": slug, "node_id": f"A_{app_id}", "client_id":
        f"Iv1.fake{app_id:08x}", "client_secret": f"fake{random.randrange(16**32):032x}",
        "webhook_secret": f"{random.randrange(16**40):040x}", "pem": pem,
        "owner": _owner_json(owner), "name": name, "description": manifest.get("description"),
        "external_url": manifest["url"],
        "html_url": f"{request.host_url.rstrip('/')}/apps/{slug}",
        "created_at": stamp, "updated_at": stamp,
        "permissions": dict(manifest.get("default_permissions") or {}),
        "events": list(manifest.get("default_events") or [])}))


def _owner_json(owner: str) -> dict[str, Any]:
    """The owner of an App made from a manifest (a short user, ids from the login)."""
    return {"login": owner, "id": zlib.crc32(owner.encode()) % 10**8,
            "node_id": f"U_{owner}", "type": "User", "site_admin": False,
            "url": f"{request.host_url.rstrip('/')}/users/{owner}",
            "html_url": f"{request.host_url.rstrip('/')}/{owner}"}
