"""The fault proof, shared by ``tests/e2e/test_faults.py`` (a short form in ``make test``)
and ``benchmarks/faults.py`` (the full form: 2,000 deliveries).

It runs the real stack -- gunicorn (``the-loop serve``), several ``the-loop worker``
processes, the real Redis and the loopback fake GitHub -- and sends a scripted set of
deliveries over many work items: each work item gets an enrolment and then comments
(unauthorized ``/approve``, authorized ``/approve``, ``/approve-with-comments``,
``/request-changes``, plain remarks, the App's own bot comments), interleaved across work
items in a random order (each item's own deliveries keep theirs), with a share of them
sent twice (the same delivery id, as a GitHub redelivery). Meanwhile

* the fake GitHub answers a fraction of calls with 502, a secondary rate limit (403 with
  ``retry-after``) or 429 -- some *after* performing them (the write landed, the answer
  was lost);
* a worker is SIGKILLed several times (and restarted);
* optionally, every process reaches Redis through a loopback proxy
  (:mod:`tests.support.blackhole`) that black-holes their connections now and then: the
  connections open at that moment go dead for good, silently (no reset: the clients
  must notice and reconnect), and every other time new connections hang too for
  ``black_hole_seconds`` (a full outage) before they get through again; with
  ``black_hole_resume`` the dead connections come back after ``black_hole_seconds``,
  so what the clients sent into them (and retried elsewhere) reaches Redis late.

Then it checks, against a clean serial run of the same deliveries (in process, no
faults, an in-memory GitHub):

* no lost or doubled event: every delivery's ``delivery.received`` is in its work item's
  log exactly once, in the order sent, no log entry is there twice (its id), and
  nothing is parked;
* no duplicate effect at the fake: every marked comment of the-loop exists once, no bot
  comment lacks a marker, labels match the clean run (and phase labels were added in the
  same order, never flipped back and forth);
* each work item ends where the clean run ends: node, status, decisions (by delivery id),
  visits.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from foundation.inbox.keys import Keys
from graph.markers import find_effect
from tests.conftest import act_as, gh_label, load_payload, sign_body
from tests.support import processes
from tests.support.blackhole import BlackHoleProxy
from the_loop.sandbox.fakegithub import state as fakes
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve

OWNER = "Codertocat"
APPROVER = "Codertocat"
SECRET = "fault-secret"
BIN = Path(sys.executable).parent
COLLABORATORS = f"version: 1\nroles:\n  approver:\n    - {{name: Coder, github: {APPROVER}}}\n"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"
DESIGN = "# D\n\n## Overview\n\nx\n\n## Security design\n\ny\n"
TASKS = "# T\n\n## Tasks\n\n- [ ] one\n"
#: (login, sender type, body, weight) of the comments a work item's story draws from.
COMMENTS = (
    ("mallory", "User", "/approve", 24),
    (APPROVER, "User", "/approve", 20),
    (APPROVER, "User", "/approve-with-comments\n- tighten the wording", 8),
    (APPROVER, "User", "/request-changes\nthe scope is unclear", 8),
    (APPROVER, "User", "Looks reasonable so far.", 25),
    ("the-loop[bot]", "Bot", "**the-loop** status", 15),
)


@dataclass
class Scenario:
    """What to send and what to break.

    Attributes:
        items: work items (issues ``#1..#items``).
        posts: deliveries sent, duplicates included.
        duplicate_share: share of ``posts`` that are re-sent delivery ids.
        workers: ``the-loop worker`` processes.
        kills: SIGKILLs of a worker (each followed by a restart), spread over the run.
        fault_rate: share of GitHub calls answered with a fault.
        after_share: share of the faults injected after performing the call.
        seed: the random seed (script, order, faults).
        timeout: seconds to wait for everything to settle.
        black_holes: black holes of the processes' Redis connections, spread over the
            run (0: no proxy).
        black_hole_seconds: how long an outage (every other black hole) lasts.
        black_hole_resume: the black-holed connections forward again after
            ``black_hole_seconds`` (the path came back): what their clients sent into
            them, timed out on and retried on fresh connections, reaches Redis then, late
            and a second time. Otherwise they stay dead for good.
        worker_ttl: ``THE_LOOP_WORKER_TTL`` (and a lock timeout twice as long) instead of
            the scenario's default (3 s, or 30 s with black holes, which outlasts the
            longest a Redis command can stall): shorter, a worker cut off from Redis is
            taken over while it still retries its writes.
    """

    items: int = 50
    posts: int = 2000
    duplicate_share: float = 0.10
    workers: int = 3
    kills: int = 4
    fault_rate: float = 0.05
    after_share: float = 0.3
    seed: int = 1130
    timeout: float = 300.0
    black_holes: int = 0
    black_hole_seconds: float = 6.0
    black_hole_resume: bool = False
    worker_ttl: int | None = None

    @property
    def unique(self) -> int:
        """Distinct deliveries: the posts that are not re-sends."""
        return self.posts - round(self.posts * self.duplicate_share)


@dataclass(frozen=True)
class Post:
    item: int
    delivery: str
    event: str
    body: bytes = field(repr=False)
    duplicate: bool = False


def repo(item: int) -> str:
    """Each work item lives in a repository of its own, with an App installation of its
    own (GitHub budgets writes per installation: see ``integrations.throttle``)."""
    return f"{OWNER}/loop-{item:03d}"


def ref(item: int) -> str:
    return f"github:{repo(item)}#{item}"


def _place(p: dict[str, Any], item: int) -> dict[str, Any]:
    p["repository"]["full_name"] = repo(item)
    p["repository"]["name"] = repo(item).split("/")[1]
    p["repository"]["id"] = 100_000 + item
    p["installation"] = {"id": item, "node_id": f"MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u{item}"}
    return p


def specs(item: int) -> dict[str, str]:
    """The artifacts of ``item``: every 5th lacks design.md, every 7th tasks.md."""
    files = {f"specs/{item}/requirements.md": REQUIREMENTS}
    if item % 5:
        files[f"specs/{item}/design.md"] = DESIGN
    if item % 7:
        files[f"specs/{item}/tasks.md"] = TASKS
    return files


#: When the plan's comments are created, as GitHub would stamp them: after the run began.
DURING_THE_RUN = "2100-01-01T00:00:00Z"


def _enrol(item: int) -> dict[str, Any]:
    p = load_payload("issues", "labeled")
    p["label"] = gh_label("the-loop")
    p["issue"]["number"] = item
    p["issue"]["labels"].append(gh_label("the-loop"))
    return _place(p, item)


def _comment(item: int, k: int, login: str, kind: str, body: str) -> dict[str, Any]:
    p = load_payload("issue_comment", "created")
    p["issue"]["number"] = item
    p["issue"]["labels"].append(gh_label("the-loop"))
    act_as(p, login)
    p["sender"]["type"] = p["comment"]["user"]["type"] = kind
    p["comment"]["body"] = body
    p["comment"]["id"] = item * 10_000 + k
    # The plan is made before the run, but its comments are made during it: stamped
    # after every gate visit (a comment created before a visit began never decides it).
    p["comment"]["created_at"] = p["comment"]["updated_at"] = DURING_THE_RUN
    return _place(p, item)


def plan(sc: Scenario, token: str) -> tuple[dict[int, list[Post]], list[Post]]:
    """Each item's deliveries in order, and every post in sending order (duplicates are
    re-sends of an earlier delivery, at a random later point)."""
    rng = random.Random(sc.seed)
    base, extra = divmod(sc.unique, sc.items)
    by_item: dict[int, list[Post]] = {}
    for item in range(1, sc.items + 1):
        count = base + (1 if item <= extra else 0)
        seq = [Post(item, f"{token}-{item:03d}-000", "issues",
                    json.dumps(_enrol(item)).encode())]
        for k in range(1, count):
            login, kind, body, _ = rng.choices(COMMENTS, weights=[c[3] for c in COMMENTS])[0]
            seq.append(Post(item, f"{token}-{item:03d}-{k:03d}", "issue_comment",
                            json.dumps(_comment(item, k, login, kind, body)).encode()))
        by_item[item] = seq
    tickets = [item for item, seq in by_item.items() for _ in seq]
    rng.shuffle(tickets)
    cursor = dict.fromkeys(by_item, 0)
    ordered: list[tuple[float, Post]] = []
    for position, item in enumerate(tickets):
        ordered.append((float(position), by_item[item][cursor[item]]))
        cursor[item] += 1
    originals = rng.sample(range(len(ordered)), sc.posts - len(ordered))
    for i in originals:
        position, post = ordered[i]
        again = Post(post.item, post.delivery, post.event, post.body, duplicate=True)
        ordered.append((rng.uniform(position, len(tickets)), again))
    ordered.sort(key=lambda pair: pair[0])
    return by_item, [post for _, post in ordered]


def seed_http_fake(fake: HttpFakeGitHub, sc: Scenario) -> None:
    for item in range(1, sc.items + 1):
        fake.add_repo(repo(item), default_branch="master")
        fake.add_file(repo(item), ".the-loop/collaborators.yaml", COLLABORATORS)
        fake.set_permission(repo(item), APPROVER, "write")
        for path, text in specs(item).items():
            fake.add_file(repo(item), path, text)


def seed_memory_fake(gh: fakes.FakeGitHub, sc: Scenario) -> None:
    for item in range(1, sc.items + 1):
        gh.add_file(repo(item), ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
        gh.set_permission(repo(item), APPROVER, "write")
        for path, text in specs(item).items():
            gh.add_file(repo(item), path, text, ref="master")


# -- the clean serial run -----------------------------------------------------------------


def clean_run(sc: Scenario, by_item: dict[int, list[Post]], client: redis.Redis,
              prefix: str, queue_name: str) -> tuple[dict[int, dict[str, Any]], fakes.FakeGitHub]:
    """Process every delivery once, item by item, in process: the expected end state."""
    from foundation.inbox.enqueue import DeliveryQueue
    from foundation.inbox.keys import SHARED_INBOX
    from foundation.settings import WorkerSettings
    from the_loop.graphs import load_graph
    from the_loop.wiring import build_processor
    from webhook.events import parse_delivery

    gh = fakes.FakeGitHub()
    seed_memory_fake(gh, sc)
    settings = WorkerSettings(prefix=prefix, queue=queue_name)
    processor = build_processor(settings, client, load_graph(), lambda _i: gh)
    queue = DeliveryQueue(client, queue_name=queue_name, prefix=prefix)
    for seq in by_item.values():
        for post in seq:
            delivery = parse_delivery({"X-GitHub-Event": post.event,
                                       "X-GitHub-Delivery": post.delivery,
                                       "Content-Type": "application/json"}, post.body)
            queue.enqueue(delivery)
            processor.drain(delivery.work_item or SHARED_INBOX)
    return {item: summary(processor.store.load(ref(item))) for item in by_item}, gh


def summary(state: Any) -> dict[str, Any]:
    """What must match between the faulty run and the clean one."""
    if state is None:
        return {"state": None}
    return {"node": state.current_node, "status": state.status,
            "decisions": [d.get("delivery") for _, d in state.standing_decisions()],
            "visits": dict(state.visits)}


# -- the faulty run -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Report:
    """Figures and findings of one faulty run."""

    scenario: Scenario
    elapsed: float = 0.0
    posted: int = 0
    accepted: int = 0
    duplicates_answered: int = 0
    kills: int = 0
    black_holes: int = 0
    black_holed_connections: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    github_requests: int = 0
    retries: int = 0
    reaped: int = 0
    fenced: int = 0
    parked: int = 0
    notices_missing: int = 0
    problems: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        sc = self.scenario
        return {
            "deliveries_posted": self.posted, "unique_deliveries": sc.unique,
            "duplicates_posted": sc.posts - sc.unique,
            "duplicates_answered_200": self.duplicates_answered, "work_items": sc.items,
            "workers": sc.workers, "sigkills": self.kills,
            "black_holes": self.black_holes,
            "black_holed_connections": self.black_holed_connections,
            "github_requests": self.github_requests, "github_faults": self.faults,
            "delivery_retries": self.retries, "jobs_reaped": self.reaped,
            "writes_refused_lock_lost": self.fenced,
            "parked": self.parked, "notices_missing": self.notices_missing,
            "elapsed_s": round(self.elapsed, 1),
            "problems": len(self.problems),
        }


class Stack:
    """gunicorn, ``workers`` worker processes and the loopback fake GitHub."""

    def __init__(self, sc: Scenario, redis_url: str, prefix: str, queue: str,
                 logs: Path) -> None:
        self.sc = sc
        self.fake = HttpFakeGitHub()
        seed_http_fake(self.fake, sc)
        self.logs = logs
        self.prefix, self.queue = prefix, queue
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        self.fake.set_app_key(pem)
        self.api_url, self._stop_fake = serve(self.fake)
        self.port = _free_port()
        self.env = {
            **{k: v for k, v in os.environ.items()
               if not k.startswith(("THE_LOOP_", "GH_", "GITHUB_"))},
            "REDIS_URL": redis_url, "THE_LOOP_REDIS_PREFIX": prefix, "THE_LOOP_QUEUE": queue,
            "THE_LOOP_WEBHOOK_SECRET": SECRET, "THE_LOOP_GITHUB_API_URL": self.api_url,
            "THE_LOOP_GITHUB_APP_ID": "1", "THE_LOOP_GITHUB_PRIVATE_KEY": pem,
            "THE_LOOP_GITHUB_TRANSPORT": "api",
            "THE_LOOP_GITHUB_WRITE_INTERVAL": "0", "THE_LOOP_GITHUB_READ_INTERVAL": "0",
            "THE_LOOP_GITHUB_RETRIES": "1", "THE_LOOP_GITHUB_TIMEOUT": "10",
            # Faults, not GitHub's write budget, are under test here.
            "THE_LOOP_GITHUB_WRITES_PER_MINUTE": "100000",
            "THE_LOOP_GITHUB_WRITES_PER_HOUR": "1000000",
            "THE_LOOP_WEB_WORKERS": "2", "THE_LOOP_WORKER_METRICS_PORT": "0",
            "THE_LOOP_LOG_LEVEL": os.environ.get("THE_LOOP_FAULT_LOG_LEVEL", "WARNING"),
            "THE_LOOP_LOG_FORMAT": "text",
            # Recovery in seconds, not minutes: a worker silent for 3 s is dead.
            "THE_LOOP_WORKER_TTL": "3", "THE_LOOP_REAP_INTERVAL": "0.3",
            "THE_LOOP_LOCK_TIMEOUT": "15",
            "THE_LOOP_DELIVERY_ATTEMPTS": "12", "THE_LOOP_DELIVERY_BACKOFF": "0.1,0.3,0.6,1",
        }
        if sc.black_holes:
            # A worker cut off from Redis is not dead: its liveness and locks must outlast
            # the longest a command can stall and be retried (foundation.redis.client), or
            # another worker takes its work item while its last write is still retried.
            self.env.update({"THE_LOOP_WORKER_TTL": "30", "THE_LOOP_LOCK_TIMEOUT": "60"})
        if sc.worker_ttl is not None:
            self.env.update({"THE_LOOP_WORKER_TTL": str(sc.worker_ttl),
                             "THE_LOOP_LOCK_TIMEOUT": str(2 * sc.worker_ttl)})
        self.web: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self._started = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.web = processes.start(
            [str(BIN / "the-loop"), "serve", "--port", str(self.port), "--host", "127.0.0.1"],
            self.env, self.logs / "web.out")
        for _ in range(self.sc.workers):
            self.workers.append(self._worker())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise AssertionError("the receiver never became ready")

    def _worker(self) -> subprocess.Popen[bytes]:
        self._started += 1
        return processes.start([str(BIN / "the-loop"), "worker"], self.env,
                               self.logs / f"worker-{self._started}.out")

    def kill_one(self, rng: random.Random) -> None:
        """SIGKILL a worker, then start a new one in its place."""
        victim = rng.randrange(len(self.workers))
        os.killpg(self.workers[victim].pid, signal.SIGKILL)
        self.workers[victim].wait(timeout=10)
        self.workers[victim] = self._worker()

    def stop(self) -> int:
        """SIGTERM everything (whole process groups, whatever happened); returns how many
        processes did not stop within 20 s."""
        procs = [p for p in [self.web, *self.workers] if p is not None]
        for proc in procs:
            if proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        stuck = 0
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                stuck += 1
            processes.stop(proc, grace=5)
        self._stop_fake()
        return stuck

    def worker_log(self) -> str:
        return "\n".join(p.read_text(errors="replace")
                         for p in sorted(self.logs.glob("worker-*.out")))


def _post(session: requests.Session, url: str, post: Post) -> int:
    headers = {"Content-Type": "application/json", "X-GitHub-Event": post.event,
               "X-GitHub-Delivery": post.delivery,
               "X-Hub-Signature-256": sign_body(post.body, SECRET)}
    for _ in range(50):
        try:
            status = session.post(f"{url}/webhook", data=post.body, headers=headers,
                                  timeout=10).status_code
        except requests.RequestException:
            status = 0
        if status in (200, 202):
            return status
        time.sleep(0.1)  # 503 or a connection error: send again, as GitHub's redelivery
    raise AssertionError(f"delivery {post.delivery} was never accepted")


def _pending(client: redis.Redis, prefix: str, queue: str, items: int) -> int:
    """Deliveries and jobs not yet settled (inboxes, queue, started, retries)."""
    with client.pipeline(transaction=False) as pipe:
        for item in range(1, items + 1):
            pipe.llen(Keys(prefix).inbox(ref(item)))
        pipe.llen(f"rq:queue:{queue}")
        pipe.llen(f"rq:queue:{queue}:intermediate")
        pipe.zcard(f"rq:wip:{queue}")
        pipe.zcard(Keys(prefix).retry)
        return int(sum(pipe.execute()))


def run(sc: Scenario, client: redis.Redis, redis_url: str, prefix: str, queue: str,
        token: str, logs: Path) -> Report:
    """The faulty run and all its checks; ``Report.problems`` lists what failed."""
    from workers.state import RedisStateStore

    report = Report(sc)
    by_item, posts = plan(sc, token)
    expected, clean_gh = clean_run(sc, by_item, client, f"{prefix}-clean", f"{queue}-clean")
    proxy: BlackHoleProxy | None = None
    processes_url = redis_url
    if sc.black_holes:
        parts = urllib.parse.urlsplit(redis_url)
        proxy = BlackHoleProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
        processes_url = proxy.start() + (parts.path or "")
    stack = Stack(sc, processes_url, prefix, queue, logs)
    rng = random.Random(sc.seed + 1)
    stack.fake.chaos(sc.fault_rate, after_rate=sc.after_share, seed=sc.seed + 2)
    start = time.monotonic()
    try:
        stack.start()
        accepted = collections.Counter[int]()
        lock = threading.Lock()
        lanes = 4

        def lane(n: int) -> None:
            with requests.Session() as session:
                for post in posts:
                    if post.item % lanes == n:
                        status = _post(session, stack.url, post)
                        with lock:
                            accepted[status] += 1

        senders = [threading.Thread(target=lane, args=(n,)) for n in range(lanes)]
        for t in senders:
            t.start()
        # Kill a worker, or black-hole the Redis connections, at evenly spread points of
        # progress (handled / unique).
        events = sorted([((i + 1) / (sc.kills + 1), "kill") for i in range(sc.kills)]
                        + [((i + 1) / (sc.black_holes + 1), "black hole")
                           for i in range(sc.black_holes)])
        deadline = time.monotonic() + sc.timeout
        while events and time.monotonic() < deadline:
            with lock:
                sent = accepted[202]
            handled = sent - _pending(client, prefix, queue, sc.items)
            if handled >= events[0][0] * sc.unique:
                _, what = events.pop(0)
                if what == "kill":
                    stack.kill_one(rng)
                    report.kills += 1
                elif proxy is not None:
                    outage = report.black_holes % 2 == 1
                    report.black_holed_connections += proxy.black_hole(stall_new=outage)
                    report.black_holes += 1
                    if outage or sc.black_hole_resume:
                        time.sleep(sc.black_hole_seconds)
                        proxy.heal(thaw=sc.black_hole_resume)
            time.sleep(0.05)
        for t in senders:
            t.join(timeout=max(1.0, deadline - time.monotonic()))
        report.posted = sum(accepted.values())
        report.accepted = accepted[202]
        report.duplicates_answered = accepted[200]
        while time.monotonic() < deadline and _pending(client, prefix, queue, sc.items):
            time.sleep(0.2)
        time.sleep(1.0)  # a last reaper round; then nothing may be left
        if _pending(client, prefix, queue, sc.items):
            report.problems.append(
                f"not settled after {sc.timeout:g} s: "
                f"{_pending(client, prefix, queue, sc.items)} deliveries/jobs pending")
        report.elapsed = time.monotonic() - start
    finally:
        if stack.stop():
            report.problems.append("a process did not stop on SIGTERM within 20 s")
        if proxy is not None:
            proxy.close()
    report.faults = stack.fake.injected
    report.github_requests = len(stack.fake.requests)
    log_text = stack.worker_log()
    report.retries = log_text.count("failed (attempt")
    # Taken back by a reaper: jobs of dead workers, and inboxes a dead dispatcher held.
    report.reaped = sum(log_text.count(mark) for mark in (
        "reaper: job", "reaper: wake-up job", "nobody on it; ready again"))
    # Writes of a worker whose work item another worker had taken over (workers.state).
    report.fenced = log_text.count("this worker's write was refused")
    store = RedisStateStore(client, prefix)
    report.parked = int(client.hlen(Keys(prefix).failed))
    if report.parked:
        report.problems.append(f"{report.parked} deliveries parked: "
                               f"{client.hgetall(Keys(prefix).failed)}")
    if sc.black_holes:
        # A delivery queued whose answer a black hole swallowed is sent again and then
        # answered 200 (already seen): every post is still answered 2xx exactly once.
        if report.accepted + report.duplicates_answered != sc.posts:
            report.problems.append(f"{report.accepted + report.duplicates_answered} "
                                   f"deliveries answered 2xx, {sc.posts} sent")
    elif report.accepted != sc.unique:
        report.problems.append(f"{report.accepted} deliveries queued, {sc.unique} sent")
    _check(report, store, stack.fake, clean_gh, by_item, expected)
    return report


def _check(report: Report, store: Any, fake: HttpFakeGitHub, clean_gh: fakes.FakeGitHub,
           by_item: dict[int, list[Post]], expected: dict[int, dict[str, Any]]) -> None:
    problems = report.problems
    for item, seq in by_item.items():
        r = ref(item)
        log = store.events(r)
        # Each entry has its own id: one seen twice is one append that landed twice.
        replayed = [i for i, n in collections.Counter(e.id for e in log).items() if n > 1]
        if replayed:
            problems.append(f"{r}: {len(replayed)} log entries appended twice")
        received = [e.caused_by for e in log if e.type == "delivery.received"]
        sent = [p.delivery for p in seq]
        if received != sent:
            lost = [d for d in sent if d not in received]
            doubled = [d for d, n in collections.Counter(received).items() if n > 1]
            problems.append(f"{r}: delivery.received differs from what was sent "
                            f"(lost {lost[:3]}, doubled {doubled[:3]}, "
                            f"in order: {sorted(received) == sorted(sent)})")
        got = summary(store.load(r))
        if got != expected[item]:
            problems.append(f"{r}: ended {got}, the clean run {expected[item]}")
        comments = fake.comments(repo(item), item)
        marks = [find_effect(c["body"]) for c in comments if c["user"] == fake.bot_login]
        if None in marks:
            problems.append(f"{r}: a comment of the-loop without a marker")
        twice = [m for m, n in collections.Counter(marks).items() if n > 1]
        if twice:
            problems.append(f"{r}: comments posted twice: {twice}")
        clean_marks = {find_effect(c["body"]) or "" for c in
                       clean_gh.comments(repo(item), item)}
        got_marks = {m or "" for m in marks}
        # Hook effects (review requests) and the status comment go through the outbox and
        # must all be there; the worker's notices (decision, alarm) are best effort: never
        # twice, but a notice whose post failed is recorded (notification.failed), not
        # retried.
        must = {m for m in clean_marks if not _is_notice(m)}
        if must - got_marks or {m for m in got_marks - clean_marks}:
            problems.append(f"{r}: comments {sorted(got_marks)}, the clean run "
                            f"{sorted(clean_marks)}")
        report.notices_missing += len(clean_marks - got_marks)
        labels = sorted(fake.labels(repo(item), item))
        if labels != sorted(clean_gh.labels(repo(item), item)):
            problems.append(f"{r}: labels {labels}, the clean run "
                            f"{sorted(clean_gh.labels(repo(item), item))}")
        phases = _phase_adds(f"{repo(item)}#{item}:add-label:", fake.actions)
        clean_phases = _phase_adds(f"{repo(item)}#{item}:add-label:", clean_gh.actions)
        if phases != clean_phases:
            problems.append(f"{r}: phase labels added {phases}, the clean run {clean_phases}")


def _is_notice(effect: str) -> bool:
    return effect.endswith(("/decision", "/drift")) or "/alarm/" in effect \
        or "/withdrawn/" in effect


def _phase_adds(prefix: str, actions: list[str]) -> list[str]:
    """Phase labels added, in order, repeats of the same label collapsed (adding a label
    already there changes nothing a person sees)."""
    out: list[str] = []
    for action in actions:
        if action.startswith(prefix) and action[len(prefix):].startswith("phase:"):
            label = action[len(prefix):]
            if not out or out[-1] != label:
                out.append(label)
    return out


@contextmanager
def logs_dir(path: Path | None = None) -> Iterator[Path]:
    import tempfile

    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="the-loop-faults-") as tmp:
        yield Path(tmp)


def run_logged(sc: Scenario, ns: Any) -> Report:
    """:func:`run` for a test, on the Redis namespace ``ns`` (``tests.conftest``'s
    ``redis_ns``): the processes' logs go to ``THE_LOOP_E2E_LOGS`` when set (else a
    temporary folder), are printed when the run found a problem and
    ``THE_LOOP_E2E_SHOW_LOGS`` is set, and the run's figures are printed."""
    keep = os.environ.get("THE_LOOP_E2E_LOGS")
    with logs_dir(Path(keep) if keep else None) as logs:
        report = run(sc, ns.client, ns.url, ns.prefix, ns.queue_name, ns.token, logs)
        if report.problems and os.environ.get("THE_LOOP_E2E_SHOW_LOGS"):
            for f in sorted(logs.iterdir()):
                print(f"--- {f.name}\n{f.read_text(errors='replace')[-20000:]}")
    print(report.figures())
    return report
