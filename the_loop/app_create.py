"""``the-loop app create``: register the GitHub App with GitHub's manifest flow and write
its credentials to ``.env``.

GitHub docs, "Registering a GitHub App from a manifest": a page POSTs the manifest (form
field ``manifest``, JSON) to ``https://github.com/settings/apps/new`` (an organization's:
``/organizations/ORG/settings/apps/new``) with a ``state``; GitHub creates the App and
redirects to the manifest's ``redirect_url`` with ``?code=...&state=...``; ``POST
/app-manifests/{code}/conversions`` (within one hour, no authentication) answers the
App's ``id``, ``client_id``, ``client_secret``, ``webhook_secret`` and ``pem``.

Here the page and the redirect target are one local server on loopback
(``http://127.0.0.1:PORT/`` and ``/callback``); the state is checked, the code exchanged,
and ``.env`` (mode 0600) gets ``THE_LOOP_GITHUB_APP_ID``, ``THE_LOOP_GITHUB_CLIENT_ID``,
``THE_LOOP_GITHUB_CLIENT_SECRET``, ``THE_LOOP_WEBHOOK_SECRET`` and
``THE_LOOP_GITHUB_PRIVATE_KEY_PATH`` (the key file, mode 0600), plus
``THE_LOOP_GITHUB_API_URL`` for GitHub Enterprise Server. ``make run`` and every
``the-loop`` command read ``.env``.
"""

from __future__ import annotations

import html
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from flask import Flask, Response, request
from werkzeug.serving import make_server

from graph.errors import LoopError
from the_loop.manifest import customised, html_form, registration_url

__all__ = ["AppCreateError", "Registration", "api_url_for", "start", "write_env"]

#: Seconds the conversion request may take.
CONVERSION_TIMEOUT = 30.0


class AppCreateError(LoopError):
    """The manifest flow failed (the message says where and what to do)."""


def api_url_for(github_url: str) -> str:
    """The REST API root of a GitHub web URL: ``https://github.com`` ->
    ``https://api.github.com``; any other host (GitHub Enterprise Server, the loopback
    fake) -> ``{url}/api/v3``."""
    parts = urlsplit(github_url.rstrip("/"))
    if parts.hostname in ("github.com", "www.github.com"):
        return "https://api.github.com"
    return f"{github_url.rstrip('/')}/api/v3"


def _quote(value: str) -> str:
    """A value for ``.env`` (python-dotenv's single quotes: no expansion)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def write_env(env_file: Path, values: Mapping[str, str]) -> None:
    """Set ``values`` in ``env_file`` (mode 0600), keeping its other variables."""
    from dotenv import dotenv_values

    merged: dict[str, str] = {}
    if env_file.exists():
        merged = {k: v for k, v in dotenv_values(env_file).items() if v is not None}
    merged.update(values)
    env_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("# Written by `the-loop app create`; read by make run and the-loop.\n")
        for key, value in merged.items():
            handle.write(f"{key}={_quote(value)}\n")
    env_file.chmod(0o600)


@dataclass
class Registration:
    """A running manifest flow: open :attr:`url`; :meth:`wait` returns once the App's
    credentials are written (or the flow failed)."""

    url: str
    stop: Callable[[], None]
    done: threading.Event = field(default_factory=threading.Event)
    app: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    def wait(self, timeout: float) -> dict[str, Any]:
        """The App (``id``, ``slug``, ``html_url``, ``env_file``, ``key_file``).

        Raises:
            AppCreateError: the flow failed, or nothing came back within ``timeout``.
        """
        finished = self.done.wait(timeout)
        self.stop()
        if not finished:
            raise AppCreateError(f"no redirect from GitHub within {timeout:.0f} s: open "
                                 f"{self.url} and press the button (or raise --timeout)")
        if self.error:
            raise AppCreateError(self.error)
        return self.app


def start(*, github_url: str, org: str | None, webhook_url: str | None, env_file: Path,
          key_file: Path, api_url: str | None = None, host: str = "127.0.0.1",
          port: int = 0, name: str | None = None) -> Registration:
    """Serve the manifest flow's page and callback on ``host:port`` (0: a free port).

    Raises:
        the_loop.manifest.ManifestError: a bad ``--webhook-url``, ``--github-url`` or
            ``--name``.
    """
    app = Flask("the_loop_app_create")
    server = make_server(host, port, app, threaded=True)
    base = f"http://{host}:{server.port}"
    doc = customised(name=name, webhook_url=webhook_url, redirect_url=f"{base}/callback")
    if webhook_url is None:
        doc["url"] = base + "/"
    action = registration_url(github_url, org)
    state = secrets.token_urlsafe(24)
    api = (api_url or api_url_for(github_url)).rstrip("/")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True, name="app-create")

    def stop() -> None:
        server.shutdown()
        server.server_close()

    flow = Registration(url=f"{base}/", stop=stop)

    @app.get("/")
    def page() -> str:
        return html_form(doc, action, state)

    @app.get("/callback")
    def callback() -> Response:
        if not secrets.compare_digest(request.args.get("state", ""), state):
            return Response("state does not match this registration: start again with "
                            "`the-loop app create`", status=403, mimetype="text/plain")
        code = request.args.get("code", "")
        if not code or len(code) > 200:
            return Response("no code in the redirect", status=400, mimetype="text/plain")
        try:
            flow.app = _convert(api, code, env_file, key_file, api_url_for(github_url)
                                if api_url is None else api)
        except AppCreateError as exc:
            flow.error = str(exc)
            flow.done.set()
            return Response(str(exc), status=502, mimetype="text/plain")
        flow.done.set()
        slug = html.escape(str(flow.app.get("slug")))
        return Response(f"<!doctype html><p>GitHub App <b>{slug}</b> registered; its "
                        f"credentials are in {html.escape(str(env_file))}. Install it on "
                        f"a repository: <a href=\"{html.escape(str(flow.app.get('html_url')))}"
                        f"/installations/new\">install</a>. You can close this page.</p>",
                        mimetype="text/html")

    thread.start()
    return flow


def _convert(api: str, code: str, env_file: Path, key_file: Path,
             api_root: str) -> dict[str, Any]:
    try:
        answer = requests.post(f"{api}/app-manifests/{code}/conversions", timeout=
                               CONVERSION_TIMEOUT, headers={
                                   "Accept": "application/vnd.github+json",
                                   "X-GitHub-Api-Version": "2022-11-28"})
    except requests.RequestException as exc:
        raise AppCreateError(f"POST {api}/app-manifests/CODE/conversions failed "
                             f"({type(exc).__name__}); check --github-url") from None
    if answer.status_code != 201:
        raise AppCreateError(f"GitHub answered {answer.status_code} to the code "
                             "conversion (a code is valid once, for one hour): run "
                             "`the-loop app create` again")
    data = answer.json()
    missing = [k for k in ("id", "client_id", "client_secret", "webhook_secret", "pem")
               if not data.get(k)]
    if missing:
        raise AppCreateError(f"the conversion answer has no {', '.join(missing)}")
    key_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(str(data["pem"]))
    key_file.chmod(0o600)
    values = {"THE_LOOP_GITHUB_APP_ID": str(data["id"]),
              "THE_LOOP_GITHUB_CLIENT_ID": str(data["client_id"]),
              "THE_LOOP_GITHUB_CLIENT_SECRET": str(data["client_secret"]),
              "THE_LOOP_WEBHOOK_SECRET": str(data["webhook_secret"]),
              "THE_LOOP_GITHUB_PRIVATE_KEY_PATH": str(key_file.resolve())}
    if api_root != "https://api.github.com":
        values["THE_LOOP_GITHUB_API_URL"] = api_root
    write_env(env_file, values)
    return {"id": data["id"], "slug": data.get("slug"), "html_url": data.get("html_url"),
            "env_file": str(env_file), "key_file": str(key_file)}
