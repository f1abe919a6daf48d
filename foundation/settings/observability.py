"""Observability settings: Prometheus metrics and the log lines' format and level."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_METRICS_PORT = 9101
LOG_FORMATS = ("json", "text")
ENV_METRICS_PORT = "THE_LOOP_WORKER_METRICS_PORT"


@dataclass(frozen=True)
class MetricsSettings:
    """Prometheus metrics.

    Attributes:
        worker_port: the worker's ``/metrics`` port, ``THE_LOOP_WORKER_METRICS_PORT``
            (default 9101, 0 = off).
        multiproc_dir: ``PROMETHEUS_MULTIPROC_DIR`` (the receiver's gunicorn workers'
            shared counters), or ``None``.
    """

    worker_port: int = DEFAULT_METRICS_PORT
    multiproc_dir: str | None = None


@dataclass(frozen=True)
class LogSettings:
    """``THE_LOOP_LOG_FORMAT`` (``json`` or ``text``) and ``THE_LOOP_LOG_LEVEL``."""

    format: str = "json"
    level: str = "INFO"
