"""End to end: gunicorn and an RQ worker as real processes, the real Redis, and a loopback
fake GitHub API reached through THE_LOOP_GITHUB_API_URL, driven by real fixture payloads.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from graph.state import Past
from tests.conftest import FIXTURES_DIR, act_as, gh_label, load_payload, sign_body
from tests.support.processes import start, stop
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from workers.state import RedisStateStore

pytestmark = pytest.mark.e2e

REPO = "Codertocat/Hello-World"
REF = f"github:{REPO}#1"
SECRET = "e2e-secret"
BIN = Path(sys.executable).parent
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
REQUIREMENTS = "# Login\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout=60.0, what="condition"):
    """Poll ``predicate`` every 50 ms until it returns something truthy (returned) or
    ``timeout`` seconds pass (AssertionError naming ``what``). The deadline is generous,
    for a loaded machine; the wait ends as soon as the condition holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def running_stack(redis_ns, tmp_path, *, collaborators=COLLABORATORS, extra_env=None,
                  worker=True):
    """The receiver (gunicorn) and a worker (unless ``worker`` is false: the test starts
    its own) as real processes against a loopback fake GitHub seeded with
    Codertocat/Hello-World; yields ``(fake, url, env, store, logs)``."""
    fake = HttpFakeGitHub()
    fake.add_repo(REPO, default_branch="master")
    fake.add_file(REPO, ".the-loop/collaborators.yaml", collaborators)
    fake.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    api_url, stop_fake = serve(fake)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    fake.set_app_key(pem)
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_ns.url,
        "THE_LOOP_REDIS_PREFIX": redis_ns.prefix,
        "THE_LOOP_QUEUE": redis_ns.queue_name,
        "THE_LOOP_WEBHOOK_SECRET": f"old-secret,{SECRET}",
        "THE_LOOP_GITHUB_API_URL": api_url,
        "THE_LOOP_GITHUB_APP_ID": "1",
        "THE_LOOP_GITHUB_PRIVATE_KEY": pem,
        "THE_LOOP_GITHUB_WRITE_INTERVAL": "0",
        "THE_LOOP_GITHUB_READ_INTERVAL": "0",
        "THE_LOOP_WEB_WORKERS": "2",
        **(extra_env or {}),
    }
    env.pop("GH_TOKEN", None)
    env.pop("GITHUB_TOKEN", None)
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    web = start([str(BIN / "the-loop"), "serve", "--port", str(port), "--host",
                 "127.0.0.1"], env, logs / "web.out")
    procs = [web]
    if worker:
        procs.append(start([str(BIN / "the-loop"), "worker"], env, logs / "worker.out"))
    url = f"http://127.0.0.1:{port}"

    def ready():
        try:
            return requests.get(f"{url}/readyz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_until(ready, what="receiver /readyz")
        yield fake, url, env, RedisStateStore(redis_ns.client, redis_ns.prefix), logs
    finally:
        for proc in procs:
            stop(proc)
        stop_fake()
        if os.environ.get("THE_LOOP_E2E_SHOW_LOGS"):
            for f in logs.iterdir():
                print(f"--- {f.name}\n{f.read_text()}")


@pytest.fixture
def stack(redis_ns, tmp_path):
    with running_stack(redis_ns, tmp_path) as parts:
        yield parts


def post(url, event, payload, delivery=None):
    body = json.dumps(payload).encode()
    delivery = delivery or str(uuid.uuid4())
    r = requests.post(f"{url}/webhook", data=body, timeout=5, headers={
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign_body(body, SECRET),
    })
    return r, delivery


def with_install(payload):
    payload["installation"] = {"id": 1}
    return payload


def enrol_payload():
    p = with_install(load_payload("issues", "labeled"))
    p["label"] = gh_label("the-loop")
    p["issue"]["labels"].append(gh_label("the-loop"))
    return p


def comment_payload(login, body):
    p = with_install(load_payload("issue_comment", "created"))
    p["issue"]["labels"].append(gh_label("the-loop"))
    act_as(p, login)
    p["comment"]["body"] = body
    return p


def test_work_item_moves_through_the_first_phases_on_real_deliveries(stack):
    """Given the App installed on Codertocat/Hello-World with requirements.md present
    When the issue is labelled the-loop, mallory comments /approve, Codertocat comments
      /approve, and GitHub redelivers that last delivery
    Then the item waits at requirements-approval after mallory, moves to design after
      Codertocat (blocked there: no design.md), the approval is recorded once, and GitHub
      saw the phase labels and one review request."""
    fake, url, env, store, _ = stack
    r, _ = post(url, "issues", enrol_payload())
    assert r.status_code == 202
    wait_until(lambda: (s := store.load(REF)) and s.status == "waiting",
               what="enrolled item waiting at the gate")
    assert store.load(REF).current_node == "requirements-approval"

    r, _ = post(url, "issue_comment", comment_payload("mallory", "/approve"))
    assert r.status_code == 202
    wait_until(lambda: [e for e in store.events(REF) if e.type == "delivery.received"
                        and e.data["actor"] == "mallory"], what="mallory's comment handled")
    wait_until(lambda: Past.read(store, REF).history[-1]["node"] == "requirements-approval"
               and store.load(REF).status == "waiting", what="gate still waiting")
    assert Past.read(store, REF).decisions == []

    r, approve_id = post(url, "issue_comment", comment_payload("Codertocat", "LGTM\n/approve"))
    assert r.status_code == 202
    again, _ = post(url, "issue_comment", comment_payload("Codertocat", "LGTM\n/approve"),
                    delivery=approve_id)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    wait_until(lambda: store.load(REF).current_node == "design", what="move to design")
    wait_until(lambda: store.load(REF).status == "blocked", what="design blocked")

    state = store.load(REF)
    assert [d["actor"] for d in Past.read(store, REF).decisions] == ["Codertocat"]
    assert Past.read(store, REF).decisions[0]["delivery"] == approve_id
    assert "specs/1/design.md" in state.parked_reason
    # Labels are written at the end of the delivery, after the state is saved.
    wait_until(lambda: [lbl for lbl in fake.labels(REPO, 1) if lbl.startswith("phase:")]
               == ["phase:design"], what="the phase label moved to design")
    assert fake.labels(REPO, 1)[-1] == "phase:design"
    # The label shows where each delivery left the work item: the enrolment passed
    # through requirements on its way to the gate, so requirements got no label of its
    # own (it would have been removed within the same delivery).
    adds = [a for a in fake.actions if ":add-label:phase:" in a]
    assert adds == [f"{REPO}#1:add-label:phase:{p}"
                    for p in ("requirements-approval", "design")]
    review_requests = [c for c in fake.comments(REPO, 1)
                       if "/request-review -->" in c["body"]]
    assert len(review_requests) == 1
    assert "@Codertocat" in review_requests[0]["body"]
    received = [e.data["delivery"] for e in store.events(REF) if e.type == "delivery.received"]
    assert received.count(approve_id) == 1
    # The installation token was requested through the App's JWT and then reused.
    assert len(fake.token_requests) == 1


def test_replaying_every_fixture_gets_no_5xx(stack):
    fake, url, env, store, _ = stack
    out = subprocess.run(
        [str(BIN / "the-loop"), "replay", str(FIXTURES_DIR), "--url", f"{url}/webhook"],
        env={**env, "THE_LOOP_WEBHOOK_SECRET": SECRET}, capture_output=True, text=True,
        timeout=120)
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stderr
    assert len(lines) == len(list(FIXTURES_DIR.glob("*/*/*.json")))
    codes = {line.split()[0] for line in lines}
    assert codes <= {"200", "202"}


def test_a_pull_request_gate_records_the_review_in_the_artifact(stack):
    """Given pull request #2 labelled the-loop, with requirements.md on its branch
    When mallory approves it in a review, then Codertocat (an approver) approves it
    Then the gate waits after mallory, moves to design after Codertocat, and the review
      entry lands in requirements.md's '## Review comments' on the pull request branch."""
    fake, url, env, store, _ = stack
    pr = with_install(load_payload("pull_request", "labeled"))
    pr["label"] = gh_label("the-loop")
    pr["pull_request"]["labels"].append(gh_label("the-loop"))
    head = pr["pull_request"]["head"]
    fake.add_pull(REPO, 2, head_sha=head["sha"], head_ref=head["ref"], files=["src/app.py"])
    for ref in (head["sha"], head["ref"]):
        fake.add_file(REPO, "specs/2/requirements.md", REQUIREMENTS, ref=ref)
    ref2 = f"github:{REPO}#2"
    assert post(url, "pull_request", pr)[0].status_code == 202
    wait_until(lambda: (s := store.load(ref2)) and s.status == "waiting",
               what="pull request waiting at its gate")

    review = with_install(load_payload("pull_request_review", "submitted"))
    review["review"].update(state="approved", commit_id=head["sha"])
    review["pull_request"]["labels"].append(gh_label("the-loop"))
    act_as(review, "mallory")
    assert post(url, "pull_request_review", review)[0].status_code == 202
    wait_until(lambda: any(e.type == "delivery.received" and e.data["actor"] == "mallory"
                           for e in store.events(ref2)), what="mallory's review handled")
    assert store.load(ref2).current_node == "requirements-approval"
    assert "## Review comments" not in fake.file(REPO, "specs/2/requirements.md",
                                                 ref=head["ref"])

    act_as(review, "Codertocat")
    review["review"]["id"] += 1
    assert post(url, "pull_request_review", review)[0].status_code == 202
    wait_until(lambda: store.load(ref2).current_node == "design", what="move to design")
    recorded = fake.file(REPO, "specs/2/requirements.md", ref=head["ref"])
    assert "## Review comments" in recorded and "@Codertocat — approved" in recorded
    assert [d["actor"] for d in Past.read(store, ref2).decisions] == ["Codertocat"]
