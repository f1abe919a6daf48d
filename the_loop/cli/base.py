"""The base of the ``the-loop`` command line: the root click group :func:`main`, the
groups other modules add commands to (``graph``, ``state``), and what every command
module shares (:func:`emit`, :func:`read_settings`, :func:`open_operator`,
:func:`open_checkout`, :func:`open_service`). The command modules import this module,
never the package :mod:`the_loop.cli`, which imports them all (importing registers).

Every ``--json`` output is one object: ``{"schemaVersion": 1, "action", "ok", "status",
...}``. Exit status is 0 on success and non-zero on any failure.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from foundation.settings import Process, Settings
    from graph.context import HookConfig
    from the_loop.local import Local
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


def open_checkout(repo: Path, ref: str, graph_path: str | None,
                  settings: Settings | None = None) -> Local:
    """Work item ``ref`` in the local checkout ``repo`` (file state), under the graph
    ``graph_path`` (default: ``$THE_LOOP_GRAPH`` or the shipped one): what ``run``,
    ``check``, ``decide``, ``graph force --repo`` and ``state migrate --repo`` drive
    (:func:`the_loop.local.open_local`).

    Raises:
        click.ClickException: a bad ref, graph, repository config or signing key (the
            message names it).
    """
    from foundation.config.loader import ConfigFileError
    from graph.compile import GraphError
    from graph.refs import RefError
    from graph.signing import SigningKeyError
    from the_loop.local import open_local

    settings = settings or read_settings()
    try:
        return open_local(repo, ref, graph_path, settings.worker)
    except (RefError, GraphError, ConfigFileError, SigningKeyError) as exc:
        raise click.ClickException(str(exc)) from None


def open_service(ref: str, graph_path: str | None,
                 as_json: bool) -> tuple[Any, Any, HookConfig]:
    """The runtime over the service's state for ``ref`` and the worker's GitHub client
    for the installation the work item was last seen with: ``(runtime, work item, hook
    config)``, what ``graph force`` and ``state migrate`` without ``--repo`` drive.

    A work item the service knows needs that client (the forced move's comment and phase
    label): when it cannot be built, the command fails saying why, and nothing is
    recorded.

    Raises:
        click.ClickException: a bad ref or graph, unreadable state, Redis unreachable, or
            no GitHub client (printed as the ``graph.force`` JSON refusal with
            ``as_json``, then exit 1).
    """
    import redis

    from graph.compile import GraphError
    from graph.context import HookConfig
    from graph.refs import RefError
    from graph.state import StateError
    from the_loop.local import parse_ref
    from the_loop.wiring import NoGitHubClient

    operator = open_operator()
    try:
        runtime = operator.runtime(graph_path)
        item = parse_ref(ref, operator.settings.worker.spec_dir)
        state = operator.store.load(ref)
    except (RefError, GraphError, StateError) as exc:
        raise click.ClickException(str(exc)) from None
    except redis.RedisError as exc:
        raise click.ClickException(f"Redis at REDIS_URL is unreachable ({type(exc).__name__}); "
                                   "start it or fix REDIS_URL") from None
    if state is None:
        return runtime, item, HookConfig()  # the runtime refuses an unknown work item
    try:
        return runtime, item, operator.hook_config(state.installation_id)
    except NoGitHubClient as exc:
        message = (f"{ref}: not forced: the forced move comments on GitHub and moves its "
                   f"phase label, and no GitHub client can be built: {exc}")
        if as_json:
            emit("graph.force", False, "refused", ref=ref, error=message)
            sys.exit(1)
        raise click.ClickException(message) from None


def setup_logging(settings: Settings) -> None:
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


# -- the groups several modules add commands to --------------------------------------


@main.group("graph")
def graph_group() -> None:
    """Validate and export lifecycle graphs."""


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
