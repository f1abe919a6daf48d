"""``the-loop sandbox``: run the embedded sandbox (a local stand-in for GitHub), prepare
the-loop's settings for it, and act in it as a person would on GitHub.

::

    the-loop sandbox [--port 8765] [--dir .dev/sandbox] [--webhook-url URL]
    the-loop sandbox prepare [--dir .dev/sandbox]     # shell lines for `make run`
    the-loop sandbox issue create TITLE [--label L]... [--body B] [--as LOGIN]
    the-loop sandbox comment REF BODY [--as LOGIN]
    the-loop sandbox review REF approve|request-changes [--body B] [--as LOGIN]
    the-loop sandbox label REF L [--as LOGIN]
    the-loop sandbox merge REF [--method squash|merge|rebase] [--as LOGIN]
    the-loop sandbox show REF [--json]

The commands find the running sandbox at ``$THE_LOOP_SANDBOX_URL``, else
``http://127.0.0.1:$THE_LOOP_SANDBOX_PORT``, else where the running sandbox of
``$THE_LOOP_SANDBOX_DIR`` (default ``.dev/sandbox``) says it answers (its ``url`` file:
``make run`` with another port, from another terminal), else port 8765; and its admin
token in that directory's ``admin-token`` (:func:`the_loop.sandbox.directory.
sandbox_url` is the one owner of this).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from foundation.signing import ENV_SIGNING_KEY_FILE, load_signer
from integrations.harness.base import HarnessMissing
from integrations.harness.factory import version_of
from integrations.harness.process import probe_env, probe_version
from the_loop.cli.base import main
from the_loop.sandbox import directory as files
from the_loop.sandbox.directory import DEFAULT_DIR, DEFAULT_PORT, ENV_DIR, ENV_PORT, ENV_URL

ENV_USER = "THE_LOOP_SANDBOX_USER"
#: ``THE_LOOP_HARNESS`` values that replace the demo agent when their CLI is on PATH.
REAL_HARNESSES = {"claude-code": "claude", "codex": "codex"}


def _directory(value: str | None) -> Path:
    return files.directory(os.environ, value)


def local_user() -> str:
    """The sandbox's person: ``$THE_LOOP_SANDBOX_USER``, else the local user name made a
    valid GitHub login (``you`` when nothing is left)."""
    raw = os.environ.get(ENV_USER) or getpass.getuser() or "you"
    login = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9-]", "-", raw)).strip("-")[:39]
    return login or "you"


@main.group("sandbox", invoke_without_command=True)
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help=f"TCP port of the sandbox's GitHub [${ENV_PORT} or {DEFAULT_PORT}].")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--dir", "directory", default=None,
              help=f"State directory (git repositories, admin token) [${ENV_DIR} or "
                   f"{DEFAULT_DIR}].")
@click.option("--webhook-url", default=None,
              help="Where deliveries go [http://127.0.0.1:$PORT/webhook, $PORT of the "
                   "receiver, default 8080].")
@click.pass_context
def sandbox(ctx: click.Context, port: int | None, host: str, directory: str | None,
            webhook_url: str | None) -> None:
    """The embedded sandbox: a local GitHub stand-in that serves the REST API and git
    over HTTP the-loop uses, seeds a demo repository, and sends signed webhook
    deliveries to the receiver for everything that happens in it."""
    if ctx.invoked_subcommand is not None:
        return
    port = port or configured_port()
    from the_loop.sandbox.server import DEMO_REPO, build, serve_forever

    secret = os.environ.get("THE_LOOP_WEBHOOK_SECRET", "").split(",")[0].strip()
    if not secret:
        raise click.ClickException("THE_LOOP_WEBHOOK_SECRET is not set: the sandbox signs "
                                   "its deliveries with it (the receiver's secret)")
    url = webhook_url or f"http://127.0.0.1:{os.environ.get('PORT') or 8080}/webhook"
    user = local_user()
    try:
        signer = load_signer(None, os.environ.get(ENV_SIGNING_KEY_FILE))
        box = build(_directory(directory), user=user, webhook_url=url, secret=secret,
                    base_url=f"http://{host}:{port}",
                    public_key=signer.public_pem() if signer else None)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"the-loop sandbox: GitHub stand-in on http://{host}:{port} (repository "
               f"{DEMO_REPO}, approver {user}); deliveries to {url}", err=True)
    serve_forever(box, host, port)


@sandbox.command("prepare")
@click.option("--dir", "directory", default=None, help="State directory.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help=f"TCP port the sandbox will serve on [${ENV_PORT} or {DEFAULT_PORT}].")
def prepare(directory: str | None, port: int | None) -> None:
    """Write the-loop's settings for the sandbox (cli-config.yaml with the runner and the
    harness, a locally generated App key, the review records' signing key, the webhook
    secret, the person's GitHub token, the dashboard's token) into the state directory
    and print the shell lines that point the-loop at it (``eval`` them). Besides the
    exported variables, two shell variables for ``make run`` to print:
    ``sandbox_git_remote`` (the demo repository's git URL with the person's login and
    token) and ``sandbox_api_token_file`` (the file holding the dashboard's token, a
    ``THE_LOOP_API_TOKENS`` token)."""
    port = port or configured_port()
    import yaml

    from the_loop.sandbox.server import DEMO_REPO

    base = _directory(directory)
    base.mkdir(parents=True, exist_ok=True)
    key_path = files.app_key(base)
    user_token = files.user_token(base)
    files.api_token(base)
    signing_path = base / "signing-key.pem"
    if not signing_path.exists():  # the review records' key: the service's only
        from graph.signing import Signer
        from the_loop.cli.signing_keys import write_private_key

        write_private_key(signing_path, Signer.generate())
    secret = os.environ.get("THE_LOOP_WEBHOOK_SECRET", "")
    if not secret:
        import secrets

        secret = files.secret(base / files.WEBHOOK_SECRET, lambda: secrets.token_hex(32))
    harness, why = _harness()
    config = {"version": 2, "harness": {"turnTimeout": 300, "idleTimeout": 120,
                                        "maxTurns": 5, **harness},
              "runner": {"concurrency": 1, "workspaceDir": str(base / "workspaces"),
                         "homeDir": str(base / "home"), "lease": 10,
                         "gitUrl": f"{files.local_url(port)}/{{repo}}.git"}}
    config_path = base / "cli-config.yaml"
    config_path.write_text("# Written by `the-loop sandbox prepare` (make run, sandbox "
                           "mode).\n" + yaml.safe_dump(config, sort_keys=False))
    url = files.local_url(port)
    user = local_user()
    lines = {"THE_LOOP_CONFIG": str(config_path),
             "THE_LOOP_GITHUB_API_URL": url,
             "THE_LOOP_GITHUB_APP_ID": str(files.APP_ID),
             "THE_LOOP_GITHUB_PRIVATE_KEY_PATH": str(key_path),
             ENV_SIGNING_KEY_FILE: str(signing_path),
             "THE_LOOP_WEBHOOK_SECRET": secret,
             ENV_URL: url,
             ENV_DIR: str(base),
             ENV_USER: user}
    for name, value in lines.items():
        click.echo(f"export {name}={shlex.quote(value)}")
    host = url.removeprefix("http://")
    shown = {"sandbox_git_remote": f"http://{user}:{user_token}@{host}/{DEMO_REPO}.git",
             "sandbox_api_token_file": _shown_path(base / files.API_TOKEN)}
    for name, value in shown.items():
        click.echo(f"{name}={shlex.quote(value)}")
    if harness["adapter"] == "command":
        click.echo("unset THE_LOOP_HARNESS THE_LOOP_HARNESS_BINARY")
    click.echo(f"echo {shlex.quote('the-loop: harness: ' + why)}")


def _shown_path(path: Path) -> str:
    """``path`` as a person types it here: relative to the working directory when it is
    under it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _harness() -> tuple[dict[str, Any], str]:
    """The harness settings of the sandbox: ``claude-code`` or ``codex`` when chosen with
    ``THE_LOOP_HARNESS`` and on ``PATH`` (its version pinned as it prints it), else the
    demo agent."""
    chosen = (os.environ.get("THE_LOOP_HARNESS") or "").lower()
    binary = REAL_HARNESSES.get(chosen)
    found = shutil.which(binary) if binary else None
    if binary and found:
        try:
            version = version_of(probe_version(found, probe_env(os.environ.get("PATH"))))
        except HarnessMissing:
            version = ""
        if version:
            return ({"adapter": chosen, "binary": found, "version": version},
                    f"{chosen} {version} ({found}), chosen with THE_LOOP_HARNESS")
    from the_loop.sandbox.demo_agent import VERSION

    reason = ("the demo agent (no model; THE_LOOP_HARNESS=claude-code or codex with its "
              "CLI on PATH uses that instead)")
    if chosen and chosen not in ("command",):
        reason = f"the demo agent ({chosen} was chosen but {binary or chosen} is not on PATH)"
    return ({"adapter": "command", "version": VERSION,
             "argv": [str(Path(sys.executable).with_name("the-loop-demo-agent"))]}, reason)


# -- acting in the sandbox ---------------------------------------------------------------


def sandbox_url() -> str:
    """Where the running sandbox answers (:func:`the_loop.sandbox.directory.sandbox_url`
    over this process's environment).

    Raises:
        click.ClickException: ``THE_LOOP_SANDBOX_PORT`` is not a TCP port (1-65535).
    """
    try:
        return files.sandbox_url(os.environ, _directory(None))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def configured_port() -> int:
    """``$THE_LOOP_SANDBOX_PORT``, or 8765 when it is unset or empty.

    Raises:
        click.ClickException: it is not a TCP port (1-65535).
    """
    try:
        return files.configured_port(os.environ)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _call(method: str, path: str, **payload: Any) -> dict[str, Any]:
    import requests

    url = sandbox_url()
    token_file = _directory(None) / files.ADMIN_TOKEN
    try:
        token = token_file.read_text(encoding="utf-8").strip()
    except OSError:
        raise click.ClickException(
            f"no sandbox admin token at {token_file}: start the sandbox (make run, or "
            f"the-loop sandbox), or set {ENV_DIR} to its directory") from None
    try:
        answer = requests.request(method, f"{url}/_sandbox{path}", timeout=10,
                                  headers={"Authorization": f"token {token}"},
                                  params=payload if method == "GET" else None,
                                  json=None if method == "GET" else payload)
    except requests.RequestException as exc:
        raise click.ClickException(f"the sandbox at {url} is not answering "
                                   f"({type(exc).__name__}): start it with make run, or "
                                   f"set {ENV_URL}") from None
    try:
        data = answer.json()
    except ValueError:
        data = {"message": answer.text[:200]}
    if answer.status_code >= 400:
        raise click.ClickException(f"sandbox: {data.get('message', answer.status_code)}")
    return dict(data)


def _as(login: str | None) -> dict[str, Any]:
    return {"as": login} if login else {}


AS_OPTION = click.option("--as", "login", default=None,
                         help="Act as this GitHub login [the sandbox's user].")


@sandbox.group("issue")
def issue_group() -> None:
    """Issues in the sandbox."""


@issue_group.command("create")
@click.argument("title")
@click.option("--label", "labels", multiple=True, help="A label to add (repeatable).")
@click.option("--body", default="", help="The issue's text.")
@AS_OPTION
def issue_create(title: str, labels: tuple[str, ...], body: str, login: str | None) -> None:
    """Open an issue in the demo repository (issues.opened, then issues.labeled)."""
    done = _call("POST", "/issues", title=title, body=body, labels=list(labels), **_as(login))
    shown = f" with {', '.join(labels)}" if labels else ""
    click.echo(f"opened {done['ref']}{shown}")


@sandbox.command("comment")
@click.argument("ref")
@click.argument("body")
@AS_OPTION
def comment(ref: str, body: str, login: str | None) -> None:
    """Comment on issue or pull request REF (issue_comment.created)."""
    done = _call("POST", "/comment", ref=ref, body=body, **_as(login))
    click.echo(f"commented on {done['ref']} (comment {done['id']})")


@sandbox.command("review")
@click.argument("ref")
@click.argument("decision", type=click.Choice(["approve", "request-changes"]))
@click.option("--body", default="", help="The review's text.")
@AS_OPTION
def review(ref: str, decision: str, body: str, login: str | None) -> None:
    """Review pull request REF (pull_request_review.submitted)."""
    done = _call("POST", "/review", ref=ref, state=decision, body=body, **_as(login))
    click.echo(f"reviewed {done['ref']}: {decision} (review {done['id']})")


@sandbox.command("merge")
@click.argument("ref")
@click.option("--method", type=click.Choice(["squash", "merge", "rebase"]),
              default="squash", show_default=True, help="GitHub's merge method.")
@AS_OPTION
def merge(ref: str, method: str, login: str | None) -> None:
    """Merge pull request REF at its head, as a person pressing GitHub's merge button
    (pull_request.closed with merged: true, the push to the base branch, issues.closed
    for each Closes #N of its body)."""
    done = _call("POST", "/merge", ref=ref, merge_method=method, **_as(login))
    click.echo(f"merged {done['ref']} ({done['merge_method']}): {done['sha'][:12]}")


@sandbox.command("label")
@click.argument("ref")
@click.argument("label")
@AS_OPTION
def label(ref: str, label: str, login: str | None) -> None:
    """Add LABEL to issue or pull request REF (issues.labeled / pull_request.labeled)."""
    done = _call("POST", "/label", ref=ref, label=label, **_as(login))
    click.echo(f"labelled {done['ref']}: {', '.join(done['labels'])}")


@sandbox.command("show")
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def show(ref: str, as_json: bool) -> None:
    """Labels, comments, branches and pull requests of REF."""
    data = _call("GET", "/show", ref=ref)
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    click.echo(f"{data['ref']}  {data['title']}  ({data['kind']}, {data['state']})")
    click.echo(f"labels: {', '.join(data['labels']) or '-'}")
    click.echo(f"branches: {', '.join(sorted(data['branches'])) or '-'}")
    for pr in data["pull_requests"]:
        reviews = ", ".join(f"{v['user']} {v['state'].lower()}" for v in pr["reviews"])
        click.echo(f"pull request #{pr['number']}: {pr['head']} -> {pr['base']} "
                   f"({pr['state']})"
                   + (f"; reviews: {reviews}" if reviews else ""))
    click.echo(f"comments: {len(data['comments'])}")
    for c in data["comments"]:
        first = next((line for line in c["body"].splitlines()
                      if line.strip() and not line.startswith("<!--")), "")
        click.echo(f"  {c['user']}: {first[:100]}")
