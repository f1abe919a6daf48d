"""A real ``the-loop worker`` told to stop (SIGTERM) in the middle of a delivery: it
finishes that delivery, once, takes no other (a second one queued meanwhile stays
queued), and exits 0; the next worker processes what was left. The delivery is held mid-way
by the loopback fake GitHub, which keeps the worker's first label request until the test
lets it go."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.record import Delivery
from tests.conftest import REPO_ROOT
from tests.e2e.test_end_to_end import COLLABORATORS, REPO, enrol_payload, wait_until
from tests.support.processes import start, stop
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from webhook.events import parse_delivery
from workers.state import RedisStateStore

BIN = Path(sys.executable).parent


class Held:
    """WSGI middleware: the first ``POST`` to a path ending ``/labels`` waits until
    :attr:`go` is set; :attr:`entered` says it arrived."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.go = threading.Event()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if (environ.get("REQUEST_METHOD") == "POST"
                and environ.get("PATH_INFO", "").endswith("/labels")
                and not self.entered.is_set()):
            self.entered.set()
            assert self.go.wait(60)
        return self.inner(environ, start_response)


def enrol(number: int) -> tuple[Delivery, str]:
    """A signed-off ``issues.labeled`` delivery enrolling issue ``number``, parsed as the
    receiver parses it; and its work item."""
    payload = enrol_payload()
    payload["issue"]["number"] = number
    body = json.dumps(payload).encode()
    delivery = parse_delivery({"X-GitHub-Event": "issues",
                               "X-GitHub-Delivery": f"graceful-{number}-{time.time_ns()}",
                               "Content-Type": "application/json"}, body)
    return delivery, f"github:{REPO}#{number}"


def worker_env(ns, api_url: str, token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("THE_LOOP_") and k not in ("GH_TOKEN", "GITHUB_TOKEN",
                                                           "REDIS_URL")}
    env.update({
        "REDIS_URL": ns.url, "THE_LOOP_REDIS_PREFIX": ns.prefix,
        "THE_LOOP_QUEUE": ns.queue_name, "THE_LOOP_GITHUB_API_URL": api_url,
        "GH_TOKEN": token, "THE_LOOP_GITHUB_WRITE_INTERVAL": "0",
        "THE_LOOP_GITHUB_READ_INTERVAL": "0", "THE_LOOP_WORKER_METRICS_PORT": "0",
        "THE_LOOP_ENV_FILE": "",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT),
                                                  os.environ.get("PYTHONPATH")) if p),
    })
    return env


def label_posts(fake: HttpFakeGitHub, number: int) -> int:
    return sum(1 for r in fake.requests if r.method == "POST"
               and r.path.endswith(f"/issues/{number}/labels"))


def test_a_worker_told_to_stop_mid_delivery_finishes_it_once_and_takes_no_other(
        redis_ns, tmp_path):
    fake = HttpFakeGitHub()
    fake.add_git_repo(REPO, tmp_path / "git", {".the-loop/collaborators.yaml": COLLABORATORS,
                                               "README.md": "# Hello\n"},
                      default_branch="master")
    held = Held(fake.app.wsgi_app)
    fake.app.wsgi_app = held  # type: ignore[method-assign]
    api_url, stop_fake = serve(fake)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    env = worker_env(redis_ns, api_url, fake.add_token())
    first, first_ref = enrol(1)
    second, second_ref = enrol(2)
    worker = start([str(BIN / "the-loop"), "worker"], env, tmp_path / "worker.out")
    later = None
    try:
        assert queue.enqueue(first)
        assert held.entered.wait(60), (tmp_path / "worker.out").read_text()
        worker.send_signal(signal.SIGTERM)
        # What arrives while it stops is for another worker.
        assert queue.enqueue(second)
        wait_until(lambda: "warm shut down requested" in
                   (tmp_path / "worker.out").read_text().lower(), what="the warm shutdown")
        assert worker.poll() is None  # still finishing the delivery in hand
        held.go.set()
        assert worker.wait(timeout=60) == 0, (tmp_path / "worker.out").read_text()

        assert label_posts(fake, 1) >= 1 and store.load(first_ref) is not None
        assert redis_ns.client.llen(queue.keys.inbox(first_ref)) == 0
        assert not redis_ns.client.exists(queue.keys.delivery(first.delivery_id))
        assert store.load(second_ref) is None  # not taken
        assert redis_ns.client.lrange(queue.keys.inbox(second_ref), 0, -1) == [
            second.delivery_id.encode()]
        posts_of_first = label_posts(fake, 1)

        later = start([str(BIN / "the-loop"), "worker"], env, tmp_path / "worker-2.out")
        wait_until(lambda: store.load(second_ref) is not None and not redis_ns.client.llen(
            queue.keys.inbox(second_ref)), what="the second delivery on the next worker")
        assert label_posts(fake, 1) == posts_of_first  # the first was not handled again
        assert store.load(first_ref).current_node == store.load(second_ref).current_node
    finally:
        held.go.set()
        stop(worker)
        if later is not None:
            stop(later)
        stop_fake()
