"""A job function RQ can import by path, for tests that run a real worker."""

from __future__ import annotations

recorded: list[tuple[str, str, str | None]] = []


def record_delivery(delivery_id: str, event: str, work_item: str | None) -> None:
    """Stand-in for ``workers.jobs.process_delivery``: records its arguments."""
    recorded.append((delivery_id, event, work_item))
