"""WSGI entry point: ``gunicorn -c webhook/gunicorn_conf.py webhook.wsgi:app``.

Settings come from the environment (see :class:`webhook.settings.ReceiverSettings`);
a missing ``THE_LOOP_WEBHOOK_SECRET`` stops the worker at boot with a message saying
how to set it. ``THE_LOOP_LOG_LEVEL`` (default INFO) sets the level of the one line
logged per delivery, unless logging was configured already.
"""

from __future__ import annotations

import logging
import os

from webhook.app import create_app

if not logging.getLogger().handlers:
    logging.basicConfig(
        level=os.environ.get("THE_LOOP_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )

app = create_app()
