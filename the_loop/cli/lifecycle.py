"""Commands that read the lifecycle graph and a work item's place in it: ``graph
validate``, ``graph export``, ``state REF`` (``state show``) and ``state export``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from the_loop.cli.base import emit, graph_group, open_operator, read_settings, state_group

# -- graph ---------------------------------------------------------------------------


@graph_group.command("validate")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def graph_validate(file: str | None, as_json: bool) -> None:
    """Compile FILE (default: the shipped graph); report the first structural error, naming
    the file, the node and the field or hook. A hook call that could not run here (e.g.
    diagram checks without Mermaid's parser) is a warning: the graph is valid, and the
    processes that run its hooks refuse to start here until it is installed."""
    import warnings

    from graph.compile import GraphError
    from the_loop.graphs import load_graph, missing_tools

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
    notes += [f"{problem}; the worker, `the-loop run`, `decide` and `check --recompute` "
              "refuse to start here" for problem in missing_tools(graph)]
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


@state_group.command("show", hidden=True)
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--events", "with_events", is_flag=True, help="Include the event log.")
def state_cmd(ref: str, as_json: bool, with_events: bool) -> None:
    """Show the state of work item REF (e.g. github:OWNER/REPO#1) from Redis."""
    import redis

    from graph.refs import RefError, WorkItemRef
    from graph.state import Past, StateError
    from the_loop.cli.plans import state_extras

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
