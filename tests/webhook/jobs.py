"""Job functions RQ can import by path, for tests that run a real worker."""

from __future__ import annotations

from rq import get_current_job

recorded: list[tuple[str, str, str | None]] = []
woken: list[str] = []


def record_delivery(delivery_id: str, event: str, work_item: str | None) -> None:
    """Stand-in for ``workers.jobs.process_delivery``: records its arguments."""
    recorded.append((delivery_id, event, work_item))


def record_wake() -> None:
    """Stand-in for ``workers.jobs.dispatch`` (no arguments): records its job id."""
    job = get_current_job()
    woken.append(job.id if job else "?")
