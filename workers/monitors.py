"""The worker's monitor sweep: waiting gates whose reminder is due get a
:data:`foundation.events.MONITOR_EVENT` delivery in their inbox (:mod:`graph.monitors`).

The sweep only *finds* them; the reminder itself is sent by the runtime when the worker
processes that delivery, in order with the work item's other deliveries, with the
repository's configuration (who to remind) like any delivery. The delivery id is derived
from the work item, the gate visit and the freshness period, so the receiver's dedupe
marker makes it one delivery per period however many sweeps see it; the outbox and
``WorkItemState.reminders`` make it one reminder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from foundation.events import MONITOR_EVENT
from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.record import DeliveryRecord
from foundation.turns import RUNNER_SENDER
from graph.model import Graph
from graph.monitors import due_reminder
from graph.refs import RefError, WorkItemRef
from graph.state import StateError
from workers.state import RedisStateStore

log = logging.getLogger("the_loop.monitors")

#: Seconds between two sweeps of one worker (the reaper round that wins runs it).
SWEEP_INTERVAL = 60.0


def reminder_id(ref: str, node: str, visit: int, period: int) -> str:
    """The delivery id of a reminder (``[A-Za-z0-9-]``, deterministic)."""
    digest = hashlib.sha256(f"{ref}\n{node}\n{visit}\n{period}".encode()).hexdigest()[:32]
    return f"monitor-{digest}"


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

    def sweep(self) -> list[str]:
        """One sweep over every work item's state. Returns the refs given a reminder
        delivery now."""
        self._last = now = self.clock()
        queued = []
        keys = self.store.keys
        for key in self.store.redis.scan_iter(match=keys.state_match, count=500):
            ref = (key.decode() if isinstance(key, bytes) else str(key)).removeprefix(
                keys.state_prefix)
            try:
                state = self.store.load(ref)
                parsed = WorkItemRef.parse(ref)
            except (StateError, RefError):
                continue  # unreadable state is rebuilt when the item is next processed
            if state is None:
                continue
            period = due_reminder(state, self.graph, now)
            if period is None:
                continue
            payload = {"action": "stale", "repository": {"full_name": parsed.repository},
                       "issue": {"number": parsed.number}, "sender": RUNNER_SENDER,
                       "monitor": {"node": state.current_node, "period": period}}
            if state.installation_id is not None:
                payload["installation"] = {"id": state.installation_id}
            if self.inbox.put(DeliveryRecord(
                    delivery_id=reminder_id(ref, state.current_node, state.visit, period),
                    event=MONITOR_EVENT, action="stale", received_at=now,
                    installation_id=state.installation_id, repository=parsed.repository,
                    work_item=ref, body=json.dumps(payload).encode())):
                queued.append(ref)
        if queued:
            log.info("monitors: reminders due for %s", ", ".join(queued))
        return queued
