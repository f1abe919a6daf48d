"""Prometheus metrics of the worker, served by ``the-loop worker`` on its own port.

``THE_LOOP_WORKER_METRICS_PORT`` (default 9101; ``0`` turns it off) on ``THE_LOOP_HOST``
(default ``0.0.0.0``) serves ``/metrics`` from a thread (prometheus-client's
``start_http_server``). Metrics (labels in braces):

- ``the_loop_job_duration_seconds{event}``: wall time of one RQ job; ``event`` is
  ``dispatch`` for a wake-up job (it drains many work items' deliveries), the GitHub
  event for a job of the job-per-delivery days;
- ``the_loop_worker_deliveries_total{event, outcome}``: deliveries handled, ``outcome``
  ``advanced``, ``ignored``, ``failed``, ``escalated`` or ``invalid`` (its payload did not
  match its event's schema);
- ``the_loop_worker_payload_checks_total{event, result}``: payloads checked against their
  event's schema (:mod:`foundation.webhook_schema`), ``result`` ``valid``, ``invalid`` or
  ``unvalidated`` (no schema for the event, or GitHub Enterprise Server);
- ``the_loop_hook_results_total{hook, status}``: hook results (``pass``, ``block``,
  ``wait``, ``skip``) of every chain the runtime ran, counted from its ``AdvanceResult``;
- ``the_loop_reconcile_runs_total{outcome}``: runs of the reconciler
  (:mod:`workers.reconcile`) on this worker, ``outcome`` ``done``, ``partial`` (its
  bounds stopped it: the next run reads the same window again) or ``error``;
- ``the_loop_deliveries_recovered_total{reason}``: deliveries the reconciler asked
  GitHub to redeliver, ``reason`` ``failed`` (GitHub recorded no OK attempt) or
  ``unreceived`` (delivered OK, but Redis holds no record of it);
- ``the_loop_reconcile_last_run_timestamp_seconds``: when this worker last ran it;
- the transport metrics of :mod:`integrations.metrics`, and prometheus-client's own
  ``process_*`` and ``python_*`` metrics.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics import disable_created_metrics

from foundation.inbox.wake import DISPATCH_FUNC
from foundation.observability.metric_labels import OTHER, event_label
from graph.runtime import AdvanceResult

__all__ = [
    "count_handled",
    "count_payload_check",
    "count_reconcile",
    "event_of_job",
    "is_dispatch",
    "observe_advance",
    "observe_job",
    "start_server",
]

log = logging.getLogger("the_loop.worker")

OUTCOMES = frozenset({"advanced", "ignored", "failed", "escalated", "invalid"})
CHECK_RESULTS = frozenset({"valid", "invalid", "unvalidated"})
HOOK_STATUSES = frozenset({"pass", "block", "wait", "skip"})

disable_created_metrics()

JOB_SECONDS = Histogram(
    "the_loop_job_duration_seconds",
    "Wall time of one RQ job: a wake-up (event dispatch) or a delivery job by GitHub event.",
    ("event",),
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
)
DELIVERIES = Counter(
    "the_loop_worker_deliveries",
    "Deliveries handled by the worker by GitHub event and outcome.",
    ("event", "outcome"),
)
PAYLOAD_CHECKS = Counter(
    "the_loop_worker_payload_checks",
    "Payloads checked against their event's published JSON Schema, by event and result.",
    ("event", "result"),
)
HOOK_RESULTS = Counter(
    "the_loop_hook_results",
    "Hook results by hook and status.",
    ("hook", "status"),
)
RECONCILE_RUNS = Counter(
    "the_loop_reconcile_runs",
    "Runs of the reconciler of missed webhook deliveries, by outcome.",
    ("outcome",),
)
RECOVERED = Counter(
    "the_loop_deliveries_recovered",
    "Deliveries the reconciler asked GitHub to redeliver, by reason.",
    ("reason",),
)
RECONCILE_LAST_RUN = Gauge(
    "the_loop_reconcile_last_run_timestamp_seconds",
    "Unix time this worker last ran the reconciler.",
)
RECONCILE_OUTCOMES = frozenset({"done", "partial", "error"})
RECOVERED_REASONS = frozenset({"failed", "unreceived"})


DISPATCH_LABEL = "dispatch"


def is_dispatch(job: Any) -> bool:
    """Whether ``job`` is a wake-up job (:data:`foundation.inbox.wake.DISPATCH_FUNC`)."""
    try:
        return bool(job.func_name == DISPATCH_FUNC)
    except Exception:  # noqa: BLE001  (RQ reports an unreadable job itself)
        return False


def event_of_job(job: Any) -> str:
    """The event label of an RQ job: ``dispatch`` for a wake-up job (the only job the-loop
    queues), ``other`` for anything else."""
    return DISPATCH_LABEL if is_dispatch(job) else OTHER


def observe_job(job: Any, seconds: float) -> None:
    """Record one finished (or failed) job's wall time."""
    JOB_SECONDS.labels(event_of_job(job)).observe(seconds)


def count_handled(event: str, outcome: str) -> None:
    """Count one handled delivery."""
    DELIVERIES.labels(event_label(event), outcome if outcome in OUTCOMES else "other").inc()


def count_payload_check(event: str, result: str) -> None:
    """Count one payload schema check (``valid``, ``invalid`` or ``unvalidated``)."""
    PAYLOAD_CHECKS.labels(event_label(event),
                          result if result in CHECK_RESULTS else "other").inc()


def observe_advance(result: AdvanceResult) -> None:
    """Count the hook results of every chain in ``result``. Hook names are the graph
    registry's (plus ``runtime`` for the runtime's own verdicts): a bounded set."""
    for chain in result.chains:
        for hook_result in chain.results:
            status = hook_result.status if hook_result.status in HOOK_STATUSES else "other"
            HOOK_RESULTS.labels(hook_result.hook, status).inc()


def start_server(port: int, host: str = "0.0.0.0") -> Any | None:
    """Serve the worker's metrics on ``port`` (``THE_LOOP_WORKER_METRICS_PORT``) at
    ``host`` (``THE_LOOP_HOST``), as :class:`foundation.settings.MetricsSettings` read them.

    Returns:
        the server (call ``shutdown()`` to stop it), or ``None`` when the port is 0 or
        taken (a warning says so; the worker runs on without metrics).
    """
    if port == 0:
        return None
    try:
        server, _thread = start_http_server(port, addr=host)
    except OSError as exc:
        log.warning("worker metrics not served: %s:%d is not available (%s); set %s to "
                    "a free port, or 0", host, port, exc.strerror or type(exc).__name__,
                    "THE_LOOP_WORKER_METRICS_PORT")
        return None
    log.info("worker metrics on http://%s:%d/metrics", host, port)
    return server


def count_reconcile(outcome: str, recovered: dict[str, int], at: float) -> None:
    """One reconciler run: its ``outcome`` (``done``, ``partial``, ``error``), the
    deliveries it asked GitHub for by reason, and when it ran (Unix seconds)."""
    RECONCILE_RUNS.labels(outcome if outcome in RECONCILE_OUTCOMES else OTHER).inc()
    for reason, count in recovered.items():
        if count:
            RECOVERED.labels(reason if reason in RECOVERED_REASONS else OTHER).inc(count)
    RECONCILE_LAST_RUN.set(at)
