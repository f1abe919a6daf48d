"""RQ's stock workers for the worker benchmark's comparison runs.

the-loop's jobs take their processor from the worker running them (``workers.jobs``), so
stock RQ cannot run them as they are: these two classes are RQ's ``SimpleWorker`` and
forking ``Worker`` with only that added -- the processor built once at start-up by the
composition root, from the environment the benchmark gives the command -- and RQ's own
loop, dequeueing and job handling otherwise. Run with ``rq worker -P benchmarks -w
stock_rq.SimpleWorker`` (or ``stock_rq.Worker``).
"""

from __future__ import annotations

import os
from typing import Any

import rq

from foundation.settings import Settings
from the_loop.wiring import build_worker
from workers import jobs


class _WithProcessor:
    processor: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self.processor = build_worker(Settings.from_env(os.environ, process="worker"),
                                      self.connection)  # type: ignore[attr-defined]

    def execute_job(self, job: Any, queue: Any) -> None:
        with jobs.running_with(self.processor):  # a forked child inherits the context
            super().execute_job(job, queue)  # type: ignore[misc]


class SimpleWorker(_WithProcessor, rq.SimpleWorker):
    """RQ's in-process worker."""


class Worker(_WithProcessor, rq.Worker):
    """RQ's forking worker (one fork per job)."""
