"""RQ jobs, run by import path.

``dispatch`` is the wake-up job the receiver (and a dispatcher with work left, the
reaper, a due retry, ``the-loop deliveries retry|discard``) queues: it drains the inboxes
on the ready list (:meth:`workers.drain.DeliveryProcessor.dispatch`); it is the only job
the-loop queues (:mod:`foundation.inbox.wake`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from graph.errors import LoopError

if TYPE_CHECKING:
    from workers.drain import DeliveryProcessor

#: The processor of the worker running the current job (set by
#: :meth:`workers.worker.LoopWorker.execute_job` for the job's duration).
_PROCESSOR: ContextVar[DeliveryProcessor | None] = ContextVar("the_loop_processor",
                                                              default=None)


class NoProcessor(LoopError, RuntimeError):
    """A the-loop job ran outside a :class:`workers.worker.LoopWorker` (e.g. ``rq
    worker``), which is the one that carries the processor."""


@contextmanager
def running_with(processor: DeliveryProcessor) -> Iterator[None]:
    """Make ``processor`` the one the jobs run in this context use (the worker wraps each
    job in it)."""
    token = _PROCESSOR.set(processor)
    try:
        yield
    finally:
        _PROCESSOR.reset(token)


def current_processor() -> DeliveryProcessor:
    """The processor of the worker running this job.

    Raises:
        NoProcessor: the job is not run by a :class:`workers.worker.LoopWorker`.
    """
    processor = _PROCESSOR.get()
    if processor is None:
        raise NoProcessor("the-loop jobs run in `the-loop worker` (workers.worker.LoopWorker), "
                          "which carries the processor built at start-up; not in `rq worker`")
    return processor


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

