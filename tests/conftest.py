"""Shared test helpers: an isolated Redis namespace, GitHub fixture payloads, signed posts.

Redis: tests use the real server at ``THE_LOOP_TEST_REDIS_URL`` (default
``redis://127.0.0.1:6379/14``), each with a unique token inside every key and queue name
they create, and delete only keys containing that token afterwards (never FLUSHDB).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from graph.signing import Signer

REPO_ROOT = Path(__file__).resolve().parent.parent
# Real GitHub payloads, kept in the repository (see tests/fixtures/github-webhooks/README.md).
FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures" / "github-webhooks"
# The processes tests start never read a developer's .env (the-loop app create's output).
os.environ["THE_LOOP_ENV_FILE"] = ""
TEST_REDIS_URL = os.environ.get("THE_LOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")
# Global RQ sets that collect members (queue keys, worker keys) from every test.
_SHARED_SETS = ("rq:queues", "rq:workers")


#: pytest-xdist workers of a run that names no ``-n`` (``THE_LOOP_TEST_WORKERS`` overrides):
#: the e2e tests mostly wait on their subprocesses, so on 2 cores 4 workers beat 2.
DEFAULT_WORKERS = int(os.environ.get("THE_LOOP_TEST_WORKERS", "4"))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Run in ``DEFAULT_WORKERS`` parallel processes, ``--dist loadgroup`` (so tests marked
    ``xdist_group`` share one worker), unless the command line names ``-n`` (``-n 0``:
    serially), xdist is off (``-p no:xdist``), this is a worker already, or every
    argument is a single test's node id (``path::test``: a worker pool would only add its
    start-up). Runs before xdist's own ``pytest_cmdline_main``, which turns ``-n`` into
    its workers."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if config.option.numprocesses is not None or DEFAULT_WORKERS <= 0:
        return
    args = config.args
    if args and all("::" in arg for arg in args):
        return
    config.option.numprocesses = DEFAULT_WORKERS
    if config.option.dist == "no":
        config.option.dist = "loadgroup"


def fixture_files() -> list[tuple[str, Path]]:
    """Every webhook payload fixture as ``(event, path)``; the event is the folder name."""
    return sorted(
        (path.parent.name, path) for path in FIXTURES_DIR.glob("*/*/*.json") if path.is_file()
    )


def load_payload(event: str, name: str, host: str = "api.github.com") -> dict[str, Any]:
    """The parsed fixture as the fake GitHub would send it now: the timestamps of its
    comment or review (``created_at``, ``updated_at``, ``submitted_at``) set to the
    current time, so it is a reply made during the gate visit a test is at (one made
    earlier never decides it), and the user ids of its sender and of the comment's or
    review's author the fake's for their logins (:func:`act_as`)."""
    import json
    from datetime import UTC, datetime

    payload: dict[str, Any] = json.loads(load_fixture(event, name, host))
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for key in ("comment", "review"):
        obj = payload.get(key)
        if isinstance(obj, dict):
            for field_ in ("created_at", "updated_at", "submitted_at"):
                if field_ in obj:
                    obj[field_] = stamp
    sender = payload.get("sender")
    if isinstance(sender, dict) and isinstance(sender.get("login"), str):
        act_as(payload, sender["login"], sender_only=True)
    for key in ("comment", "review"):
        user = payload.get(key, {}).get("user") if isinstance(payload.get(key), dict) else None
        if isinstance(user, dict) and isinstance(user.get("login"), str):
            user["id"] = _fake_user_id(user["login"])
    return payload


def _fake_user_id(login: str) -> int:
    from the_loop.sandbox.fakegithub.state import FakeGitHub

    return FakeGitHub.default_user_id(login)


def act_as(payload: dict[str, Any], login: str, *, sender_only: bool = False,
           user_id: int | None = None) -> dict[str, Any]:
    """Make ``login`` the payload's sender and (unless ``sender_only``) the author of its
    comment or review, with the user id the fake GitHub gives that login
    (``FakeGitHub.default_user_id``) or ``user_id``; returns ``payload``."""
    uid = _fake_user_id(login) if user_id is None else user_id
    payload.setdefault("sender", {}).update(login=login, id=uid)
    if not sender_only:
        for key in ("comment", "review"):
            obj = payload.get(key)
            if isinstance(obj, dict):
                obj.setdefault("user", {}).update(login=login, id=uid)
    return payload


def gh_label(name: str) -> dict[str, Any]:
    """A label object as GitHub puts it in a payload (every field its schema requires),
    named ``name``: what a test adds to a fixture's ``labels`` or sets as its ``label``."""
    import json

    label: dict[str, Any] = json.loads(load_fixture("issues", "labeled"))["label"]
    return {**label, "name": name}


def load_fixture(event: str, name: str, host: str = "api.github.com") -> bytes:
    """Raw bytes of ``<fixtures>/<host>/<event>/<name>``.

    ``name`` may omit the ``.payload.json`` or ``.json`` suffix: ``load_fixture("issues",
    "opened")`` reads ``api.github.com/issues/opened.payload.json``.
    """
    folder = FIXTURES_DIR / host / event
    for candidate in (name, f"{name}.payload.json", f"{name}.json"):
        path = folder / candidate
        if path.is_file():
            return path.read_bytes()
    raise FileNotFoundError(f"no fixture {name!r} in {folder}")


def sign_body(body: bytes, secret: bytes | str) -> str:
    """``X-Hub-Signature-256`` value for ``body`` (independent of webhook.signature)."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def signed_post(
    client: Any,
    body: bytes,
    *,
    event: str,
    secret: bytes | str,
    delivery: str | None = None,
    content_type: str = "application/json",
    headers: Mapping[str, str] | None = None,
    path: str = "/webhook",
) -> Any:
    """POST ``body`` like GitHub would, signed with ``secret``, via a Flask test client.

    ``headers`` are added last, so they can override (or, with value None, drop) any of
    the GitHub headers.
    """
    all_headers: dict[str, str | None] = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign_body(body, secret),
        "Content-Type": content_type,
        "User-Agent": "GitHub-Hookshot/test",
    }
    all_headers.update(headers or {})
    sent = {k: v for k, v in all_headers.items() if v is not None}
    return client.post(path, data=body, headers=sent)


@dataclass
class RedisNamespace:
    """A real Redis client plus names unique to one test."""

    client: redis.Redis
    url: str
    token: str
    prefix: str
    queue_name: str
    _counter: list[int] = field(default_factory=lambda: [0])

    def new_id(self) -> str:
        """A fresh id containing the token (so teardown finds what it names)."""
        self._counter[0] += 1
        return f"{self.token}-{self._counter[0]}"

    def existing_keys(self) -> list[str]:
        """All keys currently in the database that contain the token."""
        return sorted(
            k.decode() for k in self.client.scan_iter(match=f"*{self.token}*", count=1000)
        )


@pytest.fixture
def redis_ns() -> Iterator[RedisNamespace]:
    """An isolated namespace on the real test Redis; fails if Redis is unreachable
    (``.ci/run`` and ``make run`` start one; a silent skip would hide untested code)."""
    client = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis not reachable at {TEST_REDIS_URL}: {exc}; start redis-server")
    token = f"t{uuid.uuid4().hex}"
    ns = RedisNamespace(
        client=client,
        url=TEST_REDIS_URL,
        token=token,
        prefix=f"the-loop-test-{token}",
        queue_name=f"the-loop-test-{token}",
    )
    try:
        yield ns
    finally:
        _cleanup(ns)
        client.close()


def _cleanup(ns: RedisNamespace) -> None:
    """Delete the namespace's keys, and RQ keys of the job ids it refers to.

    Job ids need not contain the token (workers' tests use uuids), so they are gathered
    from the namespace's own keys: delivery keys, queue/inbox lists, registry sets.
    """
    client = ns.client
    keys = ns.existing_keys()
    ids: set[str] = set()
    for key in keys:
        kind = client.type(key)
        if kind == b"list":
            members = client.lrange(key, 0, -1)
        elif kind == b"zset":
            members = client.zrange(key, 0, -1)
        elif kind == b"set":
            members = list(client.smembers(key))
        else:
            members = []
        ids.update(m.decode(errors="replace") for m in members)
        if ":delivery:" in key:
            ids.add(key.rsplit(":", 1)[-1])
    ids = {i for i in ids if len(i) >= 16 and ":" not in i}  # never match short/odd names
    if ids:
        keys += [
            k.decode()
            for k in client.scan_iter(match="rq:*", count=1000)
            if ids.intersection(k.decode(errors="replace").split(":"))
        ]
    if keys:
        client.delete(*set(keys))
    for set_key in _SHARED_SETS:
        stale = [m for m in client.smembers(set_key) if ns.token.encode() in m]
        if stale:
            client.srem(set_key, *stale)


# -- signed review records -------------------------------------------------------------

#: The tests' review-record signing key (made once per run, never written to the repo).
TEST_SIGNER = Signer.generate()


def signed_review(text: str, *, work_item: str, path: str, login: str = "alice",
                  outcome: str = "approved", gate: str = "requirements-approval",
                  signer: Any = TEST_SIGNER, visit: int = 1,
                  at: str = "2026-11-30T12:00:00Z", **fields: Any) -> str:
    """``text`` with a review entry the service would write (signed with ``signer``,
    :data:`TEST_SIGNER` by default), through the one writer of entries."""
    from foundation.hooks.review import append_signed_entry

    return append_signed_entry(text, signer, work_item=work_item, gate=gate, visit=visit,
                               path=path, outcome=outcome, login=login, at=at, **fields)


def publish_test_key(repo: Path, signer: Any = TEST_SIGNER) -> Path:
    """Publish ``signer``'s public key in checkout ``repo`` (``.the-loop/keys/``)."""
    from foundation.signing import publish

    return publish(repo, signer)
