"""RQ jobs, run by import path.

``dispatch`` is the wake-up job the receiver (and a dispatcher with work left, the
reaper, a due retry, ``the-loop deliveries retry|discard``) queues: it drains the inboxes
on the ready list (:meth:`workers.service.DeliveryProcessor.dispatch`); it is the only job
the-loop queues (:mod:`the_loop.inbox.wake`).
"""

from __future__ import annotations

import os
import threading

from rq import get_current_job

from workers.service import DeliveryProcessor

_lock = threading.Lock()
_processor: DeliveryProcessor | None = None


def install(processor: DeliveryProcessor | None) -> None:
    """Make ``processor`` the one jobs use (the worker does this at start-up, so a bad
    graph or setting fails the worker before it takes a job)."""
    global _processor
    with _lock:
        _processor = processor


def current_processor() -> DeliveryProcessor:
    """The installed processor, built from the environment on first use."""
    global _processor
    with _lock:
        if _processor is None:
            from workers.bootstrap import build_processor

            job = get_current_job()
            _processor = build_processor(os.environ, job.connection if job else None)
        return _processor


def dispatch() -> str:
    """One wake-up: drain the ready work items' inboxes until the ready list is empty or
    ``THE_LOOP_DISPATCH_BUDGET`` seconds are used up (then another wake-up is queued).

    Returns a one-line summary (RQ keeps no result: ``result_ttl=0``). A delivery whose
    processing fails is retried later or parked by the processor; the job succeeds.
    """
    handled = current_processor().dispatch()
    outcomes: dict[str, int] = {}
    for h in handled:
        outcomes[h.outcome] = outcomes.get(h.outcome, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())) or "nothing to do"

