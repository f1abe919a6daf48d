"""End to end, GitHub as it really behaves: gunicorn (``the-loop serve``) and ``the-loop
worker`` as real processes, the real Redis, the loopback fake GitHub over HTTP.

A repository renamed between two deliveries (same ``repository.id``) reaches the same work
item; a suspended installation's delivery is a logged no-op with nothing parked; a
secondary rate limit with ``Retry-After`` delays the delivery's retry at least that long.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from foundation.inbox.keys import Keys
from graph.state import Past
from tests.e2e.test_end_to_end import comment_payload, enrol_payload, free_port, post, wait_until
from tests.support.processes import running, start
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from workers.state import RedisStateStore

pytestmark = pytest.mark.e2e

REPO = "Codertocat/Hello-World"
NEW = "Codertocat/Renamed"
REF = f"github:{REPO}#1"
SECRET = "e2e-secret"
BIN = Path(sys.executable).parent
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
REQUIREMENTS = "# Login\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"
INSTALLATION = 1  # what the e2e payloads carry


@dataclass
class Stack:
    fake: HttpFakeGitHub
    url: str
    store: RedisStateStore
    keys: Keys
    redis: object
    logs: Path

    def worker_log(self) -> str:
        return (self.logs / "worker.out").read_text(errors="replace")


@pytest.fixture
def stack(redis_ns, tmp_path) -> Iterator[Stack]:
    fake = HttpFakeGitHub()
    fake.add_repo(REPO, default_branch="master")
    fake.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS)
    fake.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    api_url, stop_fake = serve(fake)
    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()
    fake.set_app_key(pem)
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN")},
        "REDIS_URL": redis_ns.url,
        "THE_LOOP_REDIS_PREFIX": redis_ns.prefix,
        "THE_LOOP_QUEUE": redis_ns.queue_name,
        "THE_LOOP_WEBHOOK_SECRET": SECRET,
        "THE_LOOP_GITHUB_API_URL": api_url,
        "THE_LOOP_GITHUB_APP_ID": "1",
        "THE_LOOP_GITHUB_PRIVATE_KEY": pem,
        "THE_LOOP_GITHUB_WRITE_INTERVAL": "0",
        "THE_LOOP_GITHUB_READ_INTERVAL": "0",
        "THE_LOOP_WEB_WORKERS": "1",
        "THE_LOOP_LOG_LEVEL": "INFO",
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    web = start([str(BIN / "the-loop"), "serve", "--port", str(port), "--host", "127.0.0.1"],
                env, logs / "web.out")
    worker = start([str(BIN / "the-loop"), "worker"], env, logs / "worker.out")
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return requests.get(f"{url}/readyz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    try:
        with running(web, worker):
            wait_until(ready, what="receiver /readyz")
            yield Stack(fake, url, RedisStateStore(redis_ns.client, redis_ns.prefix),
                        Keys(redis_ns.prefix, redis_ns.queue_name), redis_ns.client, logs)
    finally:
        stop_fake()
        if os.environ.get("THE_LOOP_E2E_SHOW_LOGS"):
            for f in sorted(logs.iterdir()):
                print(f"--- {f.name}\n{f.read_text(errors='replace')}")


def enrolled(stack: Stack) -> None:
    assert post(stack.url, "issues", enrol_payload())[0].status_code == 202
    wait_until(lambda: (s := stack.store.load(REF)) and s.status == "waiting",
               what="enrolled item waiting at the gate")


def handled(stack: Stack, delivery: str) -> str:
    """The worker's per-delivery outcome line for ``delivery`` (waits for it)."""
    return wait_until(lambda: next((line for line in stack.worker_log().splitlines()
                                    if f"delivery={delivery} " in line
                                    and "outcome=" in line), None),
                      what=f"the worker's line for delivery {delivery}")


def test_a_renamed_repository_reaches_the_same_work_item(stack):
    """Given an enrolled issue of Codertocat/Hello-World (repository id R)
    When GitHub renames the repository (the old name now answers 404) and the approver's
      /approve arrives with the new full_name and the same repository id R
    Then the existing work item moves to design, its stored name is the new one, GitHub
      was called with the new name only, and no work item exists under the new name."""
    enrolled(stack)
    repository_id = enrol_payload()["repository"]["id"]
    stack.fake.rename_repo(REPO, NEW)
    payload = comment_payload("Codertocat", "/approve")
    payload["repository"].update(full_name=NEW, name=NEW.partition("/")[2])
    assert payload["repository"]["id"] == repository_id
    assert post(stack.url, "issue_comment", payload)[0].status_code == 202
    wait_until(lambda: (s := stack.store.load(REF)).current_node == "design"
               and s.repository == NEW, what="moved to design, under the new name")
    state = stack.store.load(REF)
    assert state.repository == NEW
    assert [d["actor"] for d in Past.read(stack.store, REF).decisions] == ["Codertocat"]
    assert stack.store.load(f"github:{NEW}#1") is None
    assert stack.fake.labels(NEW, 1)[-1] == "phase:design"
    after = stack.fake.actions[stack.fake.actions.index(f"rename-repo {REPO} {NEW}"):]
    assert after and not any(a.startswith(f"{REPO}:") or a.startswith(f"{REPO}#")
                             for a in after)


def test_a_suspended_installations_delivery_is_a_logged_no_op_and_nothing_is_parked(stack):
    """Given an enrolled work item of installation 1
    When GitHub suspends the installation (its tokens stop working), sends
      `installation.suspend`, and then a /approve arrives for the work item
    Then the worker logs the comment as ignored ("installation 1 is suspended"): it is
      not retried, nothing is parked, the work item stays at its gate, and GitHub saw
      no request for it."""
    enrolled(stack)
    stack.fake.suspend_installation(INSTALLATION)
    suspend = {"action": "suspend", "installation": {"id": INSTALLATION},
               "sender": {"login": "octocat", "type": "User"}}
    _, suspended = post(stack.url, "installation", suspend)
    assert "outcome=" in handled(stack, suspended)
    stack.fake.clear_records()
    r, approve = post(stack.url, "issue_comment", comment_payload("Codertocat", "/approve"))
    assert r.status_code == 202
    line = handled(stack, approve)
    assert "outcome=ignored" in line and "installation 1 is suspended" in line
    assert stack.store.load(REF).current_node == "requirements-approval"
    assert stack.redis.zscore(stack.keys.retry, approve) is None
    assert not stack.redis.hexists(stack.keys.failed, approve)
    assert not stack.redis.exists(stack.keys.parked(REF))
    assert not [q for q in stack.fake.requests if "/repos/" in q.path]


def test_a_secondary_rate_limit_delays_the_retry_at_least_retry_after(stack):
    """Given an enrolled work item
    When an approval arrives and GitHub answers its phase-label request with a secondary
      rate limit (403, "retry-after: 120")
    Then the delivery is scheduled for retry no sooner than 120 s after the answer (the
      recorded retry time, not the 1 s backoff), and the worker's line says retrying."""
    enrolled(stack)
    # The enrolment writes its own phase label at the end of its delivery, after the state
    # is saved: the fault is queued only once that write was answered, or it would take it.
    labels = f"/repos/{REPO}/issues/1/labels"
    wait_until(lambda: any(r.method == "POST" and r.path.endswith(labels) and r.status
                           for r in stack.fake.requests),
               what="the enrolment's phase label written")
    # The phase label of the node the approval moves to: a write the delivery needs.
    stack.fake.fail_next(rf"/repos/{REPO}/issues/1/labels$", 403, {"retry-after": "120"},
                         method="POST", body={
        "message": "You have exceeded a secondary rate limit. Please wait a few minutes "
                   "before you try again.",
        "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"})
    before = time.time()
    r, delivery = post(stack.url, "issue_comment", comment_payload("Codertocat", "/approve"))
    assert r.status_code == 202
    due = wait_until(lambda: stack.redis.zscore(stack.keys.retry, delivery),
                     what="the delivery's retry time")
    assert due >= before + 120
    assert due <= time.time() + 120 + 5  # Retry-After, not some far larger backoff
    assert "outcome=retrying" in handled(stack, delivery)
    assert "retry in 120 s" in handled(stack, delivery)
    assert stack.fake.injected == {"403": 1}
    # The decision is taken; the label is written once the walk stopped at design (the
    # node the delivery leaves the work item at), and that write waits for the retry.
    state = stack.store.load(REF)
    assert state.current_node == "design"
    assert "add-label" in [e["op"] for e in state.effects.values()
                           if e["status"] == "pending"]
    assert "phase:design" not in stack.fake.labels(REPO, 1)
