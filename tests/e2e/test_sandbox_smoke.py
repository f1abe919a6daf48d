"""The sandbox smoke test: ``make run``'s script in sandbox mode, with real processes (the
sandbox's GitHub, gunicorn, the worker, the runner with the demo agent), the real Redis
and real git, driven by the ``the-loop sandbox`` commands as the README's walk does.

Label an issue ``the-loop`` -> ``phase:requirements`` on the sandbox issue within seconds
-> the demo agent writes requirements without their last section, the block is repaired
-> the approver's ``/approve`` passes the gate -> the work item reaches ``design``.
SIGTERM to the script stops every process it started.

The script prints the dashboard's URL and sign-in token file, and the git remote with the
person's token: the token signs in, the remote clones; an ``/approve`` with a made-up
token is refused by the sandbox (401) and moves nothing; no credential of the sandbox's
is in the agent's workspace or HOME.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from graph.state import Past
from integrations.harness.process import group_members
from tests.conftest import REPO_ROOT
from tests.e2e.test_end_to_end import free_port, wait_until
from tests.support.processes import alive, descendants, start, stop, stop_group
from tests.support.sandbox_run import sandbox_env
from workers.state import RedisStateStore

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
USER = "octo-dev"
REF = "github:sandbox/demo#1"


def sandbox(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(BIN / "the-loop"), "sandbox", *args], env=env,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_run_in_sandbox_mode_walks_a_work_item_to_design(redis_ns, tmp_path):
    port, sandbox_port = free_port(), free_port()
    env = sandbox_env(redis_ns, tmp_path, user=USER, port=port, sandbox_port=sandbox_port)
    log = tmp_path / "make-run.out"
    run = start([str(REPO_ROOT / "scripts" / "dev-run.sh")], env, log)
    members: set[int] = set()
    try:
        def ready() -> bool:
            assert run.poll() is None, log.read_text()
            try:
                return requests.get(f"http://127.0.0.1:{port}/readyz", timeout=1).ok
            except requests.RequestException:
                return False

        wait_until(ready, timeout=60, what="the receiver's /readyz")
        text = log.read_text()
        assert "the-loop: mode: sandbox, because no GitHub credentials" in text
        env["THE_LOOP_SANDBOX_URL"] = f"http://127.0.0.1:{sandbox_port}"
        box = tmp_path / "sandbox"
        user_token = (box / "user-token").read_text().strip()
        api_token = (box / "api-token").read_text().strip()
        assert (f"the-loop: dashboard on http://127.0.0.1:{port}/ui/ (sign in at "
                f"http://127.0.0.1:{port}/ui/login with the token in {box / 'api-token'})"
                in text), text
        remote = f"http://{USER}:{user_token}@127.0.0.1:{sandbox_port}/sandbox/demo.git"
        assert f"the-loop: git remote (pushes as {USER}): {remote}" in text
        signed = requests.get(f"http://127.0.0.1:{port}/api/v1/work-items", timeout=10,
                              headers={"Authorization": f"Bearer {api_token}"})
        assert signed.status_code == 200, signed.text

        def show() -> dict:
            return json.loads(sandbox(env, "show", "1", "--json"))

        def sandbox_up() -> bool:
            try:
                return requests.get(env["THE_LOOP_SANDBOX_URL"] + "/repos/sandbox/demo",
                                    timeout=1).ok
            except requests.RequestException:
                return False

        wait_until(sandbox_up, timeout=30, what="the sandbox's GitHub")
        out = sandbox(env, "issue", "create", "Add a login page", "--label", "the-loop")
        assert out.strip() == f"opened {REF} with the-loop"
        opened = time.monotonic()
        wait_until(lambda: "phase:requirements" in show()["labels"]
                   or "phase:requirements-approval" in show()["labels"], timeout=15,
                   what="phase:requirements on the sandbox issue")
        assert time.monotonic() - opened < 15

        store = RedisStateStore(redis_ns.client, redis_ns.prefix)
        wait_until(lambda: (s := store.load(REF)) and s.current_node ==
                   "requirements-approval" and s.status == "waiting", timeout=60,
                   what="requirements written, blocked, repaired, at the gate")
        chains = [e.data["status"] for e in store.events(REF) if e.type ==
                  "chain.completed" and e.data["node"] == "requirements"
                  and e.data["boundary"] == "exit"]
        assert chains == ["block", "pass"]  # the demo agent's first turn left one out
        shown = show()
        branch = next(b for b in shown["branches"] if b.startswith("the-loop/1-"))
        assert [p["head"] for p in shown["pull_requests"]] == [branch]

        made_up = requests.post(env["THE_LOOP_SANDBOX_URL"] + "/repos/sandbox/demo/issues/1/"
                                "comments", json={"body": "/approve"}, timeout=10,
                                headers={"Authorization": "token ghp_" + "x" * 36})
        assert made_up.status_code == 401 and made_up.json()["message"] == "Bad credentials"
        assert not [c for c in show()["comments"] if c["body"] == "/approve"]
        clone = subprocess.run(["git", "clone", "-q", remote, str(tmp_path / "clone")],
                               capture_output=True, text=True, timeout=60, check=False,
                               env={**env, "GIT_TERMINAL_PROMPT": "0"})
        assert clone.returncode == 0, clone.stderr
        assert (tmp_path / "clone" / ".the-loop" / "collaborators.yaml").is_file()
        held = [box / "workspaces", box / "home"]
        for path in (p for d in held for p in d.rglob("*") if p.is_file()):
            data = path.read_bytes()
            assert not any(t.encode() in data for t in (user_token, api_token)), path
            assert (box / "admin-token").read_text().strip().encode() not in data, path
        assert store.load(REF).current_node == "requirements-approval"  # nothing moved
        out = sandbox(env, "comment", "1", "/approve", "--as", USER)
        assert out.startswith(f"commented on {REF}")
        wait_until(lambda: store.load(REF).current_node in ("design", "design-approval"),
                   timeout=30, what="the work item at design")
        assert [d["actor"] for d in Past.read(store, REF).decisions] == [USER]
        # make run made the sandbox a signing key: the decision carries its signature, and
        # the demo repository publishes the public key on its default branch.
        assert Past.read(store, REF).decisions[0]["signature"].startswith("ed25519-")
        published = requests.get(env["THE_LOOP_SANDBOX_URL"] + "/repos/sandbox/demo/contents/"
                                 ".the-loop/keys/records.pub", timeout=5)
        assert published.ok
        wait_until(lambda: any(lbl.startswith("phase:design") for lbl in show()["labels"]),
                   timeout=15, what="phase:design on the issue")
        # The-loop's own label writes came back as deliveries and were ignored: no drift.
        assert not [e for e in store.events(REF) if e.type.startswith("labels.drift")]
        members = set(descendants(run.pid))
        assert len(members) >= 5  # the sandbox, gunicorn (master + worker), worker, runner
    except AssertionError:
        print(log.read_text()[-8000:])  # what the processes said, for the failure report
        raise
    finally:
        members |= set(descendants(run.pid))
        groups = {os.getpgid(p) for p in members if alive(p)}
        if run.poll() is None:
            os.kill(run.pid, signal.SIGTERM)  # the script alone: it must stop the rest
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.wait(timeout=30)
        left = [p for p in members if alive(p)]
        left_groups = [g for g in groups if group_members(g)]
        stop(run)
        for g in left_groups:
            stop_group(g)
    assert run.returncode in (0, 143), log.read_text()[-3000:]
    assert left == [] and left_groups == [], f"left running: {left} {left_groups}"


