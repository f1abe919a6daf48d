"""Helpers shared by the observability tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> {(sample name, sorted labels): value}."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(parsed: dict, name: str, **labels: str) -> float | None:
    return parsed.get((name, tuple(sorted(labels.items()))))


def wait_until(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "it") -> Any:
    """Poll ``predicate`` every 50 ms until it returns something truthy (returned) or
    ``timeout`` seconds pass (AssertionError naming ``what``): a generous deadline for a
    loaded machine, and a wait that ends as soon as the condition holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
