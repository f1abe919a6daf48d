"""Prometheus metrics of the receiver, served at ``GET /metrics``.

Under gunicorn every worker process writes its counters to files in
``PROMETHEUS_MULTIPROC_DIR`` (``the_loop/gunicorn_conf.py`` sets and clears it) and a
scrape merges them (prometheus-client's multiprocess mode); without it (the Flask test
client, a single process) the process's default registry is served.

Metrics (labels in braces):

- ``the_loop_webhook_deliveries_total{event, action, code}``: requests to
  ``POST /webhook`` by GitHub event, action and HTTP status answered;
- ``the_loop_webhook_signature_failures_total{reason}``: 401s for the signature,
  ``reason`` ``missing`` (no ``X-Hub-Signature-256``) or ``invalid`` (malformed, or no
  configured secret matches);
- ``the_loop_queue_depth{queue}``: deliveries waiting in the inboxes (every inbox in the
  index ``P:inboxes``: ready, being drained, or held for a retry or a parked delivery);
- ``the_loop_queue_oldest_job_age_seconds{queue}``: seconds since the oldest delivery of
  the work item at the head of the ready list arrived (0 when nothing is ready): how far
  behind the workers are. Both are read at scrape time with one Lua call.

Label values come from fixed sets (:mod:`foundation.observability.metric_labels`): an event
or action GitHub did not document for the App's events is counted as ``other``, an absent action
as ``none``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import redis as redis_lib
from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics import disable_created_metrics

from foundation.inbox.backlog import Backlog
from foundation.inbox.keys import Keys
from foundation.observability.metric_labels import action_label, event_label

__all__ = [
    "CONTENT_TYPE",
    "QueueCollector",
    "count_delivery",
    "count_signature_failure",
    "metrics_renderer",
]

log = logging.getLogger("the_loop.webhook")

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# Created-time series (``*_created``) double the series count and say nothing useful here.
disable_created_metrics()

DELIVERIES = Counter(
    "the_loop_webhook_deliveries",
    "Requests to POST /webhook by GitHub event, action and HTTP status code answered.",
    ("event", "action", "code"),
)
SIGNATURE_FAILURES = Counter(
    "the_loop_webhook_signature_failures",
    "Deliveries answered 401 for their signature: missing header, or invalid "
    "(malformed, or no configured secret matches).",
    ("reason",),
)

# (event, action, code) after capping -> the labelled child: the hot path pays a dict
# lookup, not prometheus-client's label handling. Bounded by the fixed label sets.
_children: dict[tuple[str, str, int], Any] = {}


def count_delivery(event: str | None, action: str | None, code: int) -> None:
    """Count one answered ``POST /webhook``."""
    key = (event_label(event), action_label(action), code)
    child = _children.get(key)
    if child is None:
        child = _children[key] = DELIVERIES.labels(key[0], key[1], str(code))
    child.inc()


_SIGNATURE_REASONS = {
    reason: SIGNATURE_FAILURES.labels(reason) for reason in ("missing", "invalid")
}


def count_signature_failure(header_present: bool) -> None:
    """Count one delivery refused for its signature."""
    _SIGNATURE_REASONS["invalid" if header_present else "missing"].inc()


class QueueCollector:
    """Queue depth and the age of the oldest queued job, read from Redis on each scrape.

    Args:
        redis: the receiver's Redis client (2 s timeouts).
        queue_name: the RQ queue name (the gauges' ``queue`` label).
        prefix: prefix of the-loop's keys (the inboxes, their index, the ready list).

    A scrape while Redis is unreachable leaves both gauges out (and ``/readyz`` fails).
    """

    def __init__(self, redis: redis_lib.Redis, queue_name: str, prefix: str) -> None:
        self.redis = redis
        self.queue_name = queue_name
        self.prefix = prefix
        self._backlog = Backlog(redis, Keys(prefix, queue_name))

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        try:
            depth, age = self._read()
        except redis_lib.RedisError as exc:
            log.warning("metrics: queue depth unavailable (%s)", type(exc).__name__)
            return
        depth_metric = GaugeMetricFamily(
            "the_loop_queue_depth", "Deliveries waiting in the inboxes.", labels=("queue",))
        depth_metric.add_metric((self.queue_name,), depth)
        age_metric = GaugeMetricFamily(
            "the_loop_queue_oldest_job_age_seconds",
            "Seconds since the oldest delivery of the first ready work item arrived "
            "(0 when nothing is ready).",
            labels=("queue",))
        age_metric.add_metric((self.queue_name,), age)
        yield depth_metric
        yield age_metric

    def _read(self) -> tuple[int, float]:
        depth, received = self._backlog.read()
        if received is None:
            return depth, 0.0
        return depth, max(0.0, time.time() - received)


class _Forward:
    """A collector that yields another registry's metrics (the process's default one)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        return self.registry.collect()


def metrics_renderer(
    redis: redis_lib.Redis, queue_name: str, prefix: str, multiproc_dir: str | None = None
) -> Callable[[], bytes]:
    """The body of ``GET /metrics`` for one app: the receiver's counters (merged across
    gunicorn workers from ``multiproc_dir``, ``PROMETHEUS_MULTIPROC_DIR``, when given) and
    the queue gauges."""
    registry = CollectorRegistry()
    if multiproc_dir:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry, path=multiproc_dir)
    else:
        registry.register(_Forward(REGISTRY))
    registry.register(QueueCollector(redis, queue_name, prefix))

    def render() -> bytes:
        return generate_latest(registry)

    return render
