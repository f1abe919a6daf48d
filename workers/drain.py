"""The worker's drain loop: take deliveries off the inboxes, in order, one work item at a
time, and hand each to its route's handler (:mod:`workers.routes`).

Deliveries of one work item are processed one at a time, in arrival order, even with
several workers: the receiver appends each delivery id to the work item's inbox list
(and, when that made the inbox non-empty, lists the work item as ready and queues a
wake-up job), and whichever worker holds the work item's lock drains the inbox
head-first. A wake-up job (:meth:`DeliveryProcessor.dispatch`) takes work items off the
ready list until it is empty or the job's time budget is used up; see
:mod:`foundation.inbox.drain`. A delivery whose handling fails is retried after a backoff or,
its attempts used up, parked (:mod:`foundation.inbox.dead`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import redis

from foundation.events import GitHubEvent
from foundation.inbox.dead import Deliveries
from foundation.inbox.drain import SHARED_INBOX, Inboxes, Step
from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.record import DeliveryRecord
from foundation.observability.logs import bind as bind_log_context
from foundation.observability.logs import clear as clear_log_context
from foundation.settings import WorkerSettings
from foundation.webhook_schema import INVALID, UNVALIDATED, PayloadSchemas
from graph.model import Status
from graph.ports import Integration, IntegrationError
from graph.refs import WorkItemRef
from graph.state import StateStore
from integrations.github_cache import delivery_scope
from workers import metrics as worker_metrics
from workers.repo_context import RepoContext
from workers.router import IGNORE, Route, route
from workers.routes import HANDLERS, Agent, Delivery, GitHubFactory, Handled, admit
from workers.state import LockLost, RedisStateStore

if TYPE_CHECKING:
    from workers.reconcile import Reconciler

__all__ = ["DISPATCH_SKIP", "DeliveryProcessor", "GitHubFactory", "Handled", "fan_out",
           "forward", "retry_wait"]

log = logging.getLogger("the_loop.worker")

#: Operations whose failure is the deployment's (no credentials, no installation id): a
#: fixed deployment makes them succeed, so they are retried and parked as before, never
#: escalated as a work item's problem.
DEPLOYMENT_OPS = frozenset({"connect", "authenticate"})

#: Ready refs one step may pop looking for a delivery (locked, held or empty ones are
#: dropped from the list: their holder, a retry or an operator lists them again).
DISPATCH_SKIP = 50


class DeliveryProcessor:
    """Drain queued deliveries and hand each to its route's handler.

    Built by the composition root (:func:`the_loop.wiring.build_processor`), which makes
    every collaborator once and hands them in.

    Args:
        settings: worker settings.
        connection: Redis client (the RQ connection).
        agent: what the route handlers use (state store, runtime, repository context,
            notices, the GitHub provider, the fan-out).
        inboxes: the inboxes, ready list and wake-ups (the drain steps).
        deliveries: retries and parked deliveries.
        schemas: the payload schemas every routed delivery is checked against before
            it is processed (default: github.com's).

    No I/O happens in the constructor. What the handlers use is :attr:`agent`'s; the
    state store, the GitHub provider, the repository context and the integrations are
    also reachable here, for callers outside the worker.
    """

    def __init__(self, settings: WorkerSettings, connection: redis.Redis, agent: Agent,
                 inboxes: Inboxes, deliveries: Deliveries,
                 schemas: PayloadSchemas | None = None) -> None:
        self.settings = settings
        self.schemas = schemas or PayloadSchemas()
        self._unvalidated_noted: set[str] = set()
        self.redis = connection
        self.agent = agent
        self.inboxes = inboxes
        self.deliveries = deliveries
        self.keys = inboxes.keys
        # Who holds a work item lock (its token starts with this); `the-loop worker` sets
        # its RQ worker name, so a reaper can tell a dead holder's locks.
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._held: dict[str, Any] = {}
        self._held_guard = threading.Lock()
        #: The reconciler of missed deliveries its reaper runs when due (App mode:
        #: :func:`the_loop.wiring.build_worker`), or ``None``.
        self.reconciler: Reconciler | None = None
        #: Set when the worker is told to stop (SIGTERM): a wake-up finishes the
        #: delivery in hand and takes no other (:meth:`dispatch`).
        self.stopping = threading.Event()

    @property
    def github(self) -> GitHubFactory | None:
        """installation id -> GitHub provider; ``None`` without credentials."""
        return self.agent.github

    @property
    def store(self) -> StateStore:
        """The state store."""
        return self.agent.store

    @property
    def repos(self) -> RepoContext:
        """The repository context."""
        return self.agent.repos

    @property
    def integrations(self) -> Mapping[str, Integration]:
        """Providers other than GitHub (``slack``, ``jira``), shared by every work item."""
        return self.agent.repos.integrations

    def _token(self) -> str:
        return f"{self.owner}|{uuid.uuid4().hex}"

    def _hold(self, ref: str, token: str) -> None:
        """Note that this processor holds ``ref``'s lock (:meth:`heartbeat` extends it)."""
        lock = self.redis.lock(self.keys.lock(ref), timeout=self.settings.lock_timeout,
                               thread_local=False)
        lock.local.token = token.encode()
        with self._held_guard:
            self._held[ref] = lock
        if isinstance(self.store, RedisStateStore):
            self.store.fence(ref, token)  # its writes now need the lock to hold token

    def _unhold(self, ref: str | None) -> None:
        if ref is not None:
            with self._held_guard:
                self._held.pop(ref, None)
            if isinstance(self.store, RedisStateStore):
                self.store.fence(ref, None)

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
        the next :meth:`foundation.inbox.drain.Inboxes.step` (then ``more``)."""
        ref, delivery_id, record = step.ref, step.delivery_id, step.record
        if record is None:
            # Only bookkeeping left of an expired record (or nothing): drop it, pop it.
            handled = Handled(delivery_id, "ignored", "delivery record expired or already handled")
            return handled, (ref, delivery_id, True, step.leftover, "more")
        try:
            handled = self._handle_record(record, step.attempt, not step.first, step.route)
        except LockLost as exc:
            # Another worker holds the work item now and handles this delivery: stop,
            # acknowledge nothing (the step finds the lock not ours and leaves it all).
            log.warning("delivery=%s %s; stopping that work item", delivery_id, exc)
            handled = Handled(delivery_id, "lost", "the work item's lock was taken over")
            return handled, (ref, delivery_id, False, False, "release")
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
        (``dispatch_budget``) are used up, or the worker is told to stop
        (:attr:`stopping`: the delivery in hand is finished, no other is taken); then, if
        work is left, queue a wake-up job (another worker takes it).

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
                if time.monotonic() < deadline and not self.stopping.is_set():
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

    def _handle_record(self, record: DeliveryRecord, attempt: int, replay: bool,
                       route_kind: str) -> Handled:
        """Handle one delivery whose attempt ``attempt`` was counted (``replay``: an
        earlier attempt had started; ``route_kind``: the drain step's route, ``""`` for
        none); a failure is retried later or parked (:meth:`_failed`). Does not touch the
        record's key."""
        delivery_id, event = record.delivery_id, record.event
        bind_log_context(delivery_id, record.work_item)
        if attempt > self.settings.delivery_attempts:
            # Its earlier attempts never finished (the worker died each time).
            reason = (f"processing did not finish in {attempt - 1} attempts (the worker "
                      "stopped each time: killed, or frozen and ended by its watchdog; "
                      "see the workers' logs)")
            handled = self._failed(delivery_id, event, record, reason, attempt - 1)
        else:
            try:
                handled = self.handle(record, replay=replay, route_kind=route_kind)
            except LockLost:
                raise  # not this delivery's failure: another worker has its work item
            except IntegrationError as exc:
                # Our own message (operation, status, the fix); never a response body.
                reason = f"{exc.integration} {exc.op}: {exc}"
                (log.warning if exc.retriable else log.error)(
                    "delivery=%s event=%s failed (attempt %d): %s", delivery_id, event,
                    attempt, reason)
                if exc.retriable or exc.op in DEPLOYMENT_OPS:
                    handled = self._failed(delivery_id, event, record, reason, attempt,
                                           wait=retry_wait(exc))
                else:
                    handled = self._refused(delivery_id, event, record, reason, attempt)
            except Exception as exc:
                log.exception("delivery=%s event=%s failed (attempt %d)", delivery_id, event,
                              attempt)
                handled = self._failed(delivery_id, event, record, type(exc).__name__, attempt)
        log.info("delivery=%s event=%s work_item=%s outcome=%s detail=%s", delivery_id, event,
                 record.work_item or "-", handled.outcome, handled.detail)
        worker_metrics.count_handled(event, handled.outcome)
        return handled

    def _refused(self, delivery_id: str, event: str, record: DeliveryRecord, reason: str,
                 attempt: int) -> Handled:
        """A failure that cannot succeed on a retry (GitHub's 403 for a missing
        permission, 404 of a repository the App lost, 410, 422...): never retried, and it
        never holds the work item's later deliveries. The work item is escalated with the
        reason (a person must step in); a delivery of no work item (or of one without
        state yet) is parked without holding anything, for the operator to see."""
        ref = record.work_item
        state = self.store.load(ref) if ref else None
        if state is None:
            self.deliveries.park(delivery_id, event, None, f"not retriable: {reason}",
                                 attempt)
            return Handled(delivery_id, "failed", f"not retriable: {reason}")
        state.status = Status.ESCALATED
        state.escalated = {"node": state.current_node, "reason": reason, "at": time.time(),
                           "delivery": delivery_id}
        self.store.save(state)
        self.store.append_event(state.ref, "work-item.escalated", {
            "node": state.current_node, "reason": reason, "delivery": delivery_id,
            "event": event}, delivery_id)
        log.error("delivery=%s event=%s work_item=%s escalated, not retried: %s",
                  delivery_id, event, state.ref, reason)
        return Handled(delivery_id, "escalated", f"not retriable: {reason}")

    def _failed(
        self, delivery_id: str, event: str, record: DeliveryRecord, reason: str,
        attempt: int, *, wait: float = 0.0,
    ) -> Handled:
        """Retry ``delivery_id`` after a backoff (at least ``wait`` seconds: what GitHub
        asked for), or park it once its attempts are used up (see
        :mod:`foundation.inbox.dead`)."""
        ref = record.work_item
        if attempt < self.settings.delivery_attempts:
            delay = self.deliveries.schedule_retry(delivery_id, ref, attempt, reason,
                                                   at_least=wait)
            return Handled(delivery_id, "retrying",
                           f"attempt {attempt} failed ({reason}); retry in {delay:g} s")
        self.deliveries.park(delivery_id, event, ref, reason, attempt)
        return Handled(delivery_id, "failed", reason)

    def handle(self, record: DeliveryRecord, *, replay: bool = False,
               route_kind: str | None = None) -> Handled:
        """Hand one delivery record (what the receiver stored) to its route's handler
        (:data:`workers.routes.HANDLERS`).

        Args:
            record: the delivery.
            replay: an earlier attempt had started.
            route_kind: the route the drain step decided from the router's table
                (``""``: none, the delivery is ignored); ``None`` (a record handed in
                directly): routed here.

        The body is read (from Redis when the drain step left it out) and parsed once,
        into a :class:`foundation.events.GitHubEvent`, only for a routed event, after it
        was checked against its event's schema (:meth:`_invalid`).

        Raises whatever the handler raises (the caller retries or parks the delivery).
        """
        chosen: Route | None = None
        if route_kind is None:
            chosen = route(record.event, record.action)
            kind = chosen.kind
        else:
            kind = route_kind
        if kind in ("", IGNORE):
            # Decided by the route alone: the body is neither read from Redis nor parsed
            # (the router only says why, for the log).
            return Handled(record.delivery_id, "ignored",
                           (chosen or route(record.event, record.action)).reason)
        if record.body is None:  # the drain fetches it for routed events only
            body = self.inboxes.body(record.delivery_id)
            if body is None:
                return Handled(record.delivery_id, "ignored", "delivery record expired")
            record = replace(record, body=body)
        payload = record.payload()
        invalid = self._invalid(record, payload)
        if invalid is not None:
            return invalid
        # The work item is the record's (the receiver derived it, or a fan-out set it).
        event = GitHubEvent.parse(record.event, payload,
                                  WorkItemRef.parse_or_none(record.work_item))
        with delivery_scope():  # a GitHub resource is read once per delivery
            admitted = admit(self.agent, Delivery(record, event, replay))
            if isinstance(admitted, Handled):
                return admitted
            return HANDLERS[kind](self.agent, admitted)

    def _invalid(self, record: DeliveryRecord, payload: Any) -> Handled | None:
        """Check ``payload`` against its event's schema (:mod:`foundation.webhook_schema`);
        for one that does not match, record it (``the-loop deliveries failed`` lists it),
        log the failing path and return its ``invalid`` outcome: acknowledged, never
        processed, retried or parked, holding nothing. ``None``: go on. A record the
        worker queued itself (``derived``) was checked as the delivery it came from."""
        if record.derived:
            return None
        check = self.schemas.check(record.event, record.action, payload)
        worker_metrics.count_payload_check(record.event, check.outcome)
        if check.outcome == UNVALIDATED:
            if record.event not in self._unvalidated_noted:  # once per event and process
                self._unvalidated_noted.add(record.event)
                log.info("event=%s payloads pass unvalidated: %s", record.event,
                         check.reason)
            return None
        if check.outcome != INVALID:
            return None
        path, rule = check.path or "$", check.rule or "schema"
        # An action the schema refused is payload text: it is not recorded.
        action = None if path == "$.action" else record.action
        self.deliveries.record_invalid(record.delivery_id, record.event, action,
                                       record.work_item, path, rule)
        log.warning("delivery=%s event=%s work_item=%s invalid payload at %s (%s); "
                    "acknowledged, not processed", record.delivery_id, record.event,
                    record.work_item or "-", path, rule)
        return Handled(record.delivery_id, "invalid", check.reason)


def retry_wait(exc: IntegrationError, now: float | None = None) -> float:
    """Seconds a retriable failure asks to wait before the next attempt: ``Retry-After``
    (``retry_after``), else until ``x-ratelimit-reset`` (``reset_at``), else 0 (GitHub's
    "Rate limits for the REST API": wait at least that long after a secondary limit
    or a 429)."""
    waits = [0.0]
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, int | float):
        waits.append(float(retry_after))
    reset_at = getattr(exc, "reset_at", None)
    if isinstance(reset_at, int | float):
        waits.append(float(reset_at) - (time.time() if now is None else now))
    return max(waits)


def forward(queue: DeliveryQueue, record: DeliveryRecord, ref: str) -> int:
    """Queue ``record`` again, as it is (action kept), for work item ``ref`` (its own
    inbox, in order with its others); returns 1, or 0 when an earlier attempt forwarded
    it already (the id ``<delivery>-to`` is deduplicated as any delivery id)."""
    return int(queue.put(replace(record, delivery_id=f"{record.delivery_id}-to",
                                 received_at=time.time(), work_item=ref, attempts=0,
                                 last_error=None, derived=True)))


def fan_out(queue: DeliveryQueue, record: DeliveryRecord, refs: list[str]) -> int:
    """Queue ``record`` again through ``queue`` for each work item in ``refs`` (each
    through its own inbox, so order is kept; its action is kept, so it is routed as the
    original); returns how many were queued (a fan-out already made by an earlier
    attempt is not queued twice)."""
    count = 0
    for i, ref in enumerate(sorted(refs)):
        count += queue.put(replace(record, delivery_id=f"{record.delivery_id}-w{i}",
                                   received_at=time.time(), work_item=ref,
                                   attempts=0, last_error=None, derived=True))
    return count
