"""The baseline for the ingest benchmark: a bare Flask app that only verifies the signature.

``POST /webhook`` reads the raw body, checks ``X-Hub-Signature-256`` with the same
:func:`webhook.signature.verify_signature` the receiver uses (secrets from
``THE_LOOP_WEBHOOK_SECRET``, comma-separated) and answers 202; 401 on a bad signature.
No header checks, no JSON parsing, no Redis, no logging.

Run (same gunicorn settings as the receiver)::

    THE_LOOP_WEBHOOK_SECRET=s .venv/bin/python -m gunicorn -c python:the_loop.gunicorn_conf \\
        --bind 127.0.0.1:8001 --pythonpath benchmarks bare_app:app
"""

from __future__ import annotations

import os

from flask import Flask, Response, request

from webhook.events import SignatureError
from webhook.signature import verify_signature

_SECRETS = tuple(
    s.strip().encode() for s in os.environ.get("THE_LOOP_WEBHOOK_SECRET", "").split(",")
    if s.strip()
)
if not _SECRETS:
    raise SystemExit("bare_app: set THE_LOOP_WEBHOOK_SECRET")

app = Flask(__name__)
_ACCEPTED = b'{"ok": true}'
_REJECTED = b'{"ok": false}'


@app.post("/webhook")
def webhook() -> Response:
    body = request.get_data(cache=False)
    try:
        verify_signature(body, request.headers.get("X-Hub-Signature-256"), _SECRETS)
    except SignatureError:
        return Response(_REJECTED, 401, mimetype="application/json")
    return Response(_ACCEPTED, 202, mimetype="application/json")
