"""Secrets come from the environment and stay in the transports: a work item driven through
the real receiver, worker and GitHub transport (against the loopback fake GitHub) leaves
none of them in the state, the event log, the hook context or the logs."""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from rq import Queue

import integrations.github  # noqa: F401  (PyGithub sets its log level on import: first)
from foundation.settings import Settings
from tests.conftest import act_as, gh_label, load_payload, sign_body
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from the_loop.wiring import build_receiver, build_worker
from workers.state import RedisStateStore
from workers.worker import LoopWorker

REPO = "Codertocat/Hello-World"
REF = f"github:{REPO}#1"
APP_ID = 4711
INSTALLATION = 99
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"

WEBHOOK_SECRET = "whsec-" + uuid.uuid4().hex
GH_TOKEN = "ghp_" + uuid.uuid4().hex
SLACK_TOKEN = "xoxb-" + uuid.uuid4().hex
SLACK_WEBHOOK = "https://hooks.slack.com/services/T0/B0/" + uuid.uuid4().hex
JIRA_TOKEN = "jira-" + uuid.uuid4().hex


def _pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _payload(event: str, name: str, **changes: Any) -> dict[str, Any]:
    p = load_payload(event, name)
    p["installation"] = {"id": INSTALLATION}
    p["issue"]["labels"].append(gh_label("the-loop"))
    return p


def _redis_dump(ns: Any) -> str:
    """Every value stored under the test's keys, as text."""
    client, parts = ns.client, []
    for key in ns.existing_keys():
        kind = client.type(key).decode()
        if kind == "string":
            parts.append(client.get(key))
        elif kind == "hash":
            parts.extend(b"%s=%s" % kv for kv in client.hgetall(key).items())
        elif kind == "list":
            parts.extend(client.lrange(key, 0, -1))
        elif kind == "set":
            parts.extend(client.smembers(key))
        elif kind == "zset":
            parts.extend(client.zrange(key, 0, -1))
        elif kind == "stream":
            for _id, fields in client.xrange(key):
                parts.extend(b"%s=%s" % kv for kv in fields.items())
        parts.append(key.encode())
    return b"\n".join(p if isinstance(p, bytes) else str(p).encode() for p in parts).decode(
        "utf-8", "replace")


def test_context_carries_no_secret_values(
    redis_ns: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # PyGithub caps its own logger at INFO; an operator debugging may lower it, and its
    # DEBUG lines would then carry response bodies (installation access tokens).
    caplog.set_level(logging.DEBUG, logger="github")
    pem = _pem()
    fake = HttpFakeGitHub(app_id=APP_ID, installations=[INSTALLATION], app_key=pem)
    fake.add_repo(REPO, default_branch="master")
    fake.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS)
    fake.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    fake.set_permission(REPO, "Codertocat", "write")
    url, stop = serve(fake)
    env = {
        "REDIS_URL": redis_ns.url,
        "THE_LOOP_REDIS_PREFIX": redis_ns.prefix,
        "THE_LOOP_QUEUE": redis_ns.queue_name,
        "THE_LOOP_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "THE_LOOP_GITHUB_API_URL": url,
        "THE_LOOP_GITHUB_APP_ID": str(APP_ID),
        "THE_LOOP_GITHUB_PRIVATE_KEY": pem,
        "GH_TOKEN": GH_TOKEN,
        "THE_LOOP_GITHUB_WRITE_INTERVAL": "0",
        "THE_LOOP_GITHUB_READ_INTERVAL": "0",
        "THE_LOOP_SLACK_TOKEN": SLACK_TOKEN,
        "THE_LOOP_SLACK_WEBHOOK_URL": SLACK_WEBHOOK,
        "THE_LOOP_JIRA_URL": "https://jira.example.com",
        "THE_LOOP_JIRA_USER": "bot@example.com",
        "THE_LOOP_JIRA_TOKEN": JIRA_TOKEN,
    }
    secrets = {
        "webhook secret": WEBHOOK_SECRET,
        "GitHub token": GH_TOKEN,
        "private key": pem,
        "private key body": pem.splitlines()[5],
        "Slack token": SLACK_TOKEN,
        "Slack webhook URL": SLACK_WEBHOOK,
        "Slack webhook secret part": SLACK_WEBHOOK.rsplit("/", 1)[1],
        "Jira token": JIRA_TOKEN,
    }
    contexts: list[str] = []
    try:
        app = build_receiver(Settings.from_env(env, process="receiver"),
                             connection=redis_ns.client)
        client = app.test_client()
        processor = build_worker(Settings.from_env(env, process="worker"), redis_ns.client)
        assert set(processor.integrations) == {"slack", "jira"}
        built = processor.repos.hook_config

        def capture(*args: Any, **kwargs: Any) -> Any:
            config = built(*args, **kwargs)
            contexts.append(repr(config))
            return config

        processor.repos.hook_config = capture  # type: ignore[method-assign]

        def enrol() -> dict[str, Any]:
            payload = _payload("issues", "labeled")
            payload["label"] = gh_label("the-loop")
            return payload

        def approve() -> dict[str, Any]:
            # Stamped once the enrolment is processed: a reply made before the gate
            # visit began never decides it.
            payload = act_as(_payload("issue_comment", "created"), "Codertocat")
            payload["comment"]["body"] = "/approve"
            return payload

        for event, make in (("issues", enrol), ("issue_comment", approve)):
            body = json.dumps(make()).encode()
            response = client.post("/webhook", data=body, headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": str(uuid.uuid4()),
                "X-Hub-Signature-256": sign_body(body, WEBHOOK_SECRET),
            })
            assert response.status_code == 202, response.get_json()
            worker = LoopWorker([Queue(redis_ns.queue_name, connection=redis_ns.client)],
                                connection=redis_ns.client, name=f"w-{redis_ns.new_id()}",
                                processor=processor)
            worker.work(burst=True, with_scheduler=False)
    finally:
        stop()

    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    state = store.load(REF)
    assert state is not None and state.current_node == "design"  # it really ran
    assert fake.token_requests and fake.actions  # through the App's installation token
    assert contexts

    stored = _redis_dump(redis_ns)
    events = json.dumps([vars(e) if hasattr(e, "__dict__") else repr(e)
                         for e in store.events(REF)], default=repr)
    logs = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    comments = json.dumps(fake.comments(REPO, 1))
    places = {"state and event log in Redis": stored, "event log": events,
              "hook context": "\n".join(contexts), "logs": logs, "GitHub comments": comments}
    for where, text in places.items():
        for what, value in secrets.items():
            assert value not in text, f"{what} found in {where}"
    issued = [r for r in fake.requests if r.path.endswith("/access_tokens")]
    assert issued
    for where, text in places.items():  # the fake's tokens: ghs_ and 36 alphanumerics
        assert not re.search(r"ghs_[A-Za-z0-9]{36}", text), (
            f"an installation access token found in {where}")
