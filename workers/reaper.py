"""The reaper of one ``the-loop worker``, bound to its processor.

The duties (heartbeats, due retries, the inbox sweep, dead workers' wake-up jobs) are the
protocol's (:mod:`foundation.inbox.reaper`); what needs the processor is here: its lock
tokens carry the worker's name, and its heartbeat extends the locks it holds.
"""

from __future__ import annotations

from foundation.inbox import reaper
from foundation.inbox.enqueue import DeliveryQueue
from workers.drain import DeliveryProcessor
from workers.monitors import MonitorSweep
from workers.state import RedisStateStore

__all__ = ["Reaper"]


class Reaper(reaper.Reaper):
    """:class:`foundation.inbox.reaper.Reaper` for ``processor``.

    Args:
        processor: the worker's processor (its deliveries, held locks).
        worker_name: the RQ worker's name (also the owner in its lock tokens).
    """

    def __init__(self, processor: DeliveryProcessor, worker_name: str) -> None:
        super().__init__(processor.deliveries, worker_name, heartbeat=processor.heartbeat)
        self.processor = processor
        agent = processor.agent
        self.monitors = MonitorSweep(agent.store, agent.graph, DeliveryQueue(
            processor.redis, queue_name=processor.settings.queue,
            prefix=processor.settings.prefix)) if isinstance(agent.store, RedisStateStore) \
            else None
        self.reconciler = processor.reconciler
        if self.reconciler is not None:
            self.reconciler.owner = worker_name

    def round(self) -> dict[str, int]:
        """The protocol's round; the worker that wins it also sweeps the monitors of
        waiting gates (at most every :data:`workers.monitors.SWEEP_INTERVAL` seconds) and
        runs the reconciler of missed deliveries when it is due
        (:meth:`workers.reconcile.Reconciler.run_if_due`: every
        ``THE_LOOP_RECONCILE_INTERVAL``, one worker at a time); the beat has its own
        thread, so a long sweep or run never delays it."""
        counts = super().round()
        # A non-empty count means this worker won the round.
        if counts and self.monitors is not None and self.monitors.due():
            counts["reminders"] = len(self.monitors.sweep())
        if counts and self.reconciler is not None:
            run = self.reconciler.run_if_due()
            if run is not None:
                counts["recovered"] = len(run.asked)
        return counts

    def register(self) -> None:
        """Announce this worker; the processor's lock tokens name it from now on."""
        self.processor.owner = self.name
        super().register()
