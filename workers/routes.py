"""One handler per route (the plugin shape of Prow's hook server).

:func:`workers.router.route` names what a delivery is for from ``(event, action)``;
:data:`HANDLERS` maps that route to the one function that handles it. Every handler has
the same shape, ``handler(agent, delivery) -> Handled``: :class:`Agent` carries what
handlers may use (state, runtime, repository context, notices, the GitHub provider),
:class:`Delivery` the delivery, read once (:class:`foundation.events.GitHubEvent`).

======================  ================================================================
route                   handler
======================  ================================================================
``drive``               :func:`drive`: enrol (the enrolment label) or advance
``drive-if-enrolled``   :func:`drive_if_enrolled`: record the CI result, advance a work
                        item that has state
``ci``                  :func:`ci_status`: record a commit status; fan it out to the work
                        items whose head it names (or advance the one it was fanned to)
``config``              :func:`config_push`: a push to the default branch refreshes the
                        repository configuration
``labels``              :func:`labels`: a person changed a ``phase:`` label (drift)
``withdraw``            :func:`withdraw`: a comment deleted or a review dismissed
``turn``                :func:`turn`: the runner's report of an agent turn: remember
                        the work item's branch and draft pull request, run the exit chain
======================  ================================================================

A delivery about a work item's draft pull request (the one its agent turns push to) is
the work item's: it is forwarded to the work item's inbox, in order with its others.

Handlers raise whatever processing raises; the drain retries or parks the delivery
(:mod:`workers.drain`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from foundation.events import GitHubEvent
from foundation.hooks.request_review import render_withdrawn_request
from foundation.inbox.record import DeliveryRecord
from foundation.settings import WorkerSettings
from foundation.turns import RunnerWork, TurnContext, TurnRecords
from graph.context import PHASE_PREFIX, HookConfig
from graph.markers import effect_id
from graph.model import Graph, InboundEvent, Status, WorkItem
from graph.ports import GitHub, IntegrationError
from graph.refs import WorkItemRef
from graph.runtime import AdvanceResult, Runtime
from graph.state import StateError, StateStore, WorkItemState
from workers import metrics as worker_metrics
from workers.identities import DELETED, SUSPENDED, Installations, Repositories
from workers.notices import (
    ALARM_TEXT,
    ALARMS,
    DRIFT_TEXT,
    WITHDRAWN_TEXT,
    Notices,
    Reactions,
    alarm_effect,
    drift_effect,
    withdrawn_effect,
)
from workers.repo_context import RepoConfig, RepoContext
from workers.router import (
    CI_ONLY,
    CONFIG,
    DRIVE,
    DRIVE_IF_ENROLLED,
    INSTALLATION,
    LABELS,
    TURN,
    WITHDRAW,
)

log = logging.getLogger("the_loop.worker")

#: installation id -> the GitHub provider (its typed port, :class:`graph.ports.GitHub`).
GitHubFactory = Callable[[int | None], GitHub]


@dataclass(frozen=True)
class Handled:
    """What happened to one delivery: ``outcome`` is ``advanced``, ``ignored``,
    ``retrying``, ``failed`` or ``lost`` (another worker took its work item over);
    ``detail`` is the-loop's own reason or the work item's status."""

    delivery_id: str
    outcome: str
    detail: str = ""


@dataclass(frozen=True)
class Delivery:
    """One delivery as a handler sees it.

    Attributes:
        record: the stored delivery (its body read).
        event: the body, read once; its ``ref`` is the work item the record names: the
            receiver's (from the payload), or the one a CI result was fanned out to.
        replay: an earlier attempt of this delivery had started.
        repository: the current full name of the work item's repository (its ref keeps
            the name the-loop first saw, :mod:`workers.identities`), when known.
    """

    record: DeliveryRecord
    event: GitHubEvent
    replay: bool = False
    repository: str | None = None

    @property
    def id(self) -> str:
        """The ``X-GitHub-Delivery`` id."""
        return self.record.delivery_id

    @property
    def ref(self) -> WorkItemRef | None:
        """The work item, or ``None``."""
        return self.event.ref

    def ignored(self, reason: str) -> Handled:
        """This delivery, ignored for ``reason``."""
        return Handled(self.id, "ignored", reason)

    def repository_of(self, ref: WorkItemRef) -> str:
        """The name to call GitHub with for work item ``ref``: the repository's current
        name, else the ref's."""
        return self.repository or ref.repository


@dataclass(frozen=True)
class Agent:
    """What handlers may use (built once by :func:`the_loop.wiring.build_processor`).

    Attributes:
        settings: worker settings.
        graph: the compiled graph.
        store: work item state and event logs.
        runtime: the graph runtime over ``store``.
        repos: repository configuration, permissions, CI results, HookConfig.
        notices: the worker's notices and reactions (through the outbox).
        github: installation id -> GitHub provider; ``None`` without credentials.
        fan_out: queue a record again for each of the given work items; returns how
            many were queued.
        turns: the runner's turn records, when a harness is configured (agent nodes'
            work is then ordered as harness turns); ``None``: adapter ``none``.
        max_turns, cost_cap_usd: ``harness.maxTurns`` and ``harness.costCapUsd``.
        repositories, installations: what is known of repositories (ids, names) and
            installations (deleted, suspended), :mod:`workers.identities`; ``None``: not
            kept (every delivery is taken as it names itself).
        forward: queue a record again, action kept, for one work item (a delivery that
            names a renamed repository goes to the work item under its first name).
    """

    settings: WorkerSettings
    graph: Graph
    store: StateStore
    runtime: Runtime
    repos: RepoContext
    notices: Notices
    github: GitHubFactory | None
    fan_out: Callable[[DeliveryRecord, list[str]], int]
    turns: TurnRecords | None = None
    max_turns: int = 5
    cost_cap_usd: float | None = None
    repositories: Repositories | None = None
    installations: Installations | None = None
    forward: Callable[[DeliveryRecord, str], int] | None = None

    def github_or_none(self, installation_id: int | None) -> GitHub | None:
        """The GitHub provider, or ``None`` without credentials or an installation."""
        if self.github is None:
            return None
        try:
            return self.github(installation_id)
        except IntegrationError:
            return None

    def github_for(self, installation_id: int | None) -> GitHub:
        """The GitHub provider.

        Raises:
            IntegrationError: no credentials are configured (naming the variables to
                set), or the installation's client cannot be made.
        """
        if self.github is None:
            raise IntegrationError(
                "no GitHub credentials: set THE_LOOP_GITHUB_APP_ID and "
                "THE_LOOP_GITHUB_PRIVATE_KEY (or _PATH), or GH_TOKEN",
                integration="github", op="connect")
        return self.github(installation_id)


Handler = Callable[[Agent, Delivery], Handled]


# -- identity and installations: before any handler -------------------------------------


def admit(agent: Agent, delivery: Delivery) -> Delivery | Handled:
    """What is known of the delivery's installation and repository, before its handler:

    * a delivery for a deleted or suspended installation, or for a repository removed
      from the App's installation, can never succeed: a logged no-op (never retried,
      never parked);
    * the repository's id and current name are noted (:mod:`workers.identities`); a
      delivery whose ref names the repository by a name other than the one its work
      items are keyed by (a rename or transfer) is forwarded to that work item's inbox;
      otherwise the delivery comes back with the repository's current name.

    Installation deliveries themselves pass (their route records them).

    Returns:
        the delivery to hand to its route, or what happened to it.
    """
    event, ref = delivery.event, delivery.ref
    if event.name in ("installation", "installation_repositories"):
        return delivery
    installations, repositories = agent.installations, agent.repositories
    status = installations.status(event.installation_id) if installations else None
    if status is not None:
        log.info("delivery=%s event=%s: installation %s is %s; nothing to do", delivery.id,
                 event.kind_name, event.installation_id, status)
        return delivery.ignored(f"installation {event.installation_id} is {status}")
    if repositories is None:
        return delivery
    if event.repository_id is not None and event.repository:
        if repositories.removed(event.repository_id):
            log.info("delivery=%s event=%s: repository %s was removed from the App's "
                     "installation; nothing to do", delivery.id, event.kind_name,
                     event.repository)
            return delivery.ignored(f"repository {event.repository} was removed from the "
                                    "installation")
        noted = repositories.note(event.repository_id, event.repository,
                                  event.installation_id)
        if noted.previous is not None:
            log.info("repository id %d is now %s (was %s); its work items keep their refs "
                     "(github:%s#N)", event.repository_id, noted.name, noted.previous,
                     noted.key)
        if ref is not None and ref.repository == event.repository and noted.renamed:
            owner = WorkItemRef(noted.key, ref.number).format()
            if agent.forward is None:
                return delivery.ignored("renamed repository: no way to forward")
            agent.forward(delivery.record, owner)
            return delivery.ignored(f"repository renamed to {noted.name}: forwarded to "
                                    f"{owner}")
        if ref is not None and ref.repository == noted.key:
            return replace(delivery, repository=noted.name)
        return delivery
    if ref is not None:  # the-loop's own deliveries (a turn report) carry no id
        return replace(delivery, repository=repositories.name_of(ref.repository))
    return delivery


def installation(agent: Agent, delivery: Delivery) -> Handled:
    """``installation`` and ``installation_repositories`` deliveries ("Webhook events and
    payloads"): what the-loop knows of the App's access changes, and cached tokens are
    dropped (a token minted before carries the old access).

    * ``installation.deleted``: its later deliveries are no-ops; its work items are
      forgotten by the index.
    * ``installation.suspend``: its later deliveries are no-ops until ``unsuspend``,
      which re-drives each of its work items (a tick through its own inbox).
    * ``installation.created`` / ``new_permissions_accepted``: active (tokens renewed).
    * ``installation_repositories.removed`` / ``added``: deliveries for those
      repositories are no-ops / handled again.

    The re-drive of one work item after ``unsuspend`` arrives here too (its record names
    the work item): it advances the work item.
    """
    event = delivery.event
    if delivery.ref is not None:  # a work item re-driven after unsuspend
        return _advance(agent, replace(delivery, repository=event.repository), enrol=False)
    installation_id = event.installation_id
    if installation_id is None:
        return delivery.ignored("no installation in this delivery")
    forget = getattr(agent.github, "forget", None)
    if callable(forget):
        forget(installation_id)
    payload = delivery.record.payload()
    installations, repositories = agent.installations, agent.repositories
    if installations is None:
        return delivery.ignored("installations are not tracked")
    if event.name == "installation_repositories":
        removed = _repository_ids(payload.get("repositories_removed"))
        added = _repository_ids(payload.get("repositories_added"))
        if repositories is not None:
            repositories.mark_removed(removed)
            repositories.mark_removed(added, removed=False)
        log.info("installation %d: %d repositories removed, %d added; cached token dropped",
                 installation_id, len(removed), len(added))
        return delivery.ignored(f"installation {installation_id}: {len(removed)} "
                                f"repositories removed, {len(added)} added")
    action = event.action
    if action == "deleted":
        installations.set_status(installation_id, DELETED)
        installations.forget(installation_id)
    elif action == "suspend":
        installations.set_status(installation_id, SUSPENDED)
    elif action in ("unsuspend", "created", "new_permissions_accepted"):
        was = installations.status(installation_id)
        installations.set_status(installation_id, None)
        if action == "unsuspend" or was == SUSPENDED:
            resumed = _resume(agent, delivery, installation_id)
            log.info("installation %d resumed: %d work items re-driven", installation_id,
                     resumed)
            return delivery.ignored(f"installation {installation_id} resumed; re-driving "
                                    f"{resumed} work item(s)")
    else:
        return delivery.ignored(f"installation {action}: nothing to change")
    log.info("installation %d %s; cached token dropped", installation_id, action)
    return delivery.ignored(f"installation {installation_id} {action}: recorded")


def _repository_ids(items: object) -> list[int]:
    if not isinstance(items, list):
        return []
    return [int(r["id"]) for r in items if isinstance(r, Mapping)
            and isinstance(r.get("id"), int) and not isinstance(r.get("id"), bool)]


def _resume(agent: Agent, delivery: Delivery, installation_id: int) -> int:
    """Queue one re-drive per work item of the installation, each into its own inbox
    (an ``installation.unsuspend`` record naming the work item and its repository)."""
    if agent.installations is None or agent.forward is None:
        return 0
    count = 0
    for key in agent.installations.work_items(installation_id):
        ref = WorkItemRef.parse_or_none(key)
        state = agent.store.load(key) if ref is not None else None
        if ref is None or state is None:
            continue
        name = (agent.repositories.name_of(ref.repository) if agent.repositories
                else ref.repository)
        body = json.dumps({
            "action": "unsuspend", "installation": {"id": installation_id},
            "repository": {"full_name": name,
                           "default_branch": state.default_branch or "main"},
            "pull_request" if state.kind == "pull_request" else "issue": {
                "number": ref.number},
            "sender": {"login": "the-loop", "type": "Bot"},
        }).encode()
        record = replace(delivery.record, delivery_id=f"{delivery.id}-{count}",
                         body=body, repository=name)
        count += agent.forward(record, key)
    return count


# -- drive: enrol or advance -----------------------------------------------------------


def drive(agent: Agent, delivery: Delivery) -> Handled:
    """An issue, pull request, comment or review: advance the work item, enrolling it
    when it carries the enrolment label. A ``phase:`` label added is drift
    (:func:`labels`)."""
    if _is_phase_label_change(delivery.event):
        return labels(agent, delivery)
    return _advance(agent, delivery, enrol=True)


def drive_if_enrolled(agent: Agent, delivery: Delivery) -> Handled:
    """A completed check run, check suite or workflow run: record its result for
    ``verify-tests``, then advance the work item it names if it is one."""
    ci = delivery.event.ci
    if ci is not None:
        store = agent.repos.ci(ci.repository)
        store.record(ci)
        if delivery.ref is None:
            # An empty pull_requests list: a pull request from a fork (GitHub lists only
            # pull requests whose head is in the repository). Reach the work items whose
            # head is that commit, as a commit status does.
            fanned = agent.fan_out(delivery.record, store.work_items(ci.sha))
            return delivery.ignored(f"recorded {ci.name}={ci.conclusion} for "
                                    f"{ci.sha[:12]}; re-driving {fanned} work item(s)")
    return _advance(agent, delivery, enrol=False)


def ci_status(agent: Agent, delivery: Delivery) -> Handled:
    """A commit status: record it. It names no pull request, so the work items whose
    head is that commit are re-driven, each through its own inbox (order is kept); a
    status already fanned out to one work item advances it."""
    ci = delivery.event.ci
    if ci is None:
        return _advance(agent, delivery, enrol=False)
    store = agent.repos.ci(ci.repository)
    store.record(ci)
    if delivery.ref is not None:
        return _advance(agent, delivery, enrol=False)
    fanned = agent.fan_out(delivery.record, store.work_items(ci.sha))
    return delivery.ignored(f"recorded {ci.name}={ci.conclusion} for {ci.sha[:12]}; "
                            f"re-driving {fanned} work item(s)")


def _stored(agent: Agent, ref: str) -> tuple[bool, bool]:
    """``(known, readable)``: whether ``ref`` has stored state, and whether it can be
    read (an unreadable one is known, and rebuilt by the runtime from the artifacts'
    verified records, :meth:`graph.runtime.Runtime.load`)."""
    try:
        return agent.store.load(ref) is not None, True
    except StateError:
        return True, False


def _risk_tier(agent: Agent, event: GitHubEvent, ref: WorkItemRef,
               repo_config: RepoConfig) -> int | None:
    """The work item's risk tier: from its labels when the event carries them (a
    ``risk:<n>`` label, else ``risk.default`` of the harness config), else the tier last
    recorded in its state (a CI event or a turn report shows no labels)."""
    if event.carries_labels:
        return repo_config.harness.risk.tier(event.labels)
    state = agent.store.load(ref.format())
    if state is not None and state.risk_tier is not None:
        return state.risk_tier
    return repo_config.harness.risk.default


def _advance(agent: Agent, delivery: Delivery, *, enrol: bool) -> Handled:
    ref, event, settings = delivery.ref, delivery.event, agent.settings
    if ref is None:
        return delivery.ignored("no issue or pull request in this delivery")
    if agent.turns is not None and event.kind == "pull_request" and event.repository:
        owner = agent.turns.owner_of(ref.repository, ref.number)  # the repository key
        if owner is not None and owner != ref.format():
            agent.fan_out(delivery.record, [owner])
            return delivery.ignored(f"the draft pull request of {owner}: forwarded to it")
    installation_id = event.installation_id
    github = agent.github_or_none(installation_id)
    repository = delivery.repository_of(ref)
    repo_config = (agent.repos.config(github, repository, event.default_branch or "main")
                   if github is not None else RepoConfig())
    label = repo_config.enrolment_label(settings)
    if enrol and not _carries(event, label) and not _own_pull(agent, event, ref):
        return delivery.ignored(f"not a work item (no {label!r} label)")
    known, readable = _stored(agent, ref.format())
    if not enrol and not known:
        return delivery.ignored("not a work item")
    if github is None:
        github = agent.github_for(installation_id)  # raises, naming the variables to set
    work, branch = _work(agent, event, ref, repository)
    config = agent.repos.hook_config(github, event, ref, repo_config, branch=branch,
                                     work=work, repository=repository)
    if not readable:  # rebuilt from the artifacts' verified records before anything reads it
        agent.runtime.load(replace(
            event.work_item(ref, repo_config.spec_dir(settings),
                            risk_tier=repo_config.harness.risk.default),
            repository=repository), config)
    item = event.work_item(ref, repo_config.spec_dir(settings),
                           risk_tier=_risk_tier(agent, event, ref, repo_config))
    # A CI result names a pull request's head; a re-drive names neither kind: the work
    # item is what it was last seen as (is-docs-only reads a pull request's files).
    kind: str | None = event.kind or ("pull_request" if event.ci is not None else None)
    stored = agent.store.load(ref.format()) if kind is None or not event.tickets else None
    if kind is None:
        kind = stored.kind if stored is not None and stored.kind else item.kind
    tickets = event.tickets or (tuple(stored.tickets) if stored is not None else ())
    item = replace(item, repository=repository, kind=kind or item.kind, tickets=tickets)
    inbound = event.inbound(delivery.id)
    if not (delivery.replay and _logged(agent, item.ref, "delivery.received", delivery.id)):
        agent.store.append_event(item.ref, "delivery.received", {
            "event": event.name,
            "action": event.action,
            "delivery": delivery.id,
            "actor": inbound.actor,
            "body_sha256": inbound.body_sha256,
        }, delivery.id)
    state = agent.store.load(item.ref)
    act_on_edits = bool(repo_config.harness.gates.act_on_edits)
    reactions = agent.notices.reactions(github, item, inbound, repo_config.collaborators,
                                        dict(settings.reactions),
                                        live=_live(state, inbound, act_on_edits=act_on_edits),
                                        account_id=config.account_id)
    reactions.begin()
    try:
        special = _gate_event(agent, state, item, config, github, inbound, event, ref)
        if special is not None:
            result = special
        elif enrol:
            result = agent.runtime.enrol(item, config, inbound)
        else:
            maybe = agent.runtime.advance(item, config, inbound)
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
    """What follows a saved advance: edit alarms, the ``completed`` reaction, and the
    installation id ``the-loop graph force`` needs.

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
    if agent.turns is not None and result.moves and result.status == Status.DONE \
            and item.repository is not None and item.id is not None:
        agent.turns.retire(item.ref, item.repository, item.id)  # its workspace goes
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


def _gate_event(agent: Agent, state: WorkItemState | None, item: WorkItem,
                config: HookConfig, github: GitHub, inbound: InboundEvent,
                event: GitHubEvent, ref: WorkItemRef) -> AdvanceResult | None:
    """Deliveries that change a gate rather than decide one, handled here; ``None`` for
    every other delivery (the runtime advances it).

    - ``pull_request.converted_to_draft`` of the work item's own pull request while a
      gate's review request stands: the request comment is marked withdrawn in place and
      the gate is entered afresh (a new visit, waiting for ``ready_for_review``);
    - a changes-requested review by a person whose approval passed a gate, while the work
      item is not at a gate: the gate re-opens (no later gate passed) or the retraction
      is recorded and announced (:func:`_retract`). Only from the account recorded for
      the login (``config.account_id``): another account with it retracts nothing.
    """
    if state is None or state.status == "done":
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
                return _retract(agent, state, index, item, config, github, inbound,
                                why="changes-requested",
                                words=f"@{inbound.actor} requested changes after approving")
    return None


def _retract(agent: Agent, state: WorkItemState, index: int, item: WorkItem,
             config: HookConfig, github: GitHub | None, inbound: InboundEvent, *,
             why: str, words: str) -> AdvanceResult | None:
    """An approval that passed a gate is retracted (its review dismissed, or changes
    requested by its reviewer since). While no later human gate has passed, the gate
    re-opens: the work item returns there, loudly (status comment, event log, check
    run). Afterwards the retraction is recorded (``approval.retracted``), shown in the
    status comment and announced in a comment; the work item stays where it is."""
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


def _work(agent: Agent, event: GitHubEvent, ref: WorkItemRef,
          repository: str) -> tuple[RunnerWork | None, str | None]:
    """Where the work item's agent turns are ordered, and its branch (artifacts are
    read there once a turn has pushed); ``(None, None)`` without a harness."""
    if agent.turns is None:
        return None, None
    branch = agent.turns.workspace(ref.format()).get("branch")
    context = TurnContext(
        repository=repository, number=ref.number, title=event.title or "",
        default_branch=event.default_branch or "main",
        installation_id=event.installation_id, branch=branch)
    return RunnerWork(agent.turns, context, max_turns=agent.max_turns,
                      cost_cap_usd=agent.cost_cap_usd), branch


def _own_pull(agent: Agent, event: GitHubEvent, ref: WorkItemRef) -> bool:
    """Whether ``event`` is about ``ref``'s own draft pull request (forwarded to it): it
    carries no enrolment label, and needs none."""
    return (agent.turns is not None and event.kind == "pull_request"
            and event.head_ref is not None
            and agent.turns.workspace(ref.format()).get("branch") == event.head_ref)


def turn(agent: Agent, delivery: Delivery) -> Handled:
    """The runner's report that an agent turn ended: remember where the work item's work
    lives (its branch; its draft pull request, whose deliveries are then the work
    item's), then advance it: the node's exit chain runs against the pushed head."""
    ref, report = delivery.ref, delivery.event.turn or {}
    if ref is None:
        return delivery.ignored("a turn report names no work item")
    branch, pull = report.get("branch"), report.get("pull")
    if agent.turns is not None and isinstance(branch, str) and branch:
        agent.turns.remember_workspace(ref.format(), ref.repository, branch,
                                       pull if isinstance(pull, int) else None)
    return _advance(agent, delivery, enrol=False)


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


def _logged(agent: Agent, ref: str, type_: str, delivery_id: str) -> bool:
    """Whether ``ref``'s log has a ``type_`` event caused by ``delivery_id`` (an earlier
    attempt logged it before it failed or its worker died): the store's index of the
    entries a delivery caused, never a read of the whole log."""
    return any(e.type == type_ for e in agent.store.caused_by(ref, delivery_id))


# -- labels, withdrawals, configuration -------------------------------------------------


def labels(agent: Agent, delivery: Delivery) -> Handled:
    """Phase labels changed by a person are noticed, not fought: the drift is recorded
    in the event log and the work item is told once how to move the phase properly.
    The-loop never re-adds the label in a loop (it sets labels only when a delivery
    leaves the work item at a new node visit)."""
    ref, event = delivery.ref, delivery.event
    if ref is None:
        return delivery.ignored("no issue or pull request in this delivery")
    label = event.label or ""
    login = event.sender.login or ""
    if not label.casefold().startswith(PHASE_PREFIX):
        return delivery.ignored("label change does not move a work item")
    if event.sender.is_bot or login.casefold() in agent.settings.bot_logins:
        return delivery.ignored("the-loop's own phase label change")
    key = ref.format()
    state = agent.store.load(key)
    if state is None:
        return delivery.ignored("not a work item")
    if not (delivery.replay and _logged(agent, key, "labels.drift", delivery.id)):
        agent.store.append_event(key, "labels.drift", {
            "action": event.action, "label": label, "actor": login,
            "node": state.current_node,
        }, delivery.id)
    github = agent.github_or_none(event.installation_id)
    if github is not None and not agent.store.logged(key, "labels.drift-noted"):
        agent.notices.comment(github, event.work_item(ref), drift_effect(key),
                              DRIFT_TEXT.format(node=state.current_node, ref=key), state)
        agent.store.append_event(key, "labels.drift-noted", {"node": state.current_node},
                                 delivery.id)
    return delivery.ignored(f"phase label {event.action} by a person: recorded")


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
      (:func:`_retract`).
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
        if not (delivery.replay and _logged(agent, key, "vote.withdrawn", delivery.id)):
            agent.store.append_event(key, "vote.withdrawn", {
                "id": source_id, "node": state.current_node}, delivery.id)
        if not decided:
            return delivery.ignored("vote.withdrawn: recorded")
    what = "review.dismissed" if dismissed else "feedback.withdrawn"
    if delivery.replay and _logged(agent, key, what, delivery.id):
        return delivery.ignored(f"{what}: recorded before")
    agent.store.append_event(key, what, {
        "id": source_id, "decided": [standing[i].get("node") for i in decided],
    }, delivery.id)
    github = agent.github_or_none(event.installation_id)
    config, item = _hook_config(agent, github, event, ref)
    index = decided[-1]
    gate = standing[index].get("node")
    if dismissed:
        _retract(agent, state, index, item, config, github, inbound,
                 why="review-dismissed",
                 words=f"the review by @{standing[index].get('actor')} that approved")
        return delivery.ignored(f"{what}: gate {gate} handled")
    agent.runtime.note(item, config, "comment-deleted", event=inbound,
                       data={"gate": gate, "id": source_id},
                       text=f"the comment that decided gate `{gate}` was deleted; the "
                            "decision stays recorded")
    return delivery.ignored(f"{what}: recorded")


def _hook_config(agent: Agent, github: GitHub | None, event: GitHubEvent,
                 ref: WorkItemRef) -> tuple[HookConfig, WorkItem]:
    """The HookConfig and work item of ``ref`` for a handler that does not advance it
    (a withdrawal): without GitHub, one with no integrations (nothing is published)."""
    settings = agent.settings
    if github is None:
        return HookConfig(), event.work_item(ref, settings.spec_dir)
    repository = str(event.repository or ref.repository)
    repo_config = agent.repos.config(github, repository, event.default_branch or "main")
    work, branch = _work(agent, event, ref, repository)
    config = agent.repos.hook_config(github, event, ref, repo_config, branch=branch,
                                     work=work, repository=repository)
    return config, event.work_item(ref, repo_config.spec_dir(settings))


def config_push(agent: Agent, delivery: Delivery) -> Handled:
    """A push: when it moves the default branch, every worker reads the repository
    configuration at the new head."""
    event = delivery.event
    if (event.repository and event.after
            and event.pushed_ref == f"refs/heads/{event.default_branch}"):
        agent.repos.note_push(event.repository, event.after)
        return delivery.ignored("default branch moved; config refreshed")
    return delivery.ignored("push does not move a work item")


#: route (:mod:`workers.router`) -> its handler.
HANDLERS: Mapping[str, Handler] = {
    DRIVE: drive,
    DRIVE_IF_ENROLLED: drive_if_enrolled,
    CI_ONLY: ci_status,
    CONFIG: config_push,
    LABELS: labels,
    WITHDRAW: withdraw,
    TURN: turn,
    INSTALLATION: installation,
}
