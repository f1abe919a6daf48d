"""WSGI entry point: ``gunicorn -c the_loop/gunicorn_conf.py the_loop.wsgi:app``.

Settings come from the environment, read once (:class:`foundation.settings.Settings`); a
missing ``THE_LOOP_WEBHOOK_SECRET`` stops the worker at boot with a message saying how to
set it. Unless logging was configured already (gunicorn_conf.py does),
``THE_LOOP_LOG_FORMAT`` and ``THE_LOOP_LOG_LEVEL`` configure it
(:mod:`foundation.observability.logs`).
"""

from __future__ import annotations

import logging
import os

from foundation.observability.logs import configure, lean_records
from foundation.settings import Settings
from the_loop.wiring import build_receiver

settings = Settings.from_env(os.environ, process="receiver")
if not logging.getLogger().handlers:
    configure(settings.logging)
lean_records()

app = build_receiver(settings)
