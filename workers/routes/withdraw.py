"""The ``withdraw`` route: a deleted comment or a dismissed review withdraws what it
said; and the retraction of an approval that passed a gate (:func:`retract`, also when
its reviewer requests changes since, :mod:`workers.routes.drive`).
"""

from __future__ import annotations

from foundation.events import GitHubEvent
from graph.context import HookConfig
from graph.model import InboundEvent, WorkItem
from graph.ports import GitHub
from graph.refs import WorkItemRef
from graph.runtime import AdvanceResult
from graph.state import WorkItemState
from workers.notices import WITHDRAWN_TEXT, withdrawn_effect
from workers.routes.agent import Agent, Delivery, Handled, logged_by
from workers.session import turn_work


def withdraw(agent: Agent, delivery: Delivery) -> Handled:
    """A deleted comment or a dismissed review withdraws what it said.

    - It decided nothing (and counted toward nothing): ignored silently, no write.
    - It counted toward a gate still waiting (``approvals: N``): it stops counting
      (``vote.withdrawn`` in the event log).
    - A deleted comment that decided a gate: recorded in the event log
      (``feedback.withdrawn``) and the status comment; no reply comment; the work item
      does not move.
    - A dismissed review whose approval passed a gate: the gate re-opens while no later
      human gate has passed, else the retraction is recorded and announced
      (:func:`workers.routes.withdraw.retract`).
    """
    ref, event = delivery.ref, delivery.event
    if ref is None:
        return delivery.ignored("no issue or pull request in this delivery")
    if agent.turns is not None and event.kind == "pull_request" and event.repository:
        owner = agent.turns.owner_of(ref.repository, ref.number)  # the repository key
        if owner is not None and owner != ref.format():
            agent.fan_out(delivery.record, [owner])
            return delivery.ignored(f"the draft pull request of {owner}: forwarded to it")
    key = ref.format()
    state = agent.store.load(key)
    if state is None:
        return delivery.ignored("not a work item")
    inbound = event.inbound(delivery.id)
    source, source_id = inbound.source, inbound.comment_id
    standing = dict(state.standing_decisions())
    decided = [i for i, d in standing.items() if source is not None and (
        source in (d.get("sources") or ()) or (not d.get("sources")
                                               and d.get("comment_id") == source_id))]
    votes = state.votes.get(state.current_node) or []
    kept = [v for v in votes if v.get("source") != source]
    if not decided and len(kept) == len(votes):
        return delivery.ignored("it decided nothing: ignored")
    if decided and all(standing[i].get("invalidated") for i in decided) and (
            len(kept) == len(votes)):
        return delivery.ignored("its decision was withdrawn before: ignored")
    dismissed = event.name == "pull_request_review"
    if len(kept) != len(votes):
        state.votes[state.current_node] = kept
        agent.store.save(state)
        if not (delivery.replay and logged_by(agent, key, "vote.withdrawn", delivery.id)):
            agent.store.append_event(key, "vote.withdrawn", {
                "id": source_id, "node": state.current_node}, delivery.id)
        if not decided:
            return delivery.ignored("vote.withdrawn: recorded")
    what = "review.dismissed" if dismissed else "feedback.withdrawn"
    if delivery.replay and logged_by(agent, key, what, delivery.id):
        return delivery.ignored(f"{what}: recorded before")
    agent.store.append_event(key, what, {
        "id": source_id, "decided": [standing[i].get("node") for i in decided],
    }, delivery.id)
    github = agent.github_or_none(event.installation_id)
    config, item = _hook_config(agent, github, event, ref)
    index = decided[-1]
    gate = standing[index].get("node")
    if dismissed:
        retract(agent, state, index, item, config, github, inbound,
                 why="review-dismissed",
                 words=f"the review by @{standing[index].get('actor')} that approved")
        return delivery.ignored(f"{what}: gate {gate} handled")
    agent.runtime.note(item, config, "comment-deleted", event=inbound,
                       data={"gate": gate, "id": source_id},
                       text=f"the comment that decided gate `{gate}` was deleted; the "
                            "decision stays recorded")
    return delivery.ignored(f"{what}: recorded")


def retract(agent: Agent, state: WorkItemState, index: int, item: WorkItem,
             config: HookConfig, github: GitHub | None, inbound: InboundEvent, *,
             why: str, words: str) -> AdvanceResult | None:
    """An approval that passed a gate is retracted (its review dismissed, or changes
    requested by its reviewer since). While no later human gate has passed, the gate
    re-opens: the work item returns there, loudly (status comment, event log, check
    run). Afterwards the retraction is recorded (``approval.retracted``), shown in the
    status comment and announced in a comment; the work item stays where it is.

    Returns:
        what re-opening the gate did; ``None`` when the retraction was recorded (the
        work item's state was saved meanwhile) or there was nothing to retract.
    """
    decision = state.decision(index)
    if decision is None:
        return None
    gate = str(decision.get("node"))
    gate_node = agent.graph.nodes.get(gate)
    if gate_node is None or decision.get("outcome") not in gate_node.forward_outcomes:
        return None
    if not agent.runtime.later_gate_passed(state, index):
        return agent.runtime.reopen(
            item, config, gate, via="reopened", code=why, event=inbound,
            data={"actor": decision.get("actor"), "decision": index},
            text=f"{words} gate `{gate}`, so that approval no longer counts and the work "
                 f"item is back at `{gate}` for a new decision")
    agent.runtime.note(item, config, why, event=inbound,
                       data={"gate": gate, "decision": index, "retracted": True},
                       text=f"{words} gate `{gate}`; the work item has passed a later gate "
                            "since, so the decision stays recorded")
    if github is not None:
        latest = agent.store.load(item.ref) or state
        agent.notices.comment(github, item, withdrawn_effect(item.ref, inbound.source),
                              WITHDRAWN_TEXT.format(gate=gate, node=latest.current_node,
                                                    ref=item.ref, what=words), latest)
    return None


def _hook_config(agent: Agent, github: GitHub | None, event: GitHubEvent,
                 ref: WorkItemRef) -> tuple[HookConfig, WorkItem]:
    """The HookConfig and work item of ``ref`` for a handler that does not advance it
    (a withdrawal): without GitHub, one with no integrations (nothing is published)."""
    settings = agent.settings
    if github is None:
        return HookConfig(), event.work_item(ref, settings.spec_dir)
    repository = str(event.repository or ref.repository)
    repo_config = agent.repos.config(github, repository, event.default_branch or "main")
    work, branch = turn_work(agent, event, ref, repository)
    config = agent.repos.hook_config(github, event, ref, repo_config, branch=branch,
                                     work=work, repository=repository)
    return config, event.work_item(ref, repo_config.spec_dir(settings))

