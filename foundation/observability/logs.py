"""Log lines of the receiver and the worker: JSON lines (default) or text, on stdout.

``THE_LOOP_LOG_FORMAT`` is ``json`` (the default: one JSON object per line, for a log
collector) or ``text`` (``make run`` sets it); ``THE_LOOP_LOG_LEVEL`` (default ``INFO``)
is the level. A JSON line has ``timestamp`` (UTC, ISO 8601), ``level``, ``logger`` and
``message``, plus ``delivery_id`` and ``work_item`` whenever they are known, and
``exc_info`` with a traceback.

The delivery id and work item travel in two :mod:`contextvars`: the receiver binds them
per request, the worker per delivery it handles (:func:`bind`), and a filter on the
handler copies them onto every record, from whichever logger (the-loop's, the graph's,
RQ's, PyGithub's). Nothing here logs payload bodies or secrets; callers never pass them.

Used by ``the_loop/gunicorn_conf.py`` (``logconfig_dict``) and by ``the-loop worker``
(:func:`configure`), with the settings :class:`foundation.settings.Settings` read and
validated. This module imports only the standard library (and, when the JSON
format is configured, ``python-json-logger``): gunicorn's master loads it.
"""

from __future__ import annotations

import logging
import logging.config
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from foundation.settings import LogSettings

__all__ = [
    "DELIVERY_ID",
    "WORK_ITEM",
    "ContextFilter",
    "ThirdPartyFilter",
    "bind",
    "clear",
    "configure",
    "json_formatter",
    "lean_records",
    "logging_dict",
    "text_formatter",
]

DELIVERY_ID: ContextVar[str | None] = ContextVar("the_loop_delivery_id", default=None)
WORK_ITEM: ContextVar[str | None] = ContextVar("the_loop_work_item", default=None)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_JSON_FIELDS = "%(levelname)s %(name)s %(message)s"
_JSON_RENAMES = {"levelname": "level", "name": "logger"}


def bind(delivery_id: str | None, work_item: str | None = None) -> None:
    """Put ``delivery_id`` and ``work_item`` on every log line of this thread/context
    from now on (``None`` leaves the field out)."""
    DELIVERY_ID.set(delivery_id)
    WORK_ITEM.set(work_item)


def clear() -> None:
    """Drop the delivery id and work item from the context."""
    DELIVERY_ID.set(None)
    WORK_ITEM.set(None)


class ContextFilter(logging.Filter):
    """Copy the bound delivery id and work item onto each record (when set).

    Attached to handlers, so it sees records of every logger that reaches them.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        delivery_id = DELIVERY_ID.get()
        if delivery_id is not None:
            record.delivery_id = delivery_id
        work_item = WORK_ITEM.get()
        if work_item is not None:
            record.work_item = work_item
        return True


#: Loggers whose INFO lines are the-loop's own story: its packages, RQ's job lines and
#: gunicorn's. Every other logger (PyMarkdown, urllib3, PyGithub...) is a library's.
OWN_LOGGERS = ("graph", "foundation", "integrations", "webhook", "workers", "runner",
               "the_loop", "rq", "gunicorn", "__main__")


class ThirdPartyFilter(logging.Filter):
    """Keep a library's records at WARNING and above only, unless the process logs at
    DEBUG: at INFO, PyMarkdown (run by ``lint-artifacts``) writes one record per line of
    the artifact it lints, which would flood the worker's log with artifact text. Attached
    to the handler, so the root logger's level stays as configured and a library's
    warnings and errors still come through.

    Args:
        level: the process's ``THE_LOOP_LOG_LEVEL`` name (``DEBUG`` lets every record by).
    """

    def __init__(self, level: str = "INFO") -> None:
        super().__init__()
        self.everything = str(level).upper() == "DEBUG"

    def filter(self, record: logging.LogRecord) -> bool:
        if self.everything or record.levelno >= logging.WARNING:
            return True
        top = record.name.split(".", 1)[0]
        return top in OWN_LOGGERS or record.name == "root"


def json_formatter() -> logging.Formatter:
    """One JSON object per record: ``timestamp``, ``level``, ``logger``, ``message``, then
    ``delivery_id``/``work_item`` (when bound), any ``extra=`` fields and ``exc_info``.
    The standard library's encoder, not orjson's: orjson refuses a lone surrogate in a
    string (which the standard library's JSON parser lets into a payload's text) and an
    integer past 64 bits, and the line would be lost."""
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(_JSON_FIELDS, rename_fields=dict(_JSON_RENAMES), timestamp=True)


def lean_records() -> None:
    """Stop :mod:`logging` from looking up the thread and process of every record (module
    flags ``logThreads``, ``logProcesses``, ``logMultiprocessing``): neither format here
    shows them, and under gevent the thread lookup costs more than the JSON encoding.
    For a process whose every log line goes through :func:`logging_dict`'s formats (the
    receiver)."""
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def text_formatter() -> logging.Formatter:
    """``TIME LEVEL LOGGER MESSAGE``, as before JSON lines existed."""
    return logging.Formatter(TEXT_FORMAT)


def logging_dict(settings: LogSettings, *, gunicorn: bool = False) -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` dictionary: one stdout handler on the root
    logger, in the format and at the level ``settings`` give.

    Args:
        settings: ``THE_LOOP_LOG_FORMAT`` and ``THE_LOOP_LOG_LEVEL``, as read (and
            validated) by :class:`foundation.settings.Settings`.
        gunicorn: also route gunicorn's ``gunicorn.error`` and ``gunicorn.access`` loggers
            to that handler (gunicorn's ``logconfig_dict``).
    """
    fmt, level = settings.format, settings.level
    formatter = {"()": json_formatter if fmt == "json" else text_formatter}
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": ContextFilter},
                    "libraries": {"()": ThirdPartyFilter, "level": level}},
        "formatters": {"the_loop": formatter},
        "handlers": {
            "stdout": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stdout",
                "formatter": "the_loop",
                "filters": ["context", "libraries"],
            },
        },
        "root": {"level": level, "handlers": ["stdout"]},
        # RQ adds its own (coloured, stderr) handlers unless a handler is already in
        # effect; configured here, its lines come through ours.
        "loggers": {"rq": {"level": level, "propagate": True}},
    }
    if gunicorn:
        # Configured loggers lose gunicorn's own handlers: their lines reach ours once.
        config["loggers"].update({
            "gunicorn.error": {"level": level, "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "INFO", "handlers": [], "propagate": True},
        })
    return config


def configure(settings: LogSettings) -> None:
    """Configure logging for a the-loop process (``the-loop worker``) as ``settings``
    say (:attr:`foundation.settings.Settings.logging`)."""
    logging.config.dictConfig(logging_dict(settings))
    if settings.format == "json":
        # JSON: keep RQ's terminal colour codes out of the message text.
        from rq.logutils import colorizer

        colorizer.notty = True

