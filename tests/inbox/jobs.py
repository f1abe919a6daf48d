"""Job functions RQ can import by path, for tests that run a real worker."""

from __future__ import annotations

from rq import get_current_job

woken: list[str] = []


def record_wake() -> None:
    """Stand-in for ``workers.jobs.dispatch`` (no arguments): records its job id."""
    job = get_current_job()
    woken.append(job.id if job else "?")
