"""The GitHub App manifest (``app.yml``) and the ways ``the-loop app manifest`` prints it.

The manifest ships inside the package (``the_loop/app.yml``), so an installed the-loop
prints it without the repository. Its fields are the ones of GitHub's "Registering a
GitHub App from a manifest" docs: GitHub expects the manifest as JSON, POSTed as the form
field ``manifest`` to ``https://github.com/settings/apps/new`` (an organization's:
``/organizations/ORG/settings/apps/new``), then redirects to ``redirect_url`` with a
one-time ``code`` that ``POST /app-manifests/{code}/conversions`` exchanges for the App's
id, private key and webhook secret.
"""

from __future__ import annotations

import html
import json
import secrets
from importlib import resources
from typing import Any
from urllib.parse import quote, urlsplit

import yaml

from graph.errors import LoopError

MANIFEST_FILE = "app.yml"


class ManifestError(LoopError, ValueError):
    """An override does not fit the manifest (the message says which and why)."""


def manifest_text() -> str:
    """``app.yml`` exactly as shipped, comments included."""
    return resources.files("the_loop").joinpath(MANIFEST_FILE).read_text(encoding="utf-8")


def load_manifest() -> dict[str, Any]:
    """The shipped manifest as a dict."""
    data = yaml.safe_load(manifest_text())
    if not isinstance(data, dict):  # pragma: no cover - the shipped file is a mapping
        raise ManifestError(f"{MANIFEST_FILE} is not a mapping")
    return data


def _https_url(option: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ManifestError(f"{option} must be a full URL such as https://loop.example.com/webhook")
    return value


def customised(
    *,
    name: str | None = None,
    url: str | None = None,
    webhook_url: str | None = None,
    redirect_url: str | None = None,
) -> dict[str, Any]:
    """The manifest with the given fields replaced (``None`` keeps the shipped value).

    With ``webhook_url`` given, ``url`` and ``redirect_url`` default to that host's root
    (``https://HOST/``) instead of the shipped placeholders.
    """
    doc = load_manifest()
    if webhook_url is not None:
        parts = urlsplit(_https_url("--webhook-url", webhook_url))
        root = f"{parts.scheme}://{parts.netloc}/"
        url = root if url is None else url
        redirect_url = root if redirect_url is None else redirect_url
    if name is not None:
        if not name.strip() or len(name) > 34:
            raise ManifestError("--name must be 1 to 34 characters (GitHub's limit for App names)")
        doc["name"] = name
    if url is not None:
        doc["url"] = _https_url("--url", url)
    if webhook_url is not None:
        doc["hook_attributes"] = {**doc.get("hook_attributes", {}),
                                  "url": _https_url("--webhook-url", webhook_url)}
    if redirect_url is not None:
        doc["redirect_url"] = _https_url("--redirect-url", redirect_url)
    return doc


def registration_url(github_url: str = "https://github.com", org: str | None = None) -> str:
    """Where the manifest form is POSTed: the user's or an organization's "new App" page."""
    base = _https_url("--github-url", github_url).rstrip("/")
    if org:
        return f"{base}/organizations/{quote(org, safe='')}/settings/apps/new"
    return f"{base}/settings/apps/new"


def html_form(doc: dict[str, Any], action: str, state: str | None = None) -> str:
    """A page whose button POSTs ``doc`` to GitHub's "new App" page (the manifest flow)."""
    state = state or secrets.token_urlsafe(16)
    manifest_json = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    target = f"{action}?state={quote(state, safe='')}"
    redirect = html.escape(str(doc.get("redirect_url")))
    return f"""<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Register {html.escape(str(doc.get("name")))}</title></head>
<body>
<h1>Register the GitHub App {html.escape(str(doc.get("name")))}</h1>
<p>The button sends this manifest to {html.escape(action)}. GitHub shows the App's name
(change it there if it is taken), creates the App, then redirects to
{redirect} with <code>?code=...&amp;state={html.escape(state)}</code>
in the address bar (the page itself need not load). Exchange that code within one hour:
see docs/install.md.</p>
<form action="{html.escape(target)}" method="post">
<input type="hidden" name="manifest" value="{html.escape(manifest_json)}">
<input type="submit" value="Create GitHub App">
</form>
<pre>{html.escape(json.dumps(doc, indent=2, sort_keys=True))}</pre>
</body>
</html>
"""
