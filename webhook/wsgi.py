"""WSGI entry point: ``gunicorn -c webhook/gunicorn_conf.py webhook.wsgi:app``.

Settings come from the environment, read once (:class:`the_loop.settings.Settings`); a
missing ``THE_LOOP_WEBHOOK_SECRET`` stops the worker at boot with a message saying how to
set it. Unless logging was configured already (gunicorn_conf.py does),
``THE_LOOP_LOG_FORMAT`` and ``THE_LOOP_LOG_LEVEL`` configure it
(:mod:`the_loop.observability.logs`).
"""

from __future__ import annotations

import logging
import os

from the_loop.observability.logs import configure, lean_records
from the_loop.settings import Settings
from the_loop.wiring import build_receiver

settings = Settings.from_env(os.environ, process="receiver")
if not logging.getLogger().handlers:
    configure(settings.logging)
lean_records()

app = build_receiver(settings)
