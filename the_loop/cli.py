"""``the-loop`` command line.

Every ``--json`` output is one object: ``{"schemaVersion": 1, "action", "ok", "status",
...}``. Exit status is 0 on success and non-zero on any failure.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from foundation.settings import Process, Settings
    from the_loop.wiring import Operator

SCHEMA_VERSION = 1


def emit(action: str, ok: bool, status: str, **fields: Any) -> None:
    """Print the one JSON object of a ``--json`` command."""
    doc = {"schemaVersion": SCHEMA_VERSION, "action": action, "ok": ok, "status": status}
    doc.update(fields)
    click.echo(json.dumps(doc, indent=2, sort_keys=True))


def read_settings(process: Process = "command") -> Settings:
    """The settings, read once from this process's environment (:mod:`foundation.settings`).

    Raises:
        click.ClickException: a setting is missing or invalid (the message names it and
            the fix).
    """
    from foundation.settings import Settings, SettingsError

    try:
        return Settings.from_env(os.environ, process=process)
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None


def open_operator(settings: Settings | None = None) -> Operator:
    """The commands' Redis, state and GitHub client (:func:`the_loop.wiring.build_operator`).

    Raises:
        click.ClickException: a bad setting.
    """
    from the_loop.wiring import build_operator

    settings = settings or read_settings()
    try:
        return build_operator(settings)
    except ValueError:  # redis-py refusing the URL: its text may quote a piece of it
        raise click.ClickException("REDIS_URL cannot be parsed; it must look like "
                                   "redis://HOST:PORT/DB") from None


def _setup_logging(settings: Settings) -> None:
    """JSON lines (``THE_LOOP_LOG_FORMAT=json``, the default) or text, on stdout, at
    ``THE_LOOP_LOG_LEVEL``; RQ's loggers included (see foundation/observability/logs.py)."""
    from foundation.observability.logs import configure

    configure(settings.logging)


#: The file of variables every command reads first (``$THE_LOOP_ENV_FILE``; empty: none).
ENV_FILE = ".env"


def load_env_file() -> None:
    """Set the variables of ``.env`` (``$THE_LOOP_ENV_FILE``; ``""`` reads none) that are
    not set already: the App's credentials ``the-loop app create`` wrote."""
    path = os.environ.get("THE_LOOP_ENV_FILE", ENV_FILE)
    if path and Path(path).is_file():
        from dotenv import load_dotenv

        load_dotenv(path, override=False)


@click.group()
@click.version_option(package_name="the-loop")
def main() -> None:
    """the-loop: a GitHub App that walks issues and pull requests through a
    product-development lifecycle graph."""
    load_env_file()


# -- service -------------------------------------------------------------------------


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              show_default="$PORT or 8080", help="TCP port to listen on.")
@click.option("--host", default=None,
              show_default="$THE_LOOP_HOST or 0.0.0.0", help="Address to bind.")
def serve(port: int | None, host: str | None) -> None:
    """Run the webhook receiver under gunicorn (POST /webhook, /healthz, /readyz)."""
    settings = read_settings("receiver")  # fail here, not in every gunicorn worker
    argv = [sys.executable, "-m", "gunicorn", "-c", "python:the_loop.gunicorn_conf",
            "--bind", f"{host or settings.web.host}:{port or settings.web.port}",
            "the_loop.wsgi:app"]
    os.execv(sys.executable, argv)


@main.command()
@click.option("--burst", is_flag=True, help="Exit when the queue is empty.")
def worker(burst: bool) -> None:
    """Run an RQ worker that processes queued deliveries."""
    settings = read_settings("worker")
    _setup_logging(settings)
    import redis

    from graph.compile import GraphError
    from integrations.capabilities import CapabilityError
    from integrations.harness.base import HarnessError
    from the_loop.wiring import build_worker
    from workers.worker import run_worker

    try:
        run_worker(build_worker(settings), settings, burst=burst)
    except (GraphError, CapabilityError, HarnessError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    except redis.RedisError as exc:
        raise click.ClickException(
            f"Redis at REDIS_URL is unreachable ({type(exc).__name__}); start it or fix REDIS_URL"
        ) from None


@main.command()
@click.option("--burst", is_flag=True, help="Exit when the turns queue is empty.")
@click.option("--processes", type=click.IntRange(1, 64), default=None,
              show_default="runner.concurrency",
              help="Runner processes to start (each runs one turn at a time).")
def runner(burst: bool, processes: int | None) -> None:
    """Run the harness runner: agent turns from the turns queue, each in its own
    workspace, reported back to the worker (see docs/harness.md)."""
    settings = read_settings("worker")
    _setup_logging(settings)
    import redis

    from foundation.settings import SettingsError
    from graph.compile import GraphError
    from integrations.capabilities import CapabilityError
    from integrations.harness.base import HarnessError
    from runner.service import serve
    from the_loop.wiring import build_runner

    try:
        build_runner(settings)  # fail here, naming the fix, before any process starts
    except (GraphError, CapabilityError, HarnessError, SettingsError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    except redis.RedisError as exc:
        raise click.ClickException(
            f"Redis at REDIS_URL is unreachable ({type(exc).__name__}); start it or fix REDIS_URL"
        ) from None
    sys.exit(serve(lambda: build_runner(settings), processes or settings.runner.concurrency,
                   burst=burst, logging_level=settings.logging.level))


def _payload_files(paths: tuple[str, ...]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*.json") if p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise click.BadParameter(f"{raw}: no such file or directory", param_hint="PATH")
    return files


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--url", required=True, help="The receiver's URL, e.g. http://127.0.0.1:8080/webhook")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds per request.")
def replay(paths: tuple[str, ...], url: str, timeout: float) -> None:
    """Sign payload files with THE_LOOP_WEBHOOK_SECRET and POST them as GitHub would.

    The event name is each file's parent folder name (as in GitHub's payload examples);
    folders are walked. Each delivery gets a fresh X-GitHub-Delivery id. Prints one line
    per delivery: status code, event, delivery id, file.
    """
    import requests

    from webhook.signature import sign

    # The receiver's own reading of THE_LOOP_WEBHOOK_SECRET: the first secret listed.
    secret = read_settings("receiver").receiver.secrets[0]
    files = _payload_files(paths)
    if not files:
        raise click.ClickException("no .json payload files found under the given paths")
    failures = 0
    with requests.Session() as http:
        for file in files:
            body = file.read_bytes()
            event = file.parent.name
            delivery = str(uuid.uuid4())
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "GitHub-Hookshot/the-loop-replay",
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": sign(body, secret),
            }
            try:
                status = str(http.post(url, data=body, headers=headers, timeout=timeout)
                             .status_code)
            except requests.RequestException as exc:
                status = f"ERR({type(exc).__name__})"
            if not status.isdigit() or not 200 <= int(status) < 300:
                failures += 1
            click.echo(f"{status} {event} {delivery} {file}")
    if failures:
        raise click.ClickException(
            f"{failures} of {len(files)} deliveries were not accepted by {url}")


# -- graph ---------------------------------------------------------------------------


@main.group("graph")
def graph_group() -> None:
    """Validate and export lifecycle graphs."""


@graph_group.command("validate")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def graph_validate(file: str | None, as_json: bool) -> None:
    """Compile FILE (default: the shipped graph); report the first structural error, naming
    the file, the node and the field or hook."""
    import warnings

    from graph.compile import GraphError
    from the_loop.graphs import load_graph

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            graph = load_graph(file)
        except GraphError as exc:
            if as_json:
                emit("graph.validate", False, "invalid", file=file, error=str(exc))
                sys.exit(1)
            raise click.ClickException(str(exc)) from None
    notes = [str(w.message) for w in caught]
    if as_json:
        emit("graph.validate", True, "valid", file=graph.source, digest=graph.digest,
             nodes=list(graph.nodes), warnings=notes,
             operations={k: sorted(v) for k, v in graph.required_operations().items()})
        return
    for note in notes:
        click.echo(f"warning: {note}", err=True)
    click.echo(f"{graph.source}: valid ({len(graph.nodes)} nodes, {len(graph.edges)} edges, "
               f"digest {graph.digest[:12]})")


@graph_group.command("export")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["json", "mermaid", "envelope"]),
              default="json", show_default=True,
              help="envelope: the work item's the-loop.graph/v1 envelope (needs --work-item), "
                   "as GET /api/v1/work-items/{ref}/graph answers it.")
@click.option("--work-item", "ref", help="Overlay this work item's visited path and node.")
@click.option("--repo", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="With --work-item: a local checkout's state (default: the service's).")
def graph_export(file: str | None, fmt: str, ref: str | None, repo: Path | None) -> None:
    """Print FILE's graph (default: the shipped one) as canonical JSON or Mermaid, or a work
    item's ``the-loop.graph/v1`` envelope: the same input gives the same bytes."""
    from graph.compile import GraphError
    from graph.envelope import EnvelopeError, build, encode
    from graph.export import Overlay, to_json, to_mermaid
    from graph.state import StateError
    from the_loop.graphs import load_graph

    if fmt == "envelope" and not ref:
        raise click.UsageError("--format envelope needs --work-item REF")
    try:
        graph = load_graph(file)
    except GraphError as exc:
        raise click.ClickException(str(exc)) from None
    overlay = None
    if ref:
        try:
            if repo is not None:
                from the_loop.local import open_local

                store = open_local(repo, ref, file, read_settings().worker).runtime.store
            else:
                store = open_operator().store
            state = store.load(ref)
        except (StateError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        if state is None:
            raise click.ClickException(f"{ref} is not a work item")
        if fmt == "envelope":
            try:
                click.echo(encode(build(graph, state, store.events(ref))).decode(), nl=False)
            except EnvelopeError as exc:
                raise click.ClickException(str(exc)) from None
            return
        from graph.state import Past

        history = Past.read(store, ref, state.legacy).history
        overlay = Overlay(ref, state.current_node, tuple(h["node"] for h in history),
                          tuple(h["node"] for h in history if h.get("forced")),
                          state.status)
    click.echo(to_json(graph, overlay) if fmt == "json" else to_mermaid(graph, overlay), nl=False)


# -- state ---------------------------------------------------------------------------


class _StateGroup(click.Group):
    """``the-loop state REF`` shows a work item; ``the-loop state migrate REF ...`` is a
    subcommand: arguments that do not start with a subcommand's name go to ``show``."""

    default_command = "show"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = next((a for a in args if not a.startswith("-")), None)
        if args and args[0] not in ("--help", "-h") and (first is None
                                                       or first not in self.commands):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@main.group("state", cls=_StateGroup)
def state_group() -> None:
    """Show a work item's state (`the-loop state REF`), or move it to the deployed graph
    (`the-loop state migrate REF --to-current`)."""


@state_group.command("show", hidden=True)
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--events", "with_events", is_flag=True, help="Include the event log.")
def state_cmd(ref: str, as_json: bool, with_events: bool) -> None:
    """Show the state of work item REF (e.g. github:OWNER/REPO#1) from Redis."""
    import redis

    from graph.refs import RefError, WorkItemRef
    from graph.state import Past, StateError
    from the_loop.plans import state_extras

    try:
        ref = WorkItemRef.parse(ref).format()
    except RefError as exc:
        raise click.BadParameter(str(exc), param_hint="REF") from None
    operator = open_operator()
    store = operator.store
    try:
        state = store.load(ref)
        log = store.events(ref)
        events = [e.to_dict() for e in log] if with_events else None
    except redis.RedisError as exc:
        raise click.ClickException(
            f"Redis at REDIS_URL is unreachable ({type(exc).__name__})"
        ) from None
    except StateError as exc:
        raise click.ClickException(str(exc)) from None
    if state is None:
        if as_json:
            emit("state", False, "unknown", ref=ref)
            sys.exit(1)
        raise click.ClickException(f"{ref} is not a work item")
    extras, lines = state_extras(state, operator.runtime())
    past = Past.of(log, state.legacy)
    if as_json:
        # The state record holds where the item is; how it got there is the event log's.
        fields: dict[str, Any] = {"ref": ref, "state": state.to_dict(), **extras,
                                  "history": past.history, "decisions": past.decisions,
                                  "forced": past.forced, "migrations": past.migrations}
        if events is not None:
            fields["events"] = events
        emit("state", True, state.status, **fields)
        return
    click.echo(f"{ref}: {state.status} at {state.current_node}")
    if state.parked_reason:
        click.echo(f"  reason: {state.parked_reason}")
    for line in lines:
        click.echo(f"  {line}")
    for step in past.history:
        click.echo(f"  entered {step['node']} via {step['via']}"
                   + (" (forced)" if step.get("forced") else ""))
    for e in events or []:
        click.echo(f"  #{e['seq']} {e['type']} {json.dumps(e['data'], sort_keys=True)}")


@state_group.command("export")
@click.argument("ref")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the JSON here (mode 0600) instead of standard output.")
def state_export(ref: str, output: Path | None) -> None:
    """Write work item REF's state and its whole event log as one JSON object
    (`{"ref", "state", "events"}`), e.g. to keep it before THE_LOOP_RETENTION lets the
    log of a done work item expire."""
    import redis

    from graph.refs import RefError, WorkItemRef
    from graph.state import StateError

    try:
        ref = WorkItemRef.parse(ref).format()
    except RefError as exc:
        raise click.BadParameter(str(exc), param_hint="REF") from None
    store = open_operator().store
    try:
        state = store.load(ref)
        events = [e.to_dict() for e in store.events(ref)]
    except redis.RedisError as exc:
        raise click.ClickException(
            f"Redis at REDIS_URL is unreachable ({type(exc).__name__})") from None
    except StateError as exc:
        raise click.ClickException(str(exc)) from None
    if state is None:
        raise click.ClickException(f"{ref} is not a work item")
    text = json.dumps({"ref": ref, "state": state.to_dict(), "events": events},
                      sort_keys=True, indent=2) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:  # who decided what: the owner's only
        fh.write(text)
    click.echo(f"exported {ref}: {len(events)} events to {output}", err=True)


# -- app -----------------------------------------------------------------------------


@main.group("app")
def app_group() -> None:
    """The GitHub App registration."""


@app_group.command("manifest")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json", "html"]), default="yaml",
              show_default=True,
              help="yaml: app.yml; json: what GitHub's form takes; html: a page that submits it.")
@click.option("--name", help="The App's name (unique on GitHub, at most 34 characters).")
@click.option("--webhook-url", help="Where GitHub sends deliveries, e.g. https://HOST/webhook.")
@click.option("--url", "homepage",
              help="The App's homepage (default: https://HOST/ of --webhook-url).")
@click.option("--redirect-url",
              help="Where GitHub redirects with the one-time code (default: as --url).")
@click.option("--org", help="html: register the App for this organization, not your account.")
@click.option("--github-url", default="https://github.com", show_default=True,
              help="html: GitHub's web URL (GitHub Enterprise Server: https://HOST).")
def app_manifest(fmt: str, name: str | None, webhook_url: str | None, homepage: str | None,
                 redirect_url: str | None, org: str | None, github_url: str) -> None:
    """Print the GitHub App manifest (permissions and events the-loop needs)."""
    import yaml

    from the_loop.manifest import (
        ManifestError,
        customised,
        html_form,
        manifest_text,
        registration_url,
    )

    overrides = {"name": name, "url": homepage, "webhook_url": webhook_url,
                 "redirect_url": redirect_url}
    try:
        doc = customised(**overrides)
        if fmt == "html":
            if webhook_url is None:
                raise ManifestError("--format html needs --webhook-url https://HOST/webhook "
                                    "(the address GitHub will send deliveries to)")
            click.echo(html_form(doc, registration_url(github_url, org)), nl=False)
        elif fmt == "json":
            click.echo(json.dumps(doc, indent=2, sort_keys=True))
        elif any(v is not None for v in overrides.values()):
            click.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)
        else:
            click.echo(manifest_text(), nl=False)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from None


# -- upgrade -------------------------------------------------------------------------


@app_group.command("create")
@click.option("--org", default=None, help="Register the App for this organization "
              "(default: your personal account).")
@click.option("--github-url", default="https://github.com", show_default=True,
              help="GitHub's web URL (GitHub Enterprise Server: https://HOST).")
@click.option("--api-url", default=None, help="The REST API root [https://api.github.com "
              "for github.com, else GITHUB_URL/api/v3].")
@click.option("--webhook-url", default=None,
              help="Where GitHub sends deliveries, e.g. https://loop.example.com/webhook "
                   "(a tunnel's URL on a laptop: see docs/install.md).")
@click.option("--name", default=None, help="The App's name (GitHub's limit: 34 characters).")
@click.option("--port", type=click.IntRange(0, 65535), default=0,
              help="Port of the local page (default: a free one).")
@click.option("--env-file", type=click.Path(dir_okay=False, path_type=Path),
              default=Path(ENV_FILE), show_default=True, help="Where the credentials go.")
@click.option("--key-file", type=click.Path(dir_okay=False, path_type=Path),
              default=Path(".dev/github-app-key.pem"), show_default=True,
              help="Where the App's private key goes (mode 0600).")
@click.option("--timeout", type=click.FloatRange(1), default=900.0, show_default=True,
              help="Seconds to wait for GitHub's redirect.")
@click.option("--no-browser", is_flag=True, help="Print the page's URL; open no browser.")
def app_create(org: str | None, github_url: str, api_url: str | None,
               webhook_url: str | None, name: str | None, port: int, env_file: Path,
               key_file: Path, timeout: float, no_browser: bool) -> None:
    """Register the GitHub App from its manifest (GitHub's manifest flow): a local page
    posts app.yml to GitHub's "new App" form, GitHub redirects back with a code, and the
    code's conversion gives the App's id, secrets and key, written to .env (0600)."""
    from the_loop.app_create import AppCreateError, start
    from the_loop.manifest import ManifestError

    try:
        flow = start(github_url=github_url, org=org, webhook_url=webhook_url,
                     env_file=env_file, key_file=key_file, api_url=api_url, port=port,
                     name=name)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"the-loop app create: open {flow.url} and press \"Create GitHub App\"",
               err=True)
    if webhook_url is None:
        click.echo("the-loop app create: no --webhook-url: the App's webhook URL is the "
                   "shipped placeholder; set it on the App's page later", err=True)
    if not no_browser:
        import webbrowser

        webbrowser.open(flow.url)
    try:
        made = flow.wait(timeout)
    except AppCreateError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"registered GitHub App {made['slug']} (id {made['id']}); credentials in "
               f"{made['env_file']}, private key in {made['key_file']}")
    click.echo(f"install it: {made['html_url']}/installations/new; then: make run")


@main.command("upgrade")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Print the moves; write nothing.")
@click.option("--kind", type=click.Choice(["cli-config", "harness-config", "collaborators"]),
              help="The file kind (default: by file name; any name but harness-config.yaml "
                   "and collaborators.yaml is a cli-config).")
def upgrade_cmd(files: tuple[str, ...], dry_run: bool, kind: str | None) -> None:
    """Migrate config FILES (default: $THE_LOOP_CONFIG, else ./cli-config.yaml) to the
    current version by deterministic key moves, keeping comments. Prints one line per
    moved key; a second run changes nothing. Exits non-zero when a file cannot be read or
    parsed, or still does not load after the migration."""
    from foundation.config.deployment import CLI_CONFIG_NAME
    from foundation.config.loader import ConfigFileError
    from foundation.settings import config_path
    from the_loop.upgrade import upgrade_file

    paths = list(files) or [config_path(os.environ) or CLI_CONFIG_NAME]
    failed = 0
    for path in paths:
        try:
            result = upgrade_file(path, kind=kind, dry_run=dry_run)
        except ConfigFileError as exc:
            click.echo(f"error: {exc}", err=True)
            failed += 1
            continue
        for line in result.report(dry_run=dry_run):
            click.echo(line)
        failed += bool(result.problems)
    if failed:
        sys.exit(1)


# Commands that drive the graph live in their own module; importing registers them.
from the_loop import deliveries, drivers, keys, plans, sessions  # noqa: E402,F401
from the_loop.sandbox import cli as _sandbox_cli  # noqa: E402,F401

if __name__ == "__main__":
    main()
