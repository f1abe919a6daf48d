"""The worker's monitor sweep: waiting gates whose reminder is due get a
:data:`foundation.events.MONITOR_EVENT` delivery in their inbox (:mod:`graph.monitors`),
action ``stale``; a work item whose waiting hook asked to be evaluated again at a time
(:func:`graph.monitors.wake_at`: ``verify-tests``'s ``timeout``) gets one of action
``due`` when that time comes, so the hook runs with no new event from GitHub.

The sweep only *finds* them; the reminder itself is sent by the runtime when the worker
processes that delivery, in order with the work item's other deliveries, with the
repository's configuration (who to remind) like any delivery. The delivery id is derived
from the work item, the gate visit and the freshness period, so the receiver's dedupe
marker makes it one delivery per period however many sweeps see it; the outbox and
``WorkItemState.reminders`` make it one reminder.

A sweep costs O(work items due), not O(work items): it reads only the entries of the
state store's index ``P:state-due`` whose time has come (:meth:`RedisStateStore.due`, at
most :data:`SWEEP_BATCH`), loads those, and moves each to the time it next needs looking
at (:func:`graph.monitors.reminder_due_at`), or out of the index when it no longer waits.
Once per graph digest (states saved before the index existed; a graph whose freshness
changed) the first sweep builds the index from every state
(:meth:`RedisStateStore.backfill`: one ``SCAN``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from foundation.events import MONITOR_EVENT
from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.record import DeliveryRecord
from foundation.turns import RUNNER_SENDER
from graph.model import Graph
from graph.monitors import due_reminder, reminder_due_at, waiting_data, wake_at
from graph.refs import RefError, WorkItemRef
from graph.state import StateError, WorkItemState
from workers.state import WAITING_STATUSES, RedisStateStore

log = logging.getLogger("the_loop.monitors")

#: Seconds between two sweeps of one worker (the reaper round that wins runs it).
SWEEP_INTERVAL = 60.0
#: At most this many due work items are looked at in one sweep (the rest stay due: the
#: next sweep takes them, earliest first).
SWEEP_BATCH = 1000


def reminder_id(ref: str, node: str, visit: int, period: int) -> str:
    """The delivery id of a reminder (``[A-Za-z0-9-]``, deterministic)."""
    digest = hashlib.sha256(f"{ref}\n{node}\n{visit}\n{period}".encode()).hexdigest()[:32]
    return f"monitor-{digest}"


def due_id(ref: str, node: str, visit: int, at: float) -> str:
    """The delivery id of a waiting hook's time having come (deterministic: one
    delivery per wake-up time, however many sweeps see it)."""
    digest = hashlib.sha256(f"{ref}\n{node}\n{visit}\ndue\n{at!r}".encode()).hexdigest()
    return f"monitor-due-{digest[:32]}"


@dataclass
class MonitorSweep:
    """Finds the waiting gates whose reminder is due.

    Args:
        store: the work items' state; graph: the deployed graph; inbox: where the
        deliveries go; clock: Unix seconds.
    """

    store: RedisStateStore
    graph: Graph
    inbox: DeliveryQueue
    clock: Callable[[], float] = time.time
    _last: float = field(default=0.0, repr=False)

    def due(self) -> bool:
        """Whether :data:`SWEEP_INTERVAL` passed since this sweep last ran."""
        return self.clock() - self._last >= SWEEP_INTERVAL

    def next_look(self, state: WorkItemState, reminded: int | None = None) -> float:
        """When the sweep should next look at waiting ``state``: when its next reminder
        falls due after the ``reminded`` periods (default: those it records)
        (:func:`graph.monitors.reminder_due_at`); ``math.inf``: never by time (its next
        save indexes it again)."""
        times = [t for t in (reminder_due_at(state, self.graph, reminded=reminded),
                             wake_at(state)) if t is not None]
        return min(times) if times else math.inf

    def sweep(self) -> list[str]:
        """One sweep over the waiting work items that are due (see the module docstring).
        Returns the refs given a reminder delivery now."""
        self._last = now = self.clock()
        store = self.store
        if not store.backfilled(self.graph.digest):
            written = store.backfill(self.graph.digest, self.next_look)
            log.info("monitors: indexed %d waiting work items", written)
        queued = []
        for ref, seen in store.due(now, SWEEP_BATCH):
            try:
                parsed = WorkItemRef.parse(ref)
            except RefError:
                store.reschedule(ref, seen, None)  # not a work item's
                continue
            try:
                state = store.load(ref)
            except StateError:
                # Rebuilt when the item is next processed; that save indexes it again.
                store.reschedule(ref, seen, math.inf)
                continue
            if state is None or state.status not in WAITING_STATUSES:
                store.reschedule(ref, seen, None)
                continue
            period = due_reminder(state, self.graph, now)
            if period is not None and self._remind(ref, parsed, state, period, now):
                queued.append(ref)
            woken = wake_at(state)
            if woken is not None and woken <= now:
                if self._wake(ref, parsed, state, woken, now):
                    queued.append(ref)
                # Evaluated by that delivery, whose save indexes the item again; until
                # then only a reminder's time can be due.
                at = reminder_due_at(state, self.graph, reminded=period)
                store.reschedule(ref, seen, math.inf if at is None else at)
                continue
            # After the delivery is queued (a failed put leaves the entry due): the next
            # period's time.
            store.reschedule(ref, seen, self.next_look(state, period))
        if queued:
            log.info("monitors: reminders due for %s", ", ".join(queued))
        return queued

    def _wake(self, ref: str, parsed: WorkItemRef, state: WorkItemState, at: float,
              now: float) -> bool:
        """Queue the delivery that evaluates ``state`` again at ``at`` (action ``due``),
        naming the head commit and branch the wait was about (the wait's ``sha`` and
        ``branch``: what the exit chain evaluates); ``False``: it was queued before (the
        same delivery id)."""
        waited = waiting_data(state)
        monitor: dict[str, Any] = {"node": state.current_node, "at": at}
        for key, field_ in (("head_sha", "sha"), ("branch", "branch")):
            if isinstance(waited.get(field_), str):
                monitor[key] = waited[field_]
        return self._put(ref, parsed, state, "due", monitor,
                         due_id(ref, state.current_node, state.visit, at), now)

    def _remind(self, ref: str, parsed: WorkItemRef, state: WorkItemState, period: int,
                now: float) -> bool:
        """Queue the reminder delivery of ``state``'s ``period``; ``False``: it was queued
        before (the same delivery id)."""
        return self._put(ref, parsed, state, "stale",
                         {"node": state.current_node, "period": period},
                         reminder_id(ref, state.current_node, state.visit, period), now)

    def _put(self, ref: str, parsed: WorkItemRef, state: WorkItemState, action: str,
             monitor: dict[str, Any], delivery_id: str, now: float) -> bool:
        """Queue the monitor's own delivery ``action`` (``due``, ``stale``) of ``ref``
        with its ``monitor`` facts, under ``delivery_id``; ``False``: it was queued before
        (the same delivery id)."""
        payload: dict[str, Any] = {
            "action": action, "repository": {"full_name": parsed.repository},
            "issue": {"number": parsed.number}, "sender": RUNNER_SENDER, "monitor": monitor}
        if state.installation_id is not None:
            payload["installation"] = {"id": state.installation_id}
        return self.inbox.put(DeliveryRecord(
            delivery_id=delivery_id, event=MONITOR_EVENT, action=action, received_at=now,
            installation_id=state.installation_id, repository=parsed.repository,
            work_item=ref, body=json.dumps(payload).encode()))
