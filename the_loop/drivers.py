"""Drivers of the graph from the command line: ``run``, ``check``, ``graph force``.

All three call the same runtime functions the service's worker calls
(specification, "Three drivers, one entry point").
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Any

import click

from graph.compile import GraphError
from graph.context import HookConfig
from graph.model import Status
from graph.refs import RefError
from graph.runtime import ForceError, GraphMismatch, NodeVerdict
from graph.state import StateError
from the_loop.cli import emit, graph_group, main, open_operator, read_settings
from the_loop.config.loader import ConfigFileError
from the_loop.local import Local, open_local

REPO_OPTION = click.option(
    "--repo", "repo", type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=Path("."), show_default=True, help="The local checkout holding the artifacts.")
REF_OPTION = click.option("--work-item", "ref", required=True,
                          help="github:OWNER/REPO#N, or a local name like local:login-page.")
GRAPH_OPTION = click.option("--graph", "graph_path", type=click.Path(dir_okay=False),
                            help="Graph file (default: $THE_LOOP_GRAPH or the shipped one).")


def _open(repo: Path, ref: str, graph_path: str | None) -> Local:
    settings = read_settings()
    try:
        return open_local(repo, ref, graph_path, settings.worker)
    except (RefError, GraphError, ConfigFileError) as exc:
        raise click.ClickException(str(exc)) from None


@main.command("run")
@REF_OPTION
@REPO_OPTION
@GRAPH_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def run_cmd(ref: str, repo: Path, graph_path: str | None, as_json: bool) -> None:
    """Advance a local work item until it waits, blocks or is done (state in
    REPO/.the-loop/state). Exits 0 when waiting or done, 1 when blocked or escalated."""
    local = _open(repo, ref, graph_path)
    try:
        result = local.runtime.enrol(local.work_item, local.config, None, repo=local.repo)
    except GraphMismatch as exc:
        raise click.ClickException(str(exc)) from None
    ok = result.status in (Status.WAITING, Status.DONE)
    messages = [m.to_dict() for m in result.messages]
    if as_json:
        emit("run", ok, result.status, ref=ref, node=result.node,
             moves=[{"from": m.source, "to": m.target, "on": m.on} for m in result.moves],
             messages=messages)
    else:
        for m in result.moves:
            click.echo(f"{m.source} -> {m.target} (on {m.on})")
        click.echo(f"{ref}: {result.status} at {result.node}")
        for m in result.messages:
            click.echo(f"  - {m.text}")
    if not ok:
        sys.exit(1)


def _verdict_dict(v: NodeVerdict) -> dict[str, Any]:
    return {"node": v.node, "verdict": v.verdict, "gate": v.gate,
            "reasons": [m.to_dict() for m in v.reasons]}


@main.command("check")
@REF_OPTION
@REPO_OPTION
@GRAPH_OPTION
@click.option("--recompute", is_flag=True,
              help="Re-derive every validating verdict from the artifacts; ignore cached state.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def check_cmd(ref: str, repo: Path, graph_path: str | None, recompute: bool,
              as_json: bool) -> None:
    """Evaluate a work item without advancing it: no network, no model call, nothing
    written. Exits non-zero while a gate is unmet (or, with --recompute, while the
    artifacts contradict what the state claims)."""
    local = _open(repo, ref, graph_path)
    runtime, item = local.runtime, local.work_item
    offline = HookConfig(collaborators=local.config.collaborators, files=local.config.files)
    problems: list[str] = []
    fields: dict[str, Any] = {"ref": ref, "recompute": recompute}
    try:
        state = runtime.store.load(ref)
    except StateError as exc:
        state = None
        problems.append(f"state is unreadable ({exc}); re-derived from the artifacts")
        recompute = True
    if recompute:
        verdicts = runtime.derive(item, offline, repo=local.repo)
        fields["verdicts"] = [_verdict_dict(v) for v in verdicts]
        derived_at = verdicts[-1].node if verdicts else runtime.graph.start
        fields["derived_node"] = derived_at
        for v in verdicts:
            if v.verdict == "unmet":
                problems.append(f"{'gate' if v.gate else 'node'} {v.node} is unmet: "
                                + "; ".join(m.text for m in v.reasons))
        if state is not None:
            order = list(runtime.graph.nodes)
            claimed = state.current_node
            fields["state_node"] = claimed
            if claimed in order and derived_at in order and \
                    order.index(claimed) > order.index(derived_at) and \
                    verdicts[-1].verdict == "unmet":
                problems.append(f"state says {claimed} but the artifacts stop at {derived_at}")
    elif state is None:
        raise click.ClickException(f"{ref} has no state in {local.repo}/.the-loop/state; "
                                   "run `the-loop run` first, or use --recompute")
    else:
        node = runtime.graph.node(state.current_node)
        chain = runtime._run(node, "exit", state, item, offline, None, local.repo,
                             record=False)
        fields.update(node=node.id, chain=chain.status,
                      messages=[m.to_dict() for m in chain.messages])
        if node.is_gate and chain.status != "pass":
            problems.append(f"gate {node.id} is unmet: waiting for a decision")
        elif chain.status == "block":
            problems.append(f"node {node.id} is blocked: "
                            + "; ".join(m.text for m in chain.messages))
        for forced in state.forced:
            for gate in forced.get("bypassed", []):
                if not any(d.get("node") == gate for d in state.decisions):
                    problems.append(f"gate {gate} was bypassed by a forced move and is unmet")
    ok = not problems
    if as_json:
        emit("check", ok, "ok" if ok else "unmet", problems=problems, **fields)
    else:
        for v in fields.get("verdicts", []):
            click.echo(f"{v['verdict']:>10}  {v['node']}")
        click.echo(f"{ref}: " + ("ok" if ok else "unmet"))
        for p in problems:
            click.echo(f"  - {p}")
    if not ok:
        sys.exit(1)


def _open_service(ref: str, graph_path: str | None,
                  as_json: bool) -> tuple[Any, Any, HookConfig]:
    """The runtime over the service's state for ``ref`` and the worker's GitHub client
    for the installation the work item was last seen with.

    A work item the service knows needs that client (the forced move's comment and phase
    label): when it cannot be built, the command fails saying why, and nothing is
    recorded.
    """
    import redis

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


@graph_group.command("force")
@REF_OPTION
@click.option("--to", "target", required=True, help="Id of the node to move to.")
@click.option("--reason", required=True, help="Why (required; recorded everywhere).")
@click.option("--repo", "repo", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, help="A local checkout (file state); omit for the service's state.")
@GRAPH_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def force_cmd(ref: str, target: str, reason: str, repo: Path | None, graph_path: str | None,
              as_json: bool) -> None:
    """Move a work item to NODE. It moves the pointer and never forges a verdict: the
    move is recorded as forced, and bypassed gates stay unmet for `check --recompute`."""
    if repo is not None:
        local = _open(repo, ref, graph_path)
        runtime, item, config, where = local.runtime, local.work_item, local.config, local.repo
    else:
        runtime, item, config = _open_service(ref, graph_path, as_json)
        where = None
    try:
        result = runtime.force(item, config, target, reason, repo=where,
                               operator=getpass.getuser())
    except (ForceError, GraphMismatch) as exc:
        if as_json:
            emit("graph.force", False, "refused", ref=ref, error=str(exc))
            sys.exit(1)
        raise click.ClickException(str(exc)) from None
    if as_json:
        emit("graph.force", True, "forced", ref=ref, source=result.source, target=result.target,
             warnings=result.warnings, bypassed=result.bypassed,
             entry=result.entry.status if result.entry else None)
        return
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
    click.echo(f"{ref}: forced {result.source} -> {result.target}")
