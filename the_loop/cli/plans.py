"""Commands about task plans, monitors and graph changes: ``the-loop tasks plan``,
``the-loop state migrate``, and what ``the-loop state`` adds (the monitor of a waiting
gate, a graph change holding the item, the plan's ``work-graph.json``)."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from graph import tasks as plans
from graph.monitors import monitor
from the_loop.cli.base import emit, main, open_checkout, open_service, state_group

if TYPE_CHECKING:
    from graph.runtime import Runtime
    from graph.state import WorkItemState


def state_extras(state: WorkItemState, runtime: Runtime) -> tuple[dict[str, Any], list[str]]:
    """What ``the-loop state`` shows beside the state: ``({monitor, drift, workGraph},
    text lines)``. ``monitor``: the waiting gate's status (healthy, stale, skew,
    unknown) at this moment; ``drift``: the nodes the deployed graph changed under the
    item; ``workGraph``: the running plan's ``work-graph.json`` envelope."""
    fields: dict[str, Any] = {"monitor": None, "drift": runtime.drift(state),
                              "workGraph": None}
    lines: list[str] = []
    seen = monitor(state, runtime.graph, runtime.clock())
    if seen is not None:
        fields["monitor"] = seen.to_dict()
        age = f", waiting {seen.age / 3600:.1f} h" if seen.age is not None else ""
        lines.append(f"monitor: {seen.status} (freshness {seen.freshness / 3600:g} h{age}, "
                     f"reminded {seen.reminded})")
    if fields["drift"]:
        lines.append(f"graph changed: node(s) {', '.join(fields['drift'])} no longer match; "
                     f"`the-loop state migrate {state.ref} --to-current`")
    if state.plan:
        from graph.runtime.waves import PlanRun

        plan = plans.Plan.from_stored(state.plan["tasks"])
        fields["workGraph"] = PlanRun(runtime).document(state, state.plan, plan)
        status = state.plan["status"]
        counts = {s: list(status.values()).count(s) for s in sorted(set(status.values()))}
        lines.append(f"plan: wave {min(state.plan['wave'], len(plan.waves))} of "
                     f"{len(plan.waves)}; " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        for join in state.plan["joins"]:
            lines.append(f"  join {join['wave']}: passed {len(join['passed'])}, failed "
                         f"{len(join['failed'])}, blocked {len(join['blocked'])}")
    return fields, lines


# -- the-loop tasks plan ---------------------------------------------------------------


@main.group("tasks")
def tasks_group() -> None:
    """Task plans: the task list of tasks.md as waves."""


@tasks_group.command("plan")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--work-item", "ref", default=None,
              help="A work item: the plan its implementation runs (with each task's status), "
                   "else its tasks.md in --repo.")
@click.option("--repo", "repo", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, help="A local checkout holding the work item's tasks.md.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "mermaid"]),
              default="text", show_default=True, help="Output format.")
def tasks_plan(file: Path | None, ref: str | None, repo: Path | None, as_json: bool,
               fmt: str) -> None:
    """Show the waves (each sorted by id; the same input gives the same bytes) and the
    ready set of FILE (a tasks.md) or of --work-item REF. An invalid task list prints
    every finding and exits 1."""
    if (file is None) == (ref is None):
        raise click.UsageError("give a FILE or --work-item REF (one of them)")
    fmt = "json" if as_json else fmt
    status = None
    text: str | None
    if file is not None:
        text = _read(file)
        source = str(file)
    else:
        assert ref is not None
        text, status, source = _work_item_plan(ref, repo)
    if status is not None:
        plan = plans.Plan.from_stored(status["tasks"])
        current = status["status"]
    else:
        found, findings = plans.check(text or "")
        if found is None:
            if fmt == "json":
                emit("tasks.plan", False, "invalid", source=source,
                     findings=[{"code": f.code, "message": f.message, "tasks": list(f.tasks)}
                               for f in findings])
            else:
                for f in findings:
                    click.echo(f"{source}: {f.code}: {f.message}", err=True)
            sys.exit(1)
        plan, current = found, None
    if fmt == "json":
        click.echo(plan.to_json(current), nl=False)
    elif fmt == "mermaid":
        click.echo(plan.to_mermaid(current), nl=False)
    else:
        for n, wave in enumerate(plan.waves, 1):
            shown = [f"{t} ({current[t]})" if current else t for t in wave]
            click.echo(f"wave {n}: {' '.join(shown)}")
        click.echo(f"ready: {' '.join(plan.ready(current)) or '(none)'}")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"{path}: cannot read ({type(exc).__name__})") from None


def _work_item_plan(ref: str, repo: Path | None) -> tuple[str | None, dict[str, Any] | None,
                                                          str]:
    """``(tasks.md text, running plan, source)`` of work item ``ref``: the plan in its
    state when one runs, else the tasks.md of its spec directory in ``repo``."""
    import redis

    from graph.refs import RefError
    from graph.state import StateError
    from the_loop.cli.base import open_operator, read_settings
    from the_loop.local import open_local

    if repo is not None:
        try:
            local = open_local(repo, ref, None, read_settings().worker)
            state = local.runtime.store.load(ref)
        except (RefError, StateError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        if state is not None and state.plan:
            return None, state.plan, f"{ref} (state)"
        path = repo / local.work_item.spec_dir / "tasks.md"
        return _read(path), None, str(path)
    try:
        state = open_operator().store.load(ref)
    except redis.RedisError as exc:
        raise click.ClickException(f"Redis at REDIS_URL is unreachable ({type(exc).__name__})"
                                   ) from None
    except StateError as exc:
        raise click.ClickException(str(exc)) from None
    if state is None or not state.plan:
        raise click.ClickException(f"{ref} runs no plan yet; pass --repo DIR to read its "
                                   "tasks.md from a checkout, or give the FILE")
    return None, state.plan, f"{ref} (state)"


# -- the-loop state migrate -------------------------------------------------------------


@state_group.command("migrate")
@click.argument("ref")
@click.option("--to-current", "to_current", is_flag=True, required=True,
              help="Move it to the deployed graph (required: the only target).")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--node", "node", default=None,
              help="Where to put it when its node is gone (default: the same node id).")
@click.option("--reason", default="moved to the deployed graph by an operator",
              show_default=True, help="Why (recorded everywhere).")
@click.option("--repo", "repo", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, help="A local checkout (file state); omit for the service's state.")
@click.option("--graph", "graph_path", type=click.Path(dir_okay=False),
              help="Graph file (default: $THE_LOOP_GRAPH or the shipped one).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def state_migrate(ref: str, to_current: bool, dry_run: bool, node: str | None, reason: str,
                  repo: Path | None, graph_path: str | None, as_json: bool) -> None:
    """Move work item REF to the deployed graph, recorded like a forced move (state, the
    event log, a comment). Its node is entered again when its boundaries changed."""
    from graph.runtime import ForceError

    if repo is not None:
        local = open_checkout(repo, ref, graph_path)
        runtime, item, config, where = local.runtime, local.work_item, local.config, local.repo
    else:
        runtime, item, config = open_service(ref, graph_path, as_json)
        where = None
    try:
        done = runtime.migrate(item, config, reason=reason, node=node, dry_run=dry_run,
                               repo=where, operator=getpass.getuser())
    except ForceError as exc:
        if as_json:
            emit("state.migrate", False, "refused", ref=ref, error=str(exc))
            sys.exit(1)
        raise click.ClickException(str(exc)) from None
    if as_json:
        emit("state.migrate", True, "dry-run" if dry_run else "migrated", ref=ref, **done)
        return
    verb = "would migrate" if dry_run else "migrated"
    changed = ", ".join(done["changed"]) or "none"
    click.echo(f"{ref}: {verb} {done['from'][:12]} -> {done['to'][:12]} at {done['target']} "
               f"(changed nodes: {changed}; "
               f"{'re-entered' if done['reentered'] else 'pointer kept'})")
