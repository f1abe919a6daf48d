"""The ``drive`` route and the walk every advancing route shares (:func:`advance`): an
issue, pull request, comment or review enrols its work item (the enrolment label) or
advances it. The delivery's world is read once (:class:`workers.session.WorkItemSession`),
the runtime is handed it, and what follows a saved advance is done here (alarms,
reactions, the state's bookkeeping).
"""

from __future__ import annotations

from foundation.events import GitHubEvent
from foundation.hooks.request_review import render_withdrawn_request
from graph.context import PHASE_PREFIX, HookConfig
from graph.markers import effect_id
from graph.model import InboundEvent, Status, WorkItem
from graph.ports import GitHub
from graph.refs import WorkItemRef
from graph.runtime import AdvanceResult
from graph.state import WorkItemState
from workers import metrics as worker_metrics
from workers.notices import ALARM_TEXT, ALARMS, Reactions, alarm_effect
from workers.pull_body import keep_pull_body
from workers.routes.agent import Agent, Delivery, Handled, logged_by
from workers.routes.finish import finish
from workers.routes.labels import labels
from workers.routes.withdraw import retract
from workers.session import WorkItemSession


def drive(agent: Agent, delivery: Delivery) -> Handled:
    """An issue, pull request, comment or review: advance the work item, enrolling it
    when it carries the enrolment label. A ``phase:`` label added is drift
    (:func:`labels`)."""
    if _is_phase_label_change(delivery.event):
        return labels(agent, delivery)
    return advance(agent, delivery, enrol=True)


def forwarded(agent: Agent, delivery: Delivery) -> Handled | None:
    """A delivery about the draft pull request an issue work item's turns push to is that
    work item's: queued again for it (:attr:`Agent.fan_out`); ``None`` for any other."""
    ref, event = delivery.ref, delivery.event
    # A pull request's events, and a CI result on its head, go to the work item whose
    # draft pull request it is (an issue's: the CI's check run names the pull request).
    if (ref is not None and agent.turns is not None
            and (event.kind == "pull_request" or event.ci is not None)
            and event.repository):
        owner = agent.turns.owner_of(ref.repository, ref.number)  # the repository key
        if owner is not None and owner != ref.format():
            agent.fan_out(delivery.record, [owner])
            return delivery.ignored(f"the draft pull request of {owner}: forwarded to it")
    return None


def advance(agent: Agent, delivery: Delivery, *, enrol: bool,
            merged: bool = False) -> Handled:
    """Enrol (``enrol``: the enrolment label is on it) or advance the delivery's work
    item, its world read once (:class:`workers.session.WorkItemSession`); then what
    follows a saved advance (:func:`_after`). ``merged``: the delivery says the work
    item's pull request was merged (:meth:`graph.runtime.Runtime.merged`)."""
    ref, event, settings = delivery.ref, delivery.event, agent.settings
    if ref is None:
        return delivery.ignored("no issue or pull request in this delivery")
    moved = forwarded(agent, delivery)
    if moved is not None:
        return moved
    session = WorkItemSession.open(agent, delivery)
    label = session.enrolment_label
    if enrol and not _carries(event, label) and not _own_pull(agent, event, ref):
        return delivery.ignored(f"not a work item (no {label!r} label)")
    if not enrol and not session.known:
        return delivery.ignored("not a work item")
    config = session.hook_config()
    github = session.github
    assert github is not None  # hook_config() made one, or raised
    item = session.work_item()  # an unreadable state is rebuilt first
    state = session.state()
    inbound = event.inbound(delivery.id)
    if not (delivery.replay and logged_by(agent, item.ref, "delivery.received", delivery.id)):
        agent.store.append_event(item.ref, "delivery.received", {
            "event": event.name,
            "action": event.action,
            "delivery": delivery.id,
            "actor": inbound.actor,
            "body_sha256": inbound.body_sha256,
        }, delivery.id)
    act_on_edits = bool(session.repo_config.harness.gates.act_on_edits)
    reactions = agent.notices.reactions(github, item, inbound,
                                        session.repo_config.collaborators,
                                        dict(settings.reactions),
                                        live=_live(state, inbound, act_on_edits=act_on_edits),
                                        account_id=config.account_id)
    reactions.begin()
    try:
        special = _gate_event(session, state, item, config, github, inbound)
        if special is not None:
            result = special
        elif enrol:
            result = agent.runtime.enrol(item, config, inbound, state=session.runtime_state())
        elif merged:
            maybe = agent.runtime.merged(item, config, inbound, by=event.merged_by,
                                         state=session.runtime_state())
            if maybe is None:
                reactions.settle()
                return delivery.ignored("not a work item")
            result = maybe
        else:
            maybe = agent.runtime.advance(item, config, inbound,
                                          state=session.runtime_state())
            if maybe is None:
                reactions.settle()
                return delivery.ignored("not a work item")
            result = maybe
    except Exception:
        reactions.react("error")
        reactions.settle()
        raise
    worker_metrics.observe_advance(result)
    _after(agent, delivery, item, github, result, reactions)
    reactions.settle()
    return Handled(delivery.id, "advanced", f"{result.status} at {result.node}")


def _after(agent: Agent, delivery: Delivery, item: WorkItem, github: GitHub,
           result: AdvanceResult, reactions: Reactions) -> None:
    """What follows a saved advance: edit alarms, the ``completed`` reaction, the draft
    pull request's body (:func:`workers.pull_body.keep_pull_body`), and the installation
    id ``the-loop graph force`` needs.

    A retried delivery advances on a tick (its event was consumed), so what its first
    attempt decided is read back: its alarms from the entries it caused (the store's
    index, never the whole log), its decision from the standing ones in the state."""
    state = result.state if result.state is not None else agent.store.load(item.ref)
    if state is None:
        return
    alarms = {alarm_effect(item.ref, state.decision_count, chain.node, str(r.data["alarm"])):
              str(r.data["alarm"])
              for chain in result.chains for r in chain.results
              if r.data.get("alarm") in ALARMS}
    logged = ({str(e.data.get("notice")): str(e.data.get("kind"))
               for e in agent.store.caused_by(item.ref, delivery.id)
               if e.type == "alarm"}
              if delivery.replay else {})
    for effect, kind in alarms.items():
        if effect not in logged:
            agent.store.append_event(item.ref, "alarm", {
                "kind": kind, "node": effect.rpartition("/")[2],
                "notice": effect}, delivery.id)
    for effect, kind in {**alarms, **dict(sorted(logged.items()))}.items():
        agent.notices.comment(github, item, effect, ALARMS.get(kind, ALARM_TEXT), state)
    # The decision comment itself is record-decision's (through the outbox).
    if any(agent.graph.node(move.source).is_gate for move in result.moves) or (
            delivery.replay and any(d.get("delivery") == delivery.id
                                    for _, d in state.standing_decisions())):
        reactions.react("completed", state)
    if result.status == Status.DONE:
        merge = next((r for chain in result.chains for r in chain.results
                      if r.hook == "merge-pull-request" and r.status == "pass"), None)
        if merge is not None:  # who merged it, in the event log (and the state's results)
            agent.store.append_event(item.ref, "pull-request.merged", {
                "pull": merge.data.get("pull"), "by": merge.data.get("merged_by"),
                "by_the_loop": bool(merge.data.get("by_the_loop"))}, delivery.id)
        finish(agent, item, github, state)  # branches deleted, workspace removed
    event = delivery.event
    installation_id = event.installation_id
    kind = item.kind
    default_branch = event.default_branch or state.default_branch
    tickets = list(item.tickets)
    if (installation_id is not None and state.installation_id != installation_id) or (
            state.repository != item.repository or state.kind != kind
            or state.default_branch != default_branch or state.tickets != tickets):
        state.installation_id = installation_id or state.installation_id
        state.repository = item.repository  # the current name, after a rename
        state.kind, state.default_branch = kind, default_branch
        state.tickets = tickets
        agent.store.save(state)
    if state.status != Status.ABANDONED:  # its pull request is closed: nothing to keep
        keep_pull_body(agent, item, github, state, delivery.id)
    if installation_id is not None and agent.installations is not None:
        agent.installations.add_work_item(installation_id, item.ref)


def _live(state: WorkItemState | None, event: InboundEvent, *, act_on_edits: bool) -> bool:
    """Whether the comment or review ``event`` carries may still decide something: not a
    source a decision used already, not an edit (unless ``gates.actOnEdits``), not created
    before the current node visit began. Only a live one gets reactions."""
    source = event.source
    if source is None:
        return True
    if event.edited and not act_on_edits:
        return False
    if state is None:
        return True
    if source in state.decided_sources():
        return False
    return event.created_at is None or event.created_at >= int(state.visit_started_at)


def _gate_event(session: WorkItemSession, state: WorkItemState | None, item: WorkItem,
                config: HookConfig, github: GitHub,
                inbound: InboundEvent) -> AdvanceResult | None:
    """Deliveries that change a gate rather than decide one, handled here; ``None`` for
    every other delivery (the runtime advances it).

    - ``pull_request.converted_to_draft`` of the work item's own pull request while a
      gate's review request stands: the request comment is marked withdrawn in place and
      the gate is entered afresh (a new visit, waiting for ``ready_for_review``);
    - a changes-requested review by a person whose approval passed a gate, while the work
      item is not at a gate: the gate re-opens (no later gate passed) or the retraction
      is recorded and announced (:func:`workers.routes.withdraw.retract`). Only from the
      account recorded for the login (``config.account_id``): another account with it
      retracts nothing.
      A retraction recorded without a re-opened gate saved the state: the session's copy
      is stale then (:meth:`workers.session.WorkItemSession.stale`).
    """
    agent, event, ref = session.agent, session.delivery.event, session.ref
    if state is None or state.status in (Status.DONE, Status.ABANDONED):
        return None
    node = agent.graph.nodes.get(state.current_node)
    if node is None:
        return None
    if (inbound.kind == "pull_request.converted_to_draft" and event.pull_number == ref.number
            and node.is_gate and not state.entry_pending):
        effect = effect_id(item.ref, node.id, state.visit, "request-review")
        agent.notices.comment(github, item, effect, render_withdrawn_request(node.phase, effect),
                              state)
        return agent.runtime.reopen(
            item, config, node.id, via="draft", code="draft", event=inbound,
            text="the pull request was converted to a draft, so its review request is "
                 "withdrawn; the review is requested again when it is marked ready for "
                 "review")
    if (inbound.kind == "pull_request_review.submitted" and not node.is_gate
            and (inbound.review_state or "").upper() == "CHANGES_REQUESTED"
            and inbound.actor and (config.account_id is None
                                   or config.account_id(inbound.actor) == inbound.actor_id)):
        actor = inbound.actor.casefold()
        for index, decision in reversed(state.standing_decisions()):
            if (not decision.get("invalidated") and actor in
                    {str(a).casefold() for a in decision.get("approvers")
                     or [decision.get("actor")]}):
                reopened = retract(agent, state, index, item, config, github, inbound,
                                    why="changes-requested",
                                    words=f"@{inbound.actor} requested changes after "
                                          "approving")
                if reopened is None:
                    session.stale()  # the retraction was noted: the state was saved
                return reopened
    return None


def _own_pull(agent: Agent, event: GitHubEvent, ref: WorkItemRef) -> bool:
    """Whether ``event`` is about ``ref``'s own draft pull request (forwarded to it): it
    carries no enrolment label, and needs none."""
    return (agent.turns is not None and event.kind == "pull_request"
            and event.head_ref is not None
            and agent.turns.workspace(ref.format()).get("branch") == event.head_ref)


def _carries(event: GitHubEvent, label: str) -> bool:
    """Whether the issue or pull request carries ``label`` (or it is being added); label
    names compare without regard to case, as GitHub's do ("Managing labels": names are
    unique regardless of case)."""
    wanted = label.casefold()
    return any(name.casefold() == wanted for name in event.labels) or (
        event.action == "labeled" and (event.label or "").casefold() == wanted)


def _is_phase_label_change(event: GitHubEvent) -> bool:
    return event.action in ("labeled", "unlabeled") and (
        event.label or "").casefold().startswith(PHASE_PREFIX)

