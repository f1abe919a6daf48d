"""Verdicts from the artifacts alone: ``the-loop check --recompute`` (:func:`derive`) and
the state rebuilt when a work item's cached state is unreadable (:func:`reconstruct`).

State is a cache: what the validating exit hooks and the gates' recorded decisions say
of the artifacts decides where a work item stands. Everything here works through the
public runtime API and makes no network call (pass a ``config`` without integrations).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from graph.context import HookConfig
from graph.model import Message, Node, RecordCheck, Status, WorkItem
from graph.runtime.api import RuntimeAPI
from graph.runtime.shapes import NodeVerdict, decision_record, gate_artifacts
from graph.state import WorkItemState


def derive(
    rt: RuntimeAPI, work_item: WorkItem, config: HookConfig, *, repo: Path | None = None
) -> list[NodeVerdict]:
    """Re-derive verdicts from the artifacts alone, ignoring cached state: walk from
    the start node along the graph's forward edges, re-running each node's validating
    exit hooks (a gate is met only if its reviewed artifacts record an approval in
    their ``## Review comments`` section), and stop at the first node that is not met.
    Makes no network call: pass a ``config`` without integrations."""
    verdicts: list[NodeVerdict] = []
    scratch = WorkItemState(work_item.ref, rt.graph.digest, rt.graph.start)
    node_id: str | None = rt.graph.start
    seen: set[str] = set()
    while node_id is not None and node_id not in seen:
        seen.add(node_id)
        node = rt.graph.node(node_id)
        verdict = derive_node(rt, node, scratch, work_item, config, repo)
        verdicts.append(verdict)
        if verdict.verdict == "unmet" or rt.graph.is_terminal(node_id):
            break
        node_id = next((e.target for on in node.forward_outcomes
                        if (e := rt.graph.edge(node_id, on)) is not None), None)
    return verdicts


def derive_node(rt: RuntimeAPI, node: Node, scratch: WorkItemState, work_item: WorkItem,
                config: HookConfig, repo: Path | None) -> NodeVerdict:
    """``node``'s verdict from the artifacts: a gate's from the approvals recorded in
    the artifacts it reviews (verified, by someone authorized now); another node's from
    its validating exit hooks re-run on ``scratch`` (nothing recorded)."""
    if node.is_gate:
        reviewed = gate_artifacts(rt.graph, node)
        record = decision_record(node)
        if not reviewed or record is None:
            return NodeVerdict(node.id, "unverified", (Message(
                f"gate {node.id} names no artifact that records its decision",
                code="gate-unrecorded"),), gate=True)
        missing: list[Message] = []
        findings: list[Message] = []
        role = node.role

        def authorized(login: str, user_id: int | None) -> bool:
            if not role or not config.collaborators.is_authorized(login, str(role)):
                return False
            # The login is the same person only while its account is (user id).
            known = (config.account_id(login)
                     if config.account_id is not None and user_id is not None else None)
            return known is None or known == user_id
        elsewhere = tuple(config.records_elsewhere()) if config.records_elsewhere else ()
        for name in reviewed:
            path = rt.artifacts_for(work_item, name)
            check = RecordCheck(work_item.ref, node.id, path, config.record_keys,
                                authorized, elsewhere)
            approval = record.approved(config.files.read_text(path), check)
            findings += approval.findings
            if not approval.approved:
                missing.append(Message(
                    f"{path} records no verified approval of its current content under "
                    "'## Review comments' (none, or the artifact changed after it)",
                    path=path, code="gate-unmet"))
        return NodeVerdict(node.id, "unmet" if missing else "met", tuple(missing), True,
                           tuple(findings))
    validating = [c for c in node.exit if c.definition.validating]
    if not validating:
        return NodeVerdict(node.id, "unverified" if node.exit else "met", (Message(
            f"node {node.id} has no validating exit hook to re-run offline",
            code="not-rederivable"),) if node.exit else ())
    chain = rt.run_boundary(node, "exit", scratch, work_item, config, None, repo,
                            only_validating=True, record=False)
    if chain.status == "pass":
        return NodeVerdict(node.id, "met")
    return NodeVerdict(node.id, "unmet", chain.messages)


def reconstruct(
    rt: RuntimeAPI, work_item: WorkItem, config: HookConfig, *, repo: Path | None = None,
    verdicts: Sequence[NodeVerdict] | None = None,
) -> WorkItemState:
    """A fresh state at the first node whose verdict is not met (see :func:`derive`;
    ``verdicts``: ones already derived)."""
    if verdicts is None:
        verdicts = derive(rt, work_item, config, repo=repo)
    state = WorkItemState(work_item.ref, rt.graph.digest, rt.graph.start)
    rt.enter(state, rt.graph.start, via="reconstructed", log_entry=False)
    for previous, verdict in zip(verdicts, verdicts[1:], strict=False):
        if previous.verdict == "unmet":
            break
        rt.enter(state, verdict.node, via="reconstructed", log_entry=False)
    last = verdicts[-1] if verdicts else None
    if last and last.verdict == "met" and rt.graph.is_terminal(last.node):
        state.status, state.entry_pending = Status.DONE, False
    return state
