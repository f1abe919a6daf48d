"""The worker's composition root and delivery processing.

``DeliveryProcessor`` owns the Redis connection, the compiled graph, the runtime and the
GitHub clients; nothing else constructs them. Deliveries of one work item are processed
one at a time, in arrival order, even with several workers: the receiver appends each
delivery id to the work item's inbox list (and, when that made the inbox non-empty, lists
the work item as ready and queues a wake-up job), and whichever worker holds the work
item's lock drains the inbox head-first. A wake-up job (:meth:`DeliveryProcessor.dispatch`)
takes work items off the ready list until it is empty or the job's time budget is used
up; see :mod:`the_loop.inbox.drain`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import redis

from graph.compile import Graph
from graph.context import HookConfig
from graph.errors import LoopError
from graph.hooks.set_phase_label import PHASE_PREFIX
from graph.markers import find_effect, marker
from graph.model import InboundEvent, WorkItem
from graph.ports import Integration, IntegrationError, NotFound
from graph.refs import WorkItemRef
from graph.runtime import AdvanceResult, Runtime
from graph.state import StateStore
from the_loop.config.loader import ConfigFileError
from the_loop.config.repository import (
    COLLABORATORS_PATH,
    HARNESS_CONFIG_PATH,
    Collaborators,
    HarnessConfig,
    load_harness_config,
)
from the_loop.events import GitHubEvent
from the_loop.inbox.dead import Deliveries
from the_loop.inbox.drain import SHARED_INBOX, Inboxes, Step
from the_loop.inbox.enqueue import DeliveryQueue
from the_loop.inbox.record import DeliveryRecord, text
from the_loop.observability.logs import bind as bind_log_context
from the_loop.observability.logs import clear as clear_log_context
from the_loop.settings import WorkerSettings
from workers import metrics as worker_metrics
from workers.ci import RedisCI
from workers.files import GitHubFiles
from workers.router import CI_ONLY, CONFIG, DRIVE, IGNORE, LABELS, ROUTES, WITHDRAW, route
from workers.state import RedisStateStore

log = logging.getLogger("the_loop.worker")

GitHubFactory = Callable[[int | None], Integration]

#: Ready refs one step may pop looking for a delivery (locked, held or empty ones are
#: dropped from the list: their holder, a retry or an operator lists them again).
DISPATCH_SKIP = 50


class DeliveryFailed(LoopError, RuntimeError):
    """Processing one delivery raised; the delivery was recorded as failed."""


ALARM_TEXT = (
    "**the-loop** · alarm: an approving comment on this work item was edited by someone "
    "other than its author. Edited comments only count when their author edits them; this "
    "one does not count."
)
WITHDRAWN_TEXT = (
    "**the-loop** · the review that decided gate `{gate}` was {what} after the work item "
    "moved on (it is now at `{node}`). The decision stays recorded; to return to the gate, "
    "an operator runs `the-loop graph force --work-item {ref} --to {gate} --reason TEXT`."
)
DRIFT_TEXT = (
    "**the-loop** · a `phase:` label was changed by hand. The work item is still at node "
    "`{node}`; labels follow the graph, not the other way round. To move the phase, an "
    "operator runs `the-loop graph force --work-item {ref} --to NODE --reason TEXT`."
)


@dataclass(frozen=True)
class RepoConfig:
    """A repository's configuration, read from its default branch."""

    harness: HarnessConfig = field(default_factory=lambda: load_harness_config(None))
    collaborators: Collaborators = field(default_factory=Collaborators)
    harness_present: bool = False

    def enrolment_label(self, settings: WorkerSettings) -> str:
        """The harness file's label, else the deployment's (``THE_LOOP_ENROLMENT_LABEL``)."""
        return self.harness.enrolment.label if self.harness_present else settings.enrolment_label

    def spec_dir(self, settings: WorkerSettings) -> str:
        """The harness file's spec directory template, else the deployment's."""
        return self.harness.specs.directory if self.harness_present else settings.spec_dir


@dataclass(frozen=True)
class Handled:
    """What happened to one delivery: ``outcome`` is ``advanced``, ``ignored`` or
    ``failed``; ``detail`` is the-loop's own reason or the work item's status."""

    delivery_id: str
    outcome: str
    detail: str = ""


class DeliveryProcessor:
    """Process queued deliveries.

    Args:
        settings: worker settings.
        connection: Redis client (the RQ connection).
        graph: the compiled graph.
        github: installation id -> GitHub provider; ``None`` when no credentials are
            configured (enrolled work items then fail with a clear reason).
        store: state store (default: Redis under ``settings.prefix``).
        classifier: the optional model classifier for gate feedback.
    """

    def __init__(
        self,
        settings: WorkerSettings,
        connection: redis.Redis,
        graph: Graph,
        github: GitHubFactory | None,
        store: StateStore | None = None,
        classifier: Callable[[str, Sequence[str]], str | None] | None = None,
        integrations: Mapping[str, Integration] | None = None,
    ) -> None:
        self.settings = settings
        self.redis = connection
        self.graph = graph
        self.github = github
        # Providers other than GitHub (slack, jira), shared by every work item.
        self.integrations: dict[str, Integration] = dict(integrations or {})
        self.store = store or RedisStateStore(connection, settings.prefix)
        self.runtime = Runtime(graph, self.store)
        self._repo_configs: dict[str, tuple[float, RepoConfig, str]] = {}
        self._permission_cache: dict[tuple[str, str], tuple[float, str]] = {}
        self.classifier = classifier
        self.inboxes = Inboxes(connection, settings, routed=ROUTES)
        self.deliveries = Deliveries(connection, settings, self.store, self.inboxes)
        self.keys = self.inboxes.keys
        self._fan_out_queue: DeliveryQueue | None = None
        # Who holds a work item lock (its token starts with this); `the-loop worker` sets
        # its RQ worker name, so a reaper can tell a dead holder's locks.
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._held: dict[str, Any] = {}
        self._held_guard = threading.Lock()

    def _token(self) -> str:
        return f"{self.owner}|{uuid.uuid4().hex}"

    def _hold(self, ref: str, token: str) -> None:
        """Note that this processor holds ``ref``'s lock (:meth:`heartbeat` extends it)."""
        lock = self.redis.lock(self.keys.lock(ref), timeout=self.settings.lock_timeout,
                               thread_local=False)
        lock.local.token = token.encode()
        with self._held_guard:
            self._held[ref] = lock

    def _unhold(self, ref: str | None) -> None:
        if ref is not None:
            with self._held_guard:
                self._held.pop(ref, None)

    def _let_go(self, ref: str | None, token: str) -> None:
        """After an error mid-drain: release ``ref``'s lock and list it as ready again."""
        if ref is None:
            return
        try:
            self.inboxes.let_go(ref, token)
        except redis.RedisError as exc:
            log.warning("work item lock for %s not released (%s); it expires, or the reaper "
                        "takes it back", ref, type(exc).__name__)

    def _handle_step(self, step: Step) -> tuple[Handled, tuple[str, str, bool, bool, str]]:
        """Handle the delivery ``step`` took; returns what happened and the ``done`` of
        the next :meth:`the_loop.inbox.drain.Inboxes.step` (then ``more``)."""
        ref, delivery_id, record = step.ref, step.delivery_id, step.record
        if record is None:
            # Only bookkeeping left of an expired record (or nothing): drop it, pop it.
            handled = Handled(delivery_id, "ignored", "delivery record expired or already handled")
            return handled, (ref, delivery_id, True, step.leftover, "more")
        handled = self._handle_record(record, step.attempt, not step.first)
        succeeded = handled.outcome not in ("retrying", "failed")
        # A failed attempt stays at its inbox head (the retry drains on) -- except in the
        # shared inbox, whose deliveries keep no order: the retry puts it back there.
        keep = handled.outcome == "retrying" and ref != SHARED_INBOX
        return handled, (ref, delivery_id, not keep, succeeded, "release" if keep else "more")

    def drain(self, ref: str) -> list[Handled]:
        """Handle ``ref``'s inbox in order while holding its lock.

        Returns at once when the lock is held (its holder re-checks the inbox as it lets
        go, in the same atomic step), or the work item waits for a retry's backoff (the
        scheduled retry lists it again) or is held by a parked delivery. The lock expires
        after ``lock_timeout`` seconds unless extended (:meth:`heartbeat`).
        """
        token = self._token()
        handled: list[Handled] = []
        step = self.inboxes.step(token, take=ref)
        if step.what != "ok":
            return handled
        self._hold(ref, token)
        try:
            while step.what == "ok":
                outcome, done = self._handle_step(step)
                handled.append(outcome)
                step = self.inboxes.step(token, done=done)
                self._note(step)
        except BaseException:
            self._let_go(ref, token)
            raise
        finally:
            self._unhold(ref)
        return handled

    def dispatch(self, budget: float | None = None) -> list[Handled]:
        """One wake-up: take work items off the ready list and drain each (as
        :meth:`drain` does) until the list is empty or ``budget`` seconds
        (``dispatch_budget``) are used up; then, if work is left, queue a wake-up job.

        ``P:wake`` is deleted first, so the next activation queues another wake-up job
        and an idle worker joins in; while the ready list is long and no wake-up is
        pending, this one queues one too.
        """
        budget = self.settings.dispatch_budget if budget is None else budget
        self.inboxes.clear_wake()
        deadline = time.monotonic() + budget
        token = self._token()
        handled: list[Handled] = []
        current: str | None = None
        step = self.inboxes.step(token, ready=DISPATCH_SKIP)
        try:
            while True:
                self._note(step)
                if step.what != "ok":
                    if step.what == "idle" and step.ready and time.monotonic() < deadline:
                        # Every ref popped was locked, held or empty; more are listed.
                        step = self.inboxes.step(token, ready=DISPATCH_SKIP)
                        continue
                    break
                if step.ref != current:
                    self._unhold(current)
                    current = step.ref
                    self._hold(current, token)
                if step.ready and not step.wake_pending:
                    self.inboxes.ensure_wake()  # more work than this worker: wake another
                outcome, done = self._handle_step(step)
                handled.append(outcome)
                if time.monotonic() < deadline:
                    step = self.inboxes.step(token, done=done, ready=DISPATCH_SKIP)
                else:
                    if done[4] == "more":
                        done = (*done[:4], "yield")
                    step = self.inboxes.step(token, done=done)
                    self._note(step)
                    self._unhold(current)
                    current = None
                    break
        except BaseException:
            self._let_go(current, token)
            raise
        finally:
            self._unhold(current)
            clear_log_context()  # the job's own lines are about no one delivery
        if step.ready:
            self.inboxes.ensure_wake()
        return handled

    def _note(self, step: Step) -> None:
        if step.done in ("lost", "changed"):
            log.warning("work item lock was %s while draining; stopping that work item",
                        "lost" if step.done == "lost" else "kept but its inbox changed")

    def heartbeat(self) -> int:
        """Extend every work item lock this processor holds (called every third of
        ``lock_timeout`` by ``the-loop worker``); returns how many were extended."""
        with self._held_guard:
            held = list(self._held.items())
        extended = 0
        for ref, lock in held:
            try:
                lock.reacquire()
                extended += 1
            except redis.exceptions.LockError:
                log.warning("work item lock for %s was lost while held", ref)
        return extended

    # -- one delivery ------------------------------------------------------------------

    def _handle_record(self, record: DeliveryRecord, attempt: int, replay: bool) -> Handled:
        """Handle one delivery whose attempt ``attempt`` was counted (``replay``: an
        earlier attempt had started); a failure is retried later or parked
        (:meth:`_failed`). Does not touch the record's key."""
        delivery_id, event = record.delivery_id, record.event
        bind_log_context(delivery_id, record.work_item)
        if attempt > self.settings.delivery_attempts:
            # Its earlier attempts never finished (the worker died each time).
            reason = (f"processing did not finish in {attempt - 1} attempts "
                      "(the worker stopped each time)")
            handled = self._failed(delivery_id, event, record, reason, attempt - 1)
        else:
            try:
                handled = self.handle(record, replay=replay)
            except IntegrationError as exc:
                # Our own message (operation, status, the fix); never a response body.
                reason = f"{exc.integration} {exc.op}: {exc}"
                (log.warning if exc.retriable else log.error)(
                    "delivery=%s event=%s failed (attempt %d): %s", delivery_id, event,
                    attempt, reason)
                handled = self._failed(delivery_id, event, record, reason, attempt)
            except Exception as exc:
                log.exception("delivery=%s event=%s failed (attempt %d)", delivery_id, event,
                              attempt)
                handled = self._failed(delivery_id, event, record, type(exc).__name__, attempt)
        log.info("delivery=%s event=%s work_item=%s outcome=%s detail=%s", delivery_id, event,
                 record.work_item or "-", handled.outcome, handled.detail)
        worker_metrics.count_handled(event, handled.outcome)
        return handled

    def _failed(
        self, delivery_id: str, event: str, record: DeliveryRecord, reason: str,
        attempt: int,
    ) -> Handled:
        """Retry ``delivery_id`` after a backoff, or park it once its attempts are used up
        (see :mod:`the_loop.inbox.dead`)."""
        ref = record.work_item
        if attempt < self.settings.delivery_attempts:
            delay = self.deliveries.schedule_retry(delivery_id, ref, attempt, reason)
            return Handled(delivery_id, "retrying",
                           f"attempt {attempt} failed ({reason}); retry in {delay:g} s")
        self.deliveries.park(delivery_id, event, ref, reason, attempt)
        return Handled(delivery_id, "failed", reason)

    def _received_before(self, ref: str, delivery_id: str) -> bool:
        """Whether ``ref``'s log already has ``delivery.received`` for ``delivery_id``
        (an earlier attempt logged it before it failed or its worker died)."""
        return any(e.type == "delivery.received" and e.caused_by == delivery_id
                   for e in reversed(self.store.events(ref)))

    def handle(self, record: DeliveryRecord, *, replay: bool = False) -> Handled:
        """Route and process one delivery record (what the receiver stored); ``replay``:
        an earlier attempt had started.

        Raises whatever processing raises (the caller records the failure).
        """
        delivery_id, event, action, ref = (record.delivery_id, record.event, record.action,
                                           record.work_item)
        chosen = route(event, action)
        if chosen.kind == IGNORE:
            # Decided by the route alone: the body is neither read from Redis nor parsed.
            return Handled(delivery_id, "ignored", chosen.reason)
        if record.body is None:  # the drain fetches it for routed events only
            body = self.inboxes.body(delivery_id)
            if body is None:
                return Handled(delivery_id, "ignored", "delivery record expired")
            record = replace(record, body=body)
        github_event = GitHubEvent.parse(event, record.payload())
        ci = github_event.ci
        if ci is not None:
            store = RedisCI(self.redis, self.settings.prefix, ci.repository)
            store.record(ci)
            if chosen.kind == CI_ONLY and ref is None:
                # A commit status names no pull request: re-drive the work items whose
                # head is that commit, each through its own inbox (order is kept).
                fanned = self._fan_out(record, store.work_items(ci.sha))
                return Handled(delivery_id, "ignored",
                               f"recorded {ci.name}={ci.conclusion} for {ci.sha[:12]}; "
                               f"re-driving {fanned} work item(s)")
        if chosen.kind == CONFIG:
            return self._on_push(delivery_id, github_event)
        if ref is None:
            return Handled(delivery_id, "ignored", "no issue or pull request in this delivery")
        work_ref = WorkItemRef.parse(ref)
        installation_id = github_event.installation_id
        github = self._github_or_none(installation_id)
        repo = str(github_event.repository)
        repo_config = (self._repo_config(github, repo, github_event.default_branch or "main")
                       if github is not None else RepoConfig())
        label = repo_config.enrolment_label(self.settings)
        if chosen.kind == LABELS or self._is_phase_label_event(github_event, action):
            return self._on_labels(delivery_id, ref, github_event, github)
        if chosen.kind == WITHDRAW:
            return self._on_withdrawn(delivery_id, work_ref, github_event, github)
        enrolled = self._carries_enrolment_label(github_event, label)
        if chosen.kind == DRIVE and not enrolled:
            return Handled(delivery_id, "ignored", f"not a work item (no {label!r} label)")
        if chosen.kind != DRIVE and self.store.load(ref) is None:  # drive-if-enrolled, CI
            return Handled(delivery_id, "ignored", "not a work item")
        if github is None:
            github = self._github(installation_id)  # raises, naming the variables to set
        config = self._hook_config(github, github_event, work_ref, repo_config)
        item = github_event.work_item(work_ref, repo_config.spec_dir(self.settings))
        inbound = github_event.inbound(delivery_id)
        if not (replay and self._received_before(ref, delivery_id)):
            self.store.append_event(ref, "delivery.received", {
                "event": event,
                "action": action,
                "delivery": delivery_id,
                "actor": inbound.actor,
                "body_sha256": inbound.body_sha256,
            }, delivery_id)
        react = self._reactor(github, repo, inbound, config)
        react("started")
        try:
            if chosen.kind == DRIVE:
                result = self.runtime.enrol(item, config, inbound)
            else:
                maybe = self.runtime.advance(item, config, inbound)
                if maybe is None:
                    return Handled(delivery_id, "ignored", "not a work item")
                result = maybe
        except Exception:
            react("error")
            raise
        worker_metrics.observe_advance(result)
        self._after(item, github, result, installation_id, react)
        return Handled(delivery_id, "advanced", f"{result.status} at {result.node}")

    def _after(self, item: WorkItem, github: Integration, result: AdvanceResult,
               installation_id: int | None, react: Callable[[str], None]) -> None:
        """Side effects that follow a saved advance: alarms, the `decided` reaction, and
        the installation id `graph force` needs."""
        state = self.store.load(item.ref)
        if state is None:
            return
        for chain in result.chains:
            for r in chain.results:
                if r.data.get("alarm") == "edited-by-other":
                    self.store.append_event(item.ref, "alarm", {
                        "kind": "edited-by-other", "node": chain.node}, None)
                    self._comment(github, item, f"{item.ref}/alarm/{len(state.decisions)}/"
                                  f"{chain.node}", ALARM_TEXT)
        # The decision comment itself is record-decision's (through the outbox).
        if any(self.graph.node(move.source).is_gate for move in result.moves):
            react("completed")
        if installation_id is not None and state.installation_id != installation_id:
            state.installation_id = installation_id  # `the-loop graph force` comments as the App
            self.store.save(state)

    def _comment(self, github: Integration, item: WorkItem, effect: str, text: str) -> None:
        """Post ``text`` once per ``effect`` (marker lookup first); failures are logged."""
        try:
            comments = github.call("list-comments", repo=item.repository, number=item.id)
            if any(find_effect(c.get("body")) == effect for c in comments["comments"]):
                return
            github.call("comment", repo=item.repository, number=item.id,
                        body=f"{text}\n\n{marker(effect)}")
        except Exception as exc:  # noqa: BLE001  (a notice must never wedge the graph)
            log.warning("comment %s not posted (%s)", effect, type(exc).__name__)
            self.store.append_event(item.ref, "notification.failed",
                                    {"channel": "github-comment", "error": type(exc).__name__},
                                    None)

    def _reactor(self, github: Integration, repo: str, inbound: InboundEvent,
                 config: HookConfig) -> Callable[[str], None]:
        """Reactions on the triggering comment, per ``routing.reactions``: only on comments
        by people authorized for some gate role (their text is never read for this)."""
        reactions = dict(self.settings.reactions)
        comment_id = inbound.comment_id
        authorized = inbound.actor and any(
            config.collaborators.is_authorized(inbound.actor, role)
            for role in config.collaborators.roles)
        enabled = (reactions.get("enabled") and comment_id and authorized
                   and inbound.kind.startswith(("issue_comment.", "pull_request_review_comment.")))

        def react(stage: str) -> None:
            if not enabled:
                return
            try:
                github.call("add-reaction", repo=repo, comment_id=comment_id,
                            content=str(reactions[stage]))
            except Exception as exc:  # noqa: BLE001  (a reaction must never wedge the graph)
                log.warning("reaction %s not added (%s)", stage, type(exc).__name__)

        return react

    def _on_withdrawn(self, delivery_id: str, work_ref: WorkItemRef, github_event: GitHubEvent,
                      github: Integration | None) -> Handled:
        """A deleted comment or a dismissed review withdraws what it said. Gates decide on
        the event that carries a decision, so a gate still waiting holds nothing from it;
        if its decision already moved the work item on, the-loop says so on the work item
        (moving back is an operator's `graph force`, never automatic)."""
        ref = work_ref.format()
        state = self.store.load(ref)
        if state is None:
            return Handled(delivery_id, "ignored", "not a work item")
        source_id = github_event.comment.id if github_event.comment else None
        decided = [d for d in state.decisions if d.get("comment_id") == source_id
                   and source_id is not None]
        dismissed = github_event.name == "pull_request_review"
        what = "review.dismissed" if dismissed else "feedback.withdrawn"
        self.store.append_event(ref, what, {
            "id": source_id, "decided": [d.get("node") for d in decided],
        }, delivery_id)
        if decided and github is not None:
            gate = decided[-1].get("node")
            item = github_event.work_item(work_ref)
            self._comment(github, item, f"{ref}/withdrawn/{source_id}", WITHDRAWN_TEXT.format(
                gate=gate, node=state.current_node, ref=ref,
                what="dismissed" if dismissed else "deleted"))
        return Handled(delivery_id, "ignored", f"{what}: recorded")

    @staticmethod
    def _is_phase_label_event(github_event: GitHubEvent, action: str | None) -> bool:
        return action in ("labeled", "unlabeled") and (github_event.label or "").startswith(
            PHASE_PREFIX)

    def _on_labels(self, delivery_id: str, ref: str, github_event: GitHubEvent,
                   github: Integration | None) -> Handled:
        """Phase labels changed by a person are noticed, not fought: the drift is recorded
        in the event log and the work item is told once how to move the phase properly.
        The-loop never re-adds the label in a loop (it sets labels only on entering a
        node)."""
        label = github_event.label or ""
        login = github_event.sender.login or ""
        if not label.startswith(PHASE_PREFIX):
            return Handled(delivery_id, "ignored", "label change does not move a work item")
        if github_event.sender.is_bot or login.casefold() in self.settings.bot_logins:
            return Handled(delivery_id, "ignored", "the-loop's own phase label change")
        state = self.store.load(ref)
        if state is None:
            return Handled(delivery_id, "ignored", "not a work item")
        action = github_event.action
        self.store.append_event(ref, "labels.drift", {
            "action": action, "label": label, "actor": login, "node": state.current_node,
        }, delivery_id)
        if github is not None and not any(
                e.type == "labels.drift-noted" for e in self.store.events(ref)):
            item = github_event.work_item(WorkItemRef.parse(ref))
            self._comment(github, item, f"{ref}/drift", DRIFT_TEXT.format(
                node=state.current_node, ref=ref))
            self.store.append_event(ref, "labels.drift-noted", {"node": state.current_node},
                                    delivery_id)
        return Handled(delivery_id, "ignored", f"phase label {action} by a person: recorded")

    # -- helpers -----------------------------------------------------------------------

    @staticmethod
    def _carries_enrolment_label(github_event: GitHubEvent, label: str) -> bool:
        if label in github_event.labels:
            return True
        return github_event.action == "labeled" and github_event.label == label

    def _github_or_none(self, installation_id: int | None) -> Integration | None:
        """The GitHub provider, or ``None`` without credentials or an installation."""
        if self.github is None:
            return None
        try:
            return self.github(installation_id)
        except IntegrationError:
            return None

    def _github(self, installation_id: int | None) -> Integration:
        if self.github is None:
            raise IntegrationError(
                "no GitHub credentials: set THE_LOOP_GITHUB_APP_ID and "
                "THE_LOOP_GITHUB_PRIVATE_KEY (or _PATH), or GH_TOKEN",
                integration="github", op="connect")
        return self.github(installation_id)

    def _hook_config(
        self, github: Integration, github_event: GitHubEvent, work_ref: WorkItemRef,
        repo_config: RepoConfig,
    ) -> HookConfig:
        repo = str(github_event.repository)
        default_branch = github_event.default_branch or "main"
        head, head_ref = github_event.head_sha, github_event.head_ref
        number = work_ref.number
        is_pr = github_event.kind == "pull_request"
        if github_event.kind != "issue" and not (head and head_ref):
            # An issue_comment on a PR, or a CI event, does not carry the head: ask once.
            try:
                pull = github.call("get-pull-request", repo=repo, number=number)
            except NotFound:
                pull = None  # an issue, not a pull request
            if pull is not None:
                is_pr = True
                head, head_ref = str(pull["head_sha"]), str(pull["head_ref"])

        def resolve_ref() -> str:
            # Artifacts are read at the PR head for a pull request, else the default branch.
            return head or default_branch

        ci = RedisCI(self.redis, self.settings.prefix, repo)
        if head and is_pr:
            ci.remember(head, work_ref.format())
        harness = repo_config.harness
        return HookConfig(
            harness=harness.as_dict(),
            policy=harness.as_dict(),
            collaborators=repo_config.collaborators,
            integrations={**self.integrations, "github": github},
            files=GitHubFiles(github, repo, resolve_ref),
            enrolment_label=repo_config.enrolment_label(self.settings),
            bot_logins=self.settings.bot_logins,
            ci=ci,
            head_sha=head,
            head_ref=head_ref,
            permissions=self._permissions(github, repo),
            trees=self._trees(github, repo),
            human_only=harness.requires_human,
            classifier=self.classifier,
        )

    def _permissions(self, github: Integration, repo: str) -> Callable[[str], str | None]:
        """login -> GitHub permission on ``repo``, cached for ``config_ttl`` seconds."""

        def permission(login: str) -> str | None:
            key = (repo, login.casefold())
            cached = self._permission_cache.get(key)
            if cached and cached[0] > time.monotonic():
                return cached[1]
            try:
                value = github.call("get-permission", repo=repo, login=login)["permission"]
            except IntegrationError as exc:
                log.warning("permission of a collaborator on %s unreadable (%s)", repo,
                            type(exc).__name__)
                return None  # fail closed: not authorized
            self._permission_cache[key] = (time.monotonic() + self.settings.config_ttl, value)
            return str(value)

        return permission

    @staticmethod
    def _trees(github: Integration, repo: str) -> Callable[[str], str | None]:
        """commit SHA -> tree SHA (to tell a rebase from new content)."""

        def tree(sha: str) -> str | None:
            if "get-commit" not in github.operations:
                return None
            try:
                return str(github.call("get-commit", repo=repo, sha=sha)["tree_sha"])
            except IntegrationError:
                return None

        return tree

    def _repo_config(self, github: Integration, repo: str, branch: str) -> RepoConfig:
        """``.the-loop/harness-config.yaml`` and ``collaborators.yaml`` from the default
        branch only (never from a PR branch under review). They are cached by the default
        branch's commit SHA: a push to the default branch records its new head in Redis
        (``P:head:OWNER/REPO``) for every worker; the files are read at that commit, and
        read again only when the head moves (checked once per ``config_ttl`` seconds, or
        every ``config_ttl`` seconds at the branch while no push has been seen). A broken
        file fails closed: nobody is authorized, and the error is logged naming file, key
        and fix."""
        now = time.monotonic()
        cached = self._repo_configs.get(repo)
        if cached and cached[0] > now:
            return cached[1]
        head = self.redis.get(self.keys.head(repo))
        ref = text(head) if head else branch
        if cached and head and cached[2] == ref:
            self._repo_configs[repo] = (now + self.settings.config_ttl, cached[1], ref)
            return cached[1]

        def read(path: str) -> str | None:
            try:
                return str(github.call("get-file", repo=repo, path=path, ref=ref)["text"])
            except NotFound:
                return None

        harness_text = read(HARNESS_CONFIG_PATH)
        try:
            harness = load_harness_config(harness_text, f"{repo}:{HARNESS_CONFIG_PATH}")
        except ConfigFileError as exc:
            log.error("%s", exc)
            harness, harness_text = load_harness_config(None), None
        try:
            collaborators = Collaborators.parse(read(COLLABORATORS_PATH),
                                                f"{repo}:{COLLABORATORS_PATH}")
        except ConfigFileError as exc:
            log.error("%s", exc)
            collaborators = Collaborators()
        config = RepoConfig(harness, collaborators, harness_text is not None)
        self._repo_configs[repo] = (time.monotonic() + self.settings.config_ttl, config, ref)
        return config

    def _fan_out(self, record: DeliveryRecord, refs: list[str]) -> int:
        """Queue ``record``'s payload again for each work item in ``refs`` (each through
        its own inbox, so order is kept)."""
        queue = self._fan_out_queue
        if queue is None or queue.prefix != self.settings.prefix:
            queue = self._fan_out_queue = DeliveryQueue(
                self.redis, queue_name=self.settings.queue, prefix=self.settings.prefix)
        count = 0
        for i, ref in enumerate(sorted(refs)):
            count += queue.put(replace(record, delivery_id=f"{record.delivery_id}-w{i}",
                                       action=None, received_at=time.time(), work_item=ref,
                                       attempts=0, last_error=None))
        return count

    def _on_push(self, delivery_id: str, github_event: GitHubEvent) -> Handled:
        repo = str(github_event.repository)
        default = f"refs/heads/{github_event.default_branch}"
        if github_event.pushed_ref == default and github_event.after:
            # Every worker reads the new head; its config is read at that commit.
            self.redis.set(self.keys.head(repo), github_event.after,
                           ex=30 * 24 * 3600)
            self._repo_configs.pop(repo, None)
            return Handled(delivery_id, "ignored", "default branch moved; config refreshed")
        return Handled(delivery_id, "ignored", "push does not move a work item")
