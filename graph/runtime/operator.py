"""The operator verbs: a forced move (``the-loop graph force``), the graph drift check that
holds a work item whose node the deployed graph changed, and the explicit migration to
the deployed graph (``the-loop state migrate``).

Every function here works through the public runtime API (:class:`~graph.runtime.api.
RuntimeAPI`) and never forges a verdict: a move is recorded as forced in state, in the
event log and in a marked comment on the work item (specification, "The escape hatch").
The walk calls :func:`check_graph` and :func:`retry_forced` on every evaluation.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graph.context import HookConfig
from graph.effects import HookEffects
from graph.markers import marker
from graph.model import Graph, Status, WorkItem
from graph.runtime.api import RuntimeAPI
from graph.runtime.shapes import ForceError, ForceResult, gates_between
from graph.state import WorkItemState

log = logging.getLogger(__name__)

#: Longest operator's reason quoted in the forced-move comment (characters).
MAX_REASON_CHARS = 1000


def force(
    rt: RuntimeAPI,
    work_item: WorkItem,
    config: HookConfig,
    target: str,
    reason: str,
    *,
    repo: Path | None = None,
    operator: str | None = None,
) -> ForceResult:
    """Move the pointer to ``target``; never forge a verdict (specification, "The
    escape hatch"). The move is recorded as forced in state, in the event log (an
    entry and an execution-log checkpoint) and in a marked comment on the work item;
    bypassed gates keep their real verdicts. The target's entry chain runs (so a
    backwards move re-enters the node).

    Raises:
        ForceError: empty ``reason``; unknown ``target`` (naming the valid ids); the
            work item has no state.
    """
    if not reason or not reason.strip():
        raise ForceError("--reason is required: an unexplained override is refused")
    if target not in rt.graph.nodes:
        raise ForceError(f"unknown node {target!r}; valid ids: {', '.join(rt.graph.nodes)}")
    state = rt.load(work_item, config, repo=repo)
    if state is None:
        raise ForceError(f"{work_item.ref} is not a work item (no state)")
    source = state.current_node
    undeclared = target != source and not any(
        e.target == target for e in rt.graph.outgoing(source))
    bypassed = gates_between(rt.graph, source, target)
    record = {"from": source, "to": target, "reason": reason.strip(),
              "bypassed": bypassed, "undeclared": undeclared, "operator": operator,
              "at": time.time()}
    warnings = force_warnings(rt.graph, record)
    state.forced_count += 1
    state.last_forced = record
    rt.enter(state, target, via="forced", forced=True)
    rt.store.save(state)
    rt.log(state, "work-item.forced", record, None)
    rt.log(state, "checkpoint", {"node": target, "boundary": "forced",
                                 "from": source, "reason": reason.strip()}, None)
    comment_forced(rt, state, work_item, config, state.forced_count)
    node = rt.graph.node(target)
    entry = rt.run_boundary(node, "entry", state, work_item, config, None, repo)
    if entry.status == "pass":
        state.entry_pending = False
        entry = rt.settle(state, work_item, config) or entry
    if entry.status != "pass":
        state.status = Status.BLOCKED
    rt.store.save(state)
    return ForceResult(source, target, warnings, bypassed, entry)


def retry_forced(rt: RuntimeAPI, state: WorkItemState, work_item: WorkItem,
                 config: HookConfig) -> None:
    """Post again the forced-move comments of this node visit still pending (a failed
    or unanswered post; the outbox finds one that landed by its marker). Entering a
    node replaces the outbox, so only the newest forced move's can be pending."""
    n = state.forced_count
    pending = state.effects.get(f"{state.ref}/forced/{n}") if n else None
    if pending and pending.get("status") == "pending" and state.last_forced:
        comment_forced(rt, state, work_item, config, n)


def force_warnings(graph: Graph, record: Mapping[str, Any]) -> list[str]:
    """What a forced move (a ``work-item.forced`` record) waives, in the-loop's words:
    one line per warning (an undeclared move, each bypassed gate)."""
    warnings = []
    if record.get("undeclared"):
        warnings.append(f"no edge leads from {record['from']} to {record['to']}: this move "
                        "is outside the graph's model")
    for gate in record.get("bypassed") or ():
        g = graph.nodes.get(gate)
        role, phase = (g.role, g.phase) if g is not None else ("?", gate)
        warnings.append(f"bypassing required gate {gate}: the guarantee that a person "
                        f"in role {role} approved phase {phase} is waived")
    return warnings


def comment_forced(rt: RuntimeAPI, state: WorkItemState, work_item: WorkItem,
                   config: HookConfig, n: int) -> None:
    """Post the comment of the ``n``-th forced move once, through the outbox (effect
    ``<ref>/forced/<n>``). One whose post failed stays pending and is posted again on
    the work item's next evaluation (:func:`retry_forced`), reconciled by its marker
    if it landed after all."""
    github = config.integrations.get("github")
    if github is None or work_item.repository is None or work_item.id is None:
        return
    record = state.last_forced or {}
    effect = f"{state.ref}/forced/{n}"
    lines = [f"**the-loop** · an operator forced this work item from `{record['from']}` "
             f"to `{record['to']}`.", ""]
    lines += [f"- warning: {w}" for w in force_warnings(rt.graph, record)]
    lines += ["", "The operator's reason:", "", *forced_reason_quote(record.get("reason"))]
    lines += ["", "The bypassed gates keep their real verdicts: `the-loop check "
              "--recompute` still reports them.", "", marker(effect)]
    try:
        outbox = HookEffects(state, rt.store, effect, own=config.own)
        outbox.github(github, effect=effect).comment(
            repo=work_item.repository, number=work_item.id, body="\n".join(lines))
    except Exception as exc:  # noqa: BLE001  (recorded; never undoes the move)
        rt.log(state, "notification.failed",
               {"channel": "github-forced", "error": type(exc).__name__}, None)


def drift(graph: Graph, state: WorkItemState) -> list[str]:
    """Nodes of the graph ``state`` was walked with that no longer match the deployed
    graph (boundaries changed, or gone), sorted, the current node first when it is
    one of them; ``[]`` when the item can go on: same digest, or its current node
    exists with the same boundaries (an item pinned before node digests were kept
    goes on as long as its node exists)."""
    if state.graph_digest == graph.digest and not state.drift:
        return []
    now = graph.node_digests()
    current = state.current_node
    if current not in graph.nodes:
        changed = {current}
    elif not state.node_digests:
        return []
    else:
        changed = {n for n, d in state.node_digests.items() if now.get(n) != d}
        if state.node_digests.get(current) == now.get(current):
            return []
    return sorted(changed, key=lambda n: (n != current, n))


def check_graph(rt: RuntimeAPI, state: WorkItemState) -> bool:
    """Pin the deployed graph, or hold the item: True when it must not be evaluated
    (its node changed or is gone; escalated, recorded, until ``the-loop state
    migrate``)."""
    if state.graph_digest == rt.graph.digest and not state.drift:
        if not state.node_digests:
            state.node_digests = rt.graph.node_digests()
            rt.store.save(state)
        return False
    changed = drift(rt.graph, state)
    if not changed:
        log.info("graph changed under work item %s; node %s unchanged, going on",
                 state.ref, state.current_node)
        rt.log(state, "graph.changed",
               {"from": state.graph_digest, "to": rt.graph.digest,
                "node": state.current_node, "migrated": "unchanged-node"}, None)
        state.graph_digest = rt.graph.digest
        state.node_digests = rt.graph.node_digests()
        state.drift = None
        rt.store.save(state)
        return False
    record = {"from": state.graph_digest, "to": rt.graph.digest, "nodes": changed}
    if state.drift is None or state.drift.get("to") != rt.graph.digest:
        reason = (f"the deployed graph ({rt.graph.source}) changed node(s) "
                  f"{', '.join(changed)} under this work item at {state.current_node}; "
                  f"move it with `the-loop state migrate {state.ref} --to-current`")
        log.warning("work item %s: %s", state.ref, reason)
        state.drift = {**record, "at": rt.clock()}
        state.status = Status.ESCALATED
        state.escalated = {"node": state.current_node, "reason": reason,
                           "at": rt.clock()}
        rt.store.save(state)
        rt.log(state, "graph.drift", record, None)
    return True


def migrate(rt: RuntimeAPI, work_item: WorkItem, config: HookConfig, *, reason: str,
            node: str | None = None, dry_run: bool = False, repo: Path | None = None,
            operator: str | None = None) -> dict[str, Any]:
    """Move a work item to the deployed graph explicitly (``the-loop state migrate
    REF --to-current``), recorded like a forced move: state (``migration_count``), the
    event log (an entry and a checkpoint) and a marked comment. When its node's
    boundaries changed (or ``node`` names another), the node is entered again under
    the new graph and its entry chain runs; otherwise only the pin moves.

    Returns:
        ``{from, to, node, target, changed, reentered, dry_run}``.

    Raises:
        ForceError: empty ``reason``; no state; the node is gone and ``node`` names
            none of the graph's ids.
    """
    if not reason or not reason.strip():
        raise ForceError("--reason is required: an unexplained migration is refused")
    state = rt.load(work_item, config, repo=repo)
    if state is None:
        raise ForceError(f"{work_item.ref} is not a work item (no state)")
    target = node or state.current_node
    if target not in rt.graph.nodes:
        raise ForceError(f"node {target!r} is not in the deployed graph; pass "
                         f"--node with one of: {', '.join(rt.graph.nodes)}")
    changed = rt.drift(state) if state.node_digests or \
        state.current_node not in rt.graph.nodes else []
    reenter = target != state.current_node or state.current_node in changed
    record: dict[str, Any] = {
        "from": state.graph_digest, "to": rt.graph.digest,
        "node": state.current_node, "target": target, "changed": changed,
        "reentered": reenter, "reason": reason.strip(), "operator": operator,
        "at": rt.clock()}
    if dry_run:
        return {**record, "dry_run": True}
    state.migration_count += 1
    state.graph_digest = rt.graph.digest
    state.node_digests = rt.graph.node_digests()
    state.drift = None
    if reenter:
        rt.enter(state, target, via="migrated", forced=True)
    elif state.escalated and state.status == Status.ESCALATED:
        state.escalated = None
        state.status = Status.ACTIVE
    rt.store.save(state)
    rt.log(state, "work-item.migrated", record, None)
    rt.log(state, "checkpoint", {"node": target, "boundary": "migrated",
                                 "from": record["node"], "reason": record["reason"]},
           None)
    github = config.integrations.get("github")
    if github is not None and work_item.repository is not None and work_item.id is not None:
        effect = f"{state.ref}/migrated/{state.migration_count}"
        body = (f"**the-loop** · an operator moved this work item to the deployed graph "
                f"(`{record['from'][:12]}` → `{record['to'][:12]}`) at `{target}`"
                + (f"; changed nodes: {', '.join(f'`{n}`' for n in changed)}"
                   if changed else "") + f".\n\n{marker(effect)}")
        try:
            outbox = HookEffects(state, rt.store, effect, own=config.own)
            outbox.github(github, effect=effect).comment(
                repo=work_item.repository, number=work_item.id, body=body)
        except Exception as exc:  # noqa: BLE001  (recorded; never undoes the migration)
            rt.log(state, "notification.failed",
                   {"channel": "github-migrated", "error": type(exc).__name__}, None)
    if reenter:
        entry = rt.run_boundary(rt.graph.node(target), "entry", state, work_item,
                                config, None, repo)
        if entry.status == "pass":
            state.entry_pending = False
            entry = rt.settle(state, work_item, config) or entry
        if entry.status != "pass":
            state.status = Status.BLOCKED
        rt.store.save(state)
    return {**record, "dry_run": False}


def forced_reason_quote(reason: object) -> list[str]:
    """The operator's ``--reason`` as Markdown quote lines for the forced-move comment.

    The reason is operator input (``the-loop graph force --reason``), never payload text;
    it is still quoted, not rendered as the-loop's words: HTML comments (which could
    imitate the-loop's hidden marker) are dropped, ``@`` mentions are defused and the text
    is capped at :data:`MAX_REASON_CHARS` characters.

    Returns:
        one ``> ...`` line per line of the reason (``> (none given)`` when empty).
    """
    text = str(reason or "").replace("\r\n", "\n")
    text = re.sub(r"<!--.*?(?:-->|\Z)", "", text, flags=re.DOTALL)
    text = text.replace("<!--", "").replace("-->", "").replace("@", "@\u200b")
    if len(text) > MAX_REASON_CHARS:
        text = text[:MAX_REASON_CHARS] + " …"
    lines = [line.rstrip() for line in text.strip().splitlines()] or ["(none given)"]
    return [f"> {line}" if line else ">" for line in lines]
