"""WSGI entry point: ``gunicorn -c webhook/gunicorn_conf.py webhook.wsgi:app``.

Settings come from the environment (see :class:`webhook.settings.ReceiverSettings`);
a missing ``THE_LOOP_WEBHOOK_SECRET`` stops the worker at boot with a message saying
how to set it. Unless logging was configured already (gunicorn_conf.py does),
``THE_LOOP_LOG_FORMAT`` and ``THE_LOOP_LOG_LEVEL`` configure it
(:mod:`the_loop.observability.logs`).
"""

from __future__ import annotations

import logging

from the_loop.observability.logs import configure
from webhook.app import create_app

if not logging.getLogger().handlers:
    configure()

app = create_app()
