"""Drivers of the graph from the command line: ``run``, ``check``, ``graph force``.

All three call the same runtime functions the service's worker calls
(specification, "Three drivers, one entry point").
"""

from __future__ import annotations

import getpass
import re
import shlex
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from graph.context import HookConfig
from graph.model import InboundEvent, Status
from graph.runtime import AdvanceResult, ForceError, GraphMismatch, NodeVerdict
from graph.state import Past, StateError
from the_loop.cli.base import emit, graph_group, main, open_checkout, open_service, read_settings
from the_loop.local import Local

if TYPE_CHECKING:
    from foundation.settings import Settings
    from the_loop.local_turns import DriveResult, LocalDriver, TurnLine

REPO_OPTION = click.option(
    "--repo", "repo", type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=Path("."), show_default=True, help="The local checkout holding the artifacts.")
REF_OPTION = click.option("--work-item", "ref", required=True,
                          help="github:OWNER/REPO#N, or a local name like local:login-page.")
GRAPH_OPTION = click.option("--graph", "graph_path", type=click.Path(dir_okay=False),
                            help="Graph file (default: $THE_LOOP_GRAPH or the shipped one).")


def _fail(action: str, as_json: bool, status: str, message: str, **fields: Any) -> NoReturn:
    """Report a refusal: the JSON envelope (``ok`` false) or ``Error: MESSAGE``; exit 1."""
    if as_json:
        emit(action, False, status, error=message, **fields)
        sys.exit(1)
    raise click.ClickException(message)


def _require_tools(local: Local, action: str, as_json: bool, ref: str) -> None:
    """Refuse (exit 1, naming the fix) when a hook call of the graph cannot run here,
    e.g. ``lint-artifacts``' diagram checks without Mermaid's parser
    (:func:`the_loop.graphs.require_tools`): for the commands that run exit chains."""
    from the_loop.graphs import MissingTool, require_tools

    try:
        require_tools(local.graph)
    except MissingTool as exc:
        _fail(action, as_json, "tools-missing", str(exc), ref=ref)


def _driver(settings: Settings, local: Local, action: str, as_json: bool,
            ref: str) -> tuple[LocalDriver | None, str | None]:
    """The local driver of agent turns and the harness's version text, or ``(None,
    None)`` when ``harness.adapter`` is none (agent nodes wait for pushed artifacts).

    The harness is probed first and its version checked against ``harness.version``
    (the runner's fail-closed start-up check): a missing or unpinned harness exits 1,
    naming the fix.
    """
    from integrations.harness.base import HarnessError
    from integrations.harness.factory import build_harness, check_harness
    from runner.harness_turn import TurnSetup
    from the_loop.local_turns import LocalDriver, LocalWork

    try:
        harness = build_harness(settings.harness, settings.runner.mode)
        if harness is None:
            return None, None
        version = check_harness(settings.harness, local.graph)
    except HarnessError as exc:
        _fail(action, as_json, "harness-unavailable", str(exc), ref=ref)
    work = LocalWork(settings.harness.max_turns, settings.harness.cost_cap_usd)
    setup = TurnSetup(settings.harness, settings.runner, dict(settings.environ))
    return LocalDriver(local, harness, setup, work), version


def _echo_result(drive: DriveResult | None, result: AdvanceResult, ref: str) -> None:
    """The text report: each turn with the moves it caused, then where it stands."""
    if drive is None:
        for m in result.moves:
            click.echo(f"{m.source} -> {m.target} (on {m.on})")
    click.echo(f"{ref}: {result.status} at {result.node}")
    for message in result.messages:
        click.echo(f"  - {message.text}")


def _echo_turn(line: TurnLine) -> None:
    click.echo(line.text())
    for m in line.moves:
        click.echo(f"{m['from']} -> {m['to']} (on {m['on']})")
    if line.status == Status.WORKING:
        for message in line.messages:
            click.echo(f"  - {message['text']}")


def _drive(driver: LocalDriver | None, result: AdvanceResult, as_json: bool,
           action: str, ref: str) -> tuple[AdvanceResult, DriveResult | None]:
    """Run the turns ``result`` left ordered (printing each as it goes unless
    ``as_json``); the moves of ``result`` are printed first."""
    if driver is None:
        return result, None
    if not as_json:
        for m in result.moves:
            click.echo(f"{m.source} -> {m.target} (on {m.on})")
    try:
        drive = driver.drive(result, echo=None if as_json else _echo_turn)
    except GraphMismatch as exc:
        _fail(action, as_json, "refused", str(exc), ref=ref)
    return drive.result, drive


def _finish(action: str, as_json: bool, ref: str, result: AdvanceResult,
            drive: DriveResult | None, **fields: Any) -> None:
    """Report where the work item stands; exit 0 when waiting or done, else 1."""
    from the_loop.local_turns import moves_of

    ok = result.status in (Status.WAITING, Status.DONE)
    if as_json:
        moves = drive.moves if drive is not None else moves_of(result)
        emit(action, ok, result.status, ref=ref, node=result.node, moves=moves,
             messages=[m.to_dict() for m in result.messages],
             turns=[t.to_dict() for t in drive.turns] if drive is not None else [],
             **fields)
    else:
        _echo_result(drive, result, ref)
    if not ok:
        sys.exit(1)


@main.command("run")
@REF_OPTION
@REPO_OPTION
@GRAPH_OPTION
@click.option("--dry-run", is_flag=True,
              help="Probe the harness and show the turn that would run; run nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def run_cmd(ref: str, repo: Path, graph_path: str | None, dry_run: bool,
            as_json: bool) -> None:
    """Advance a local work item until it waits, blocks or is done (state in
    REPO/.the-loop/state). With a harness configured (cli-config.yaml `harness:`), each
    agent turn runs in REPO, its changes committed there when REPO is a git work tree,
    and its checks decide the next turn. Exits 0 when waiting or done, 1 when blocked or
    escalated."""
    settings = read_settings()
    local = open_checkout(repo, ref, graph_path, settings)
    _require_tools(local, "run", as_json, ref)
    driver, version = _driver(settings, local, "run", as_json, ref)
    if dry_run:
        _dry_run(settings, local, driver, version, ref, as_json)
        return
    config = driver.config if driver is not None else local.config
    try:
        result = local.runtime.enrol(local.work_item, config, None, repo=local.repo)
    except GraphMismatch as exc:
        raise click.ClickException(str(exc)) from None
    result, drive = _drive(driver, result, as_json, "run", ref)
    _finish("run", as_json, ref, result, drive)


PROMPT_LINES = 8


def _dry_run(settings: Settings, local: Local, driver: LocalDriver | None,
             version: str | None, ref: str, as_json: bool) -> None:
    """``run --dry-run``: advance a scratch copy of the state in memory (no file is
    written, no harness runs) and show the first turn it orders: node, command, the
    adapter's argv and the input's first lines."""
    from graph.runtime import Runtime
    from graph.state import MemoryStateStore
    from the_loop.local_turns import LocalDriver, LocalWork

    harness = {"adapter": settings.harness.adapter, "version": version,
               "mode": settings.runner.mode}
    if driver is None:
        message = ("no harness is configured (harness.adapter: none): nothing would run; "
                   "agent nodes wait for pushed artifacts")
        if as_json:
            emit("run", True, "dry-run", ref=ref, dry_run=True, harness=harness,
                 turn=None, note=message)
        else:
            click.echo(message)
        return
    scratch = MemoryStateStore()
    try:
        state = local.runtime.store.load(ref)
    except StateError as exc:
        _fail("run", as_json, "refused", str(exc), ref=ref)
    if state is not None:
        scratch.save(state)
    copy = Local(Runtime(local.graph, scratch), local.work_item, local.config,
                        local.repo)
    work = LocalWork(driver.work.max_turns, driver.work.cost_cap_usd)
    planner = LocalDriver(copy, driver.harness, driver.setup, work)
    try:
        result = copy.runtime.enrol(copy.work_item, planner.config, None, repo=copy.repo)
    except GraphMismatch as exc:
        _fail("run", as_json, "refused", str(exc), ref=ref)
    order = work.take()
    turn: dict[str, Any] | None = None
    if order is not None:
        request = planner.request(order, create_dirs=False)
        turn = {"node": order.node, "command": order.command, "number": order.number,
                "max_turns": order.max_turns, "session_id": order.session_id,
                "resume": order.resume, "argv": driver.harness.command(request),
                "cwd": str(request.cwd), "model": request.model,
                "env": sorted(request.env),
                "prompt_head": request.prompt.splitlines()[:PROMPT_LINES]}
    if as_json:
        emit("run", True, "dry-run", ref=ref, dry_run=True, harness=harness, turn=turn,
             node=result.node, would_be=result.status)
        return
    click.echo(f"harness {settings.harness.adapter}: {version or 'not probed'}")
    if turn is None:
        click.echo(f"nothing would run: {ref} would be {result.status} at {result.node}")
        return
    click.echo(f"would run turn {turn['number']} of {turn['max_turns']} at {turn['node']} "
               f"(command {turn['command'] or 'default'}) in {turn['cwd']}")
    click.echo("argv: " + " ".join(shlex.quote(a) for a in turn["argv"]))
    click.echo("input (first lines):")
    for line in turn["prompt_head"]:
        click.echo(f"  | {line}")


def _verdict_dict(v: NodeVerdict) -> dict[str, Any]:
    return {"node": v.node, "verdict": v.verdict, "gate": v.gate,
            "reasons": [m.to_dict() for m in v.reasons],
            "findings": [m.to_dict() for m in v.findings]}


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
    artifacts contradict what the state claims, or hold a review entry that does not
    count: unsigned, altered, copied, or by someone not authorized now)."""
    local = open_checkout(repo, ref, graph_path)
    runtime, item = local.runtime, local.work_item
    offline = HookConfig(collaborators=local.config.collaborators, files=local.config.files,
                         record_keys=local.config.record_keys)
    problems: list[str] = []
    fields: dict[str, Any] = {"ref": ref, "recompute": recompute}
    try:
        state = runtime.store.load(ref)
    except StateError as exc:
        state = None
        problems.append(f"state is unreadable ({exc}); re-derived from the artifacts")
        recompute = True
    if recompute:
        _require_tools(local, "check", as_json, ref)  # derive runs every validating hook
        verdicts = runtime.derive(item, offline, repo=local.repo)
        fields["verdicts"] = [_verdict_dict(v) for v in verdicts]
        derived_at = verdicts[-1].node if verdicts else runtime.graph.start
        fields["derived_node"] = derived_at
        for v in verdicts:
            problems += [f"gate {v.node}: {m.text}" for m in v.findings]
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
    elif runtime.drift(state):
        changed = runtime.drift(state)
        fields.update(node=state.current_node, drift=changed)
        problems.append(f"the graph changed under {ref}: node(s) {', '.join(changed)} no "
                        f"longer match the graph it was walked with; move it with "
                        f"`the-loop state migrate {ref} --to-current`")
    else:
        node = runtime.graph.node(state.current_node)
        chain = runtime.run_boundary(node, "exit", state, item, offline, None, local.repo,
                                     record=False)
        fields.update(node=node.id, chain=chain.status,
                      messages=[m.to_dict() for m in chain.messages])
        if node.is_gate and chain.status != "pass":
            problems.append(f"gate {node.id} is unmet: waiting for a decision")
        elif chain.status == "block":
            problems.append(f"node {node.id} is blocked: "
                            + "; ".join(m.text for m in chain.messages))
        past = Past.read(runtime.store, ref, state.legacy)
        for forced in past.forced:
            for gate in forced.get("bypassed", []):
                if not any(d.get("node") == gate for d in past.decisions):
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
        local = open_checkout(repo, ref, graph_path)
        runtime, item, config, where = local.runtime, local.work_item, local.config, local.repo
    else:
        runtime, item, config = open_service(ref, graph_path, as_json)
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


# -- decide --------------------------------------------------------------------------

#: ``decide``'s decisions -> the gate outcome each stands for.
DECISIONS = {"approve": "approved", "approve-with-comments": "approved-with-comments",
             "request-changes": "changes-requested"}
#: Longest ``--comment-file`` accepted, bytes.
MAX_COMMENT_BYTES = 64 * 1024
LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")
#: A line command in a comment file (it would make the decision ambiguous; the recorded
#: follow-ups never include commands anyway).
_COMMAND_LINE = re.compile(r"^[ \t]*/(?:approve-with-comments|approve|request-changes)\b.*$\n?",
                           re.MULTILINE)


def decision_event(decision: str, login: str, comment: str | None) -> InboundEvent:
    """The event a gate's exit chain reads as ``login``'s decision, as GitHub would
    deliver it: ``approve`` / ``request-changes`` a pull request review (state
    ``APPROVED`` / ``CHANGES_REQUESTED``, body the comment), ``approve-with-comments`` an
    issue comment ``/approve-with-comments`` followed by the comment (line commands
    in it removed); actor and author ``login``, a ``User``.

    Raises:
        ValueError: an unknown ``decision``.
    """
    if decision not in DECISIONS:
        raise ValueError(f"unknown decision {decision!r}")
    text = _COMMAND_LINE.sub("", comment or "").strip()
    delivery = f"local-decision-{uuid.uuid4()}"
    if decision == "approve-with-comments":
        return InboundEvent("issue_comment.created", delivery, actor=login,
                            actor_type="User", author=login,
                            body=f"/approve-with-comments\n\n{text}\n")
    state = "APPROVED" if decision == "approve" else "CHANGES_REQUESTED"
    return InboundEvent("pull_request_review.submitted", delivery, actor=login,
                        actor_type="User", author=login, body=text, review_state=state)


def _comment_text(path: Path | None) -> str | None:
    if path is None:
        return None
    raw = path.read_bytes()
    if len(raw) > MAX_COMMENT_BYTES:
        raise click.BadParameter(f"{path} is larger than {MAX_COMMENT_BYTES} bytes",
                                 param_hint="--comment-file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise click.BadParameter(f"{path} is not UTF-8 text",
                                 param_hint="--comment-file") from None


def _not_decided(result: AdvanceResult, gate: str) -> str:
    """Why the gate's exit chain did not take the decision (its classifier's reason)."""
    for chain in result.chains:
        if chain.node == gate and chain.boundary == "exit":
            for r in chain.results:
                if r.data.get("ignored"):
                    return str(r.data["ignored"])
    return "not-decisive"


@main.command("decide")
@click.argument("ref")
@click.argument("decision", type=click.Choice(sorted(DECISIONS)))
@click.option("--by", "login", required=True, help="The GitHub login deciding.")
@click.option("--comment-file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="The decision's comments (required for approve-with-comments).")
@REPO_OPTION
@GRAPH_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def decide_cmd(ref: str, decision: str, login: str, comment_file: Path | None, repo: Path,
               graph_path: str | None, as_json: bool) -> None:
    """Record LOGIN's decision at the gate a local work item waits at, then advance it
    (and, with a harness configured, run the next node's turns as `run` does).

    The gate's own exit chain decides: LOGIN must hold the gate's role in
    REPO/.the-loop/collaborators.yaml, or the gate keeps waiting and this exits 1. The
    comments are recorded in the reviewed artifact (`## Review comments`); the agent
    gets a reference to the decision, never the text. Exits 0 when the work item then
    waits or is done, 1 otherwise."""
    if not LOGIN.match(login):
        raise click.BadParameter(f"{login!r} is not a GitHub login", param_hint="--by")
    comment = _comment_text(comment_file)
    if decision == "approve-with-comments" and not (comment or "").strip():
        raise click.UsageError("approve-with-comments needs the comments: "
                               "--comment-file FILE")
    settings = read_settings()
    local = open_checkout(repo, ref, graph_path, settings)
    _require_tools(local, "decide", as_json, ref)
    try:
        state = local.runtime.store.load(ref)
    except StateError as exc:
        _fail("decide", as_json, "refused", str(exc), ref=ref)
    if state is None:
        _fail("decide", as_json, "unknown",
              f"{ref} is not a work item in {local.repo}: run `the-loop run` first", ref=ref)
    gate = state.current_node
    node = local.graph.nodes.get(gate)
    if node is None or not node.is_gate:
        _fail("decide", as_json, "refused",
              f"{ref} is {state.status} at node {gate}, not at a gate: nothing to decide",
              ref=ref, node=gate)
    driver, _ = _driver(settings, local, "decide", as_json, ref)
    config = driver.config if driver is not None else local.config
    try:
        result = local.runtime.advance(local.work_item, config,
                                       decision_event(decision, login, comment),
                                       repo=local.repo)
    except GraphMismatch as exc:
        _fail("decide", as_json, "refused", str(exc), ref=ref)
    assert result is not None  # loaded above
    if not any(m.source == gate for m in result.moves):
        reason = _not_decided(result, gate)
        if reason == "unauthorized":
            message = (f"@{login} may not decide at gate {gate}: not in role {node.role} "
                       f"of {local.repo}/.the-loop/collaborators.yaml; the gate is still "
                       "waiting")
        else:
            message = f"the decision was not taken ({reason}); the gate is still waiting"
        _fail("decide", as_json, "not-decided", message, ref=ref, node=result.node,
              reason=reason, gate=gate)
    result, drive = _drive(driver, result, as_json, "decide", ref)
    _finish("decide", as_json, ref, result, drive, gate=gate, decision=DECISIONS[decision],
            by=login)
