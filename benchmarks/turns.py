"""Agent-turn benchmarks: the-loop's own cost per harness turn, and draining 20 work items
with concurrent sessions.

Two parts (``--part overhead``, ``--part drain``, default both):

**overhead** (in one process, sequential, so every part can be timed): the worker's
processor (:func:`the_loop.wiring.build_worker`) and the runner
(:func:`the_loop.wiring.build_runner`), each behind its RQ worker class (``LoopWorker``,
``TurnWorker``) stepped one job at a time through RQ's own dequeue and ``execute_job``
(the body of RQ's work loop), against the loopback fake GitHub (``HttpFakeGitHub`` +
``serve``) backed by a bare git repository, with the command harness
``tests/harnesses/agent`` behind a small timing wrapper. Each of ``--items`` work items
is enrolled by an injected ``issues.labeled`` delivery and walks requirements ->
blocked -> repaired -> waiting at requirements-approval: two turns each (the first
clones, the repair fetches). Per turn, from the order (``TurnRecords.order``) to the
worker having run the node's exit chain on the runner's report, the benchmark wraps
(never edits) the product's steps: the order, RQ's job bookkeeping, the turn lock /
slots / records, workspace git (``Workspaces.prepare``), the prompt
(``harness_turn.request``), the harness call (``harness_turn.run``; the harness
*process*'s wall time is ``TurnOutcome.duration_s`` and is excluded), commit and push
(``Workspaces.commit_and_push``), the draft pull request (``TurnRunner._draft_pull``),
the report (``TurnRunner._report``) and the worker's job on the report (exit chain and
what follows). Inside the harness process's wall time the wrapper's timestamps split
spawn + interpreter start, the agent's own work, and exit detection + reap (the last is
the-loop's, reported beside the headline). Git processes and fake-GitHub requests are
counted per step.

**drain** (real processes): ``the-loop worker`` and ``the-loop runner --processes P``
(``runner.concurrency`` and ``runner.perInstallation`` = P) for each P of
``--concurrency`` (default 2,4), the same fake GitHub and bare repository, the fake agent
with ``{"sleep": --sleep}`` (default 0.5 s) in ``<runner.homeDir>/.fake-harness/knobs.json``.
``--work-items`` (20) ``issues.labeled`` deliveries are injected into the inbox at once
(as the receiver enqueues them); **drain** = until every work item waits at
requirements-approval (each: first turn, block, repair, pass: 40 turns). Peak RSS of the
runner: the sum of VmHWM over its processes (the parent and its forked children, not
the harness or git), and the peak of the sampled sum of PSS (forked children share pages,
so PSS does not count them twice); peak RSS of the worker (VmHWM). ``floor`` = turns x
sleep / P: what the agent's time alone would take.

Redis: DB 13 (``THE_LOOP_BENCH_REDIS_URL``), a unique token in every key and queue name;
afterwards only the run's keys are deleted (those with the token, the RQ worker keys it
saw, turn jobs whose origin is its queue). Never FLUSHDB.

    .venv/bin/python benchmarks/turns.py [--part overhead|drain|both] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _common as c
import redis

REPO = "Codertocat/Hello-World"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
FAKE_AGENT = c.REPO / "tests" / "harnesses" / "agent"
GATE = "requirements-approval"
#: GitHub's write budget per installation for the runs (THE_LOOP_GITHUB_WRITES_PER_*):
#: high enough never to wait, so the figures are the-loop's own work. With GitHub's
#: (80/min, 500/h: integrations/throttle.py) the drain is the budget's; the writes each
#: turn makes are counted (``writes``) so that bound can be computed.
UNTHROTTLED = 1_000_000

#: The agent the harness runs: the fake command harness, timed from inside (its first
#: and last instruction, wall clock) into $HOME/.fake-harness/times.jsonl. It runs under
#: the interpreter itself (PYTHON), not a ``python3`` found on PATH that may be a
#: version manager's shell shim (pyenv's adds ~50 ms and several processes per turn).
PYTHON = os.path.realpath(sys.executable)
AGENT_WRAPPER = """#!{python}
import time
T0 = time.time()
import json, os, runpy, sys
code = 0
sys.argv = [{agent!r}, *sys.argv[1:]]
try:
    runpy.run_path({agent!r}, run_name="__main__")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
if sys.argv[1:] != ["--version"]:
    line = {{"t0": T0, "t1": time.time(), "turn": os.environ.get("THE_LOOP_TURN"),
             "node": os.environ.get("THE_LOOP_NODE"), "pid": os.getpid()}}
    base = os.path.dirname(os.environ["HOME"])  # the runner's homeDir (HOME: per item)
    with open(os.path.join(base, ".fake-harness", "times.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\\n")
sys.exit(code)
"""


# --------------------------------------------------------------------------- the stack


def private_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()


class Stack:
    """The fake GitHub (bare git repository behind it), the agent, the configuration and
    the environment of one run; nothing started but the fake's HTTP thread."""

    def __init__(self, scratch: Path, token: str, *, concurrency: int, sleep: float,
                 writes_per_minute: int = UNTHROTTLED, writes_per_hour: int = 10 * UNTHROTTLED
                 ) -> None:
        from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve

        self.scratch, self.token = scratch, token
        key = private_key()
        self.fake = HttpFakeGitHub(app_key=key)
        self.fake.add_git_repo(REPO, scratch / "git", {
            ".the-loop/collaborators.yaml": COLLABORATORS, "README.md": "# Hello World\n",
        }, default_branch="master")
        self.api_url, self._stop = serve(self.fake)
        self.home = scratch / "home"
        (self.home / ".fake-harness").mkdir(parents=True)
        self.knobs(sleep=sleep)
        agent = scratch / "agent"
        agent.write_text(AGENT_WRAPPER.format(python=PYTHON, agent=str(FAKE_AGENT)))
        agent.chmod(0o755)
        config = scratch / "cli-config.yaml"
        config.write_text(json.dumps({
            "version": 2,
            "harness": {"adapter": "command", "argv": [str(agent)], "version": "1.0.0",
                        "turnTimeout": 120, "idleTimeout": 60, "maxTurns": 5},
            "runner": {"concurrency": concurrency, "perInstallation": concurrency,
                       "workspaceDir": str(scratch / "workspaces"),
                       "homeDir": str(self.home), "lease": 30},
        }))
        self.queue = f"{token}-q"
        self.env = c.clean_env(
            REDIS_URL=c.BENCH_REDIS_URL, THE_LOOP_REDIS_PREFIX=token,
            THE_LOOP_QUEUE=self.queue, THE_LOOP_CONFIG=str(config),
            THE_LOOP_WEBHOOK_SECRET="bench-secret", THE_LOOP_GITHUB_API_URL=self.api_url,
            THE_LOOP_GITHUB_APP_ID="1", THE_LOOP_GITHUB_PRIVATE_KEY=key,
            THE_LOOP_GITHUB_WRITE_INTERVAL="0", THE_LOOP_GITHUB_READ_INTERVAL="0",
            THE_LOOP_LOG_LEVEL="WARNING", THE_LOOP_WORKER_METRICS_PORT="0",
            THE_LOOP_GITHUB_WRITES_PER_MINUTE=str(writes_per_minute),
            THE_LOOP_GITHUB_WRITES_PER_HOUR=str(max(writes_per_minute + 1, writes_per_hour)))

    def knobs(self, **values: Any) -> None:
        """Write the fake agent's knobs into the HOME of every work item it may run for
        (the runner gives each work item its own HOME under ``homeDir``)."""
        for number in range(1, 101):
            folder = self.home / _slug(ref_of(number)) / ".fake-harness"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "knobs.json").write_text(json.dumps(values))

    def times(self) -> list[dict[str, Any]]:
        path = self.home / ".fake-harness" / "times.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        self._stop()


def enrol_delivery(token: str, number: int, tag: str = "") -> tuple[dict[str, str], bytes]:
    """The ``issues.labeled`` fixture adding the enrolment label to issue ``number``."""
    payload = json.loads((c.FIXTURES / "issues" / "labeled.payload.json").read_bytes())
    payload["label"] = c.gh_label("the-loop")
    payload["issue"]["labels"].append(c.gh_label("the-loop"))
    payload["issue"]["number"] = number
    payload["issue"]["title"] = f"Work item {number}"
    payload["installation"] = {"id": 1, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}
    headers = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": f"{token}{tag}-{number}",
               "Content-Type": "application/json"}
    return headers, json.dumps(payload).encode()


def _slug(ref: str) -> str:
    return ref.replace(":", "_").replace("/", "_").replace("#", "_")


def ref_of(number: int) -> str:
    return f"github:{REPO}#{number}"


def inject(conn: redis.Redis, stack: Stack, numbers: list[int], tag: str = "") -> None:
    """Put enrolment deliveries into the inbox exactly as the receiver does."""
    from foundation.inbox.enqueue import DeliveryQueue
    from webhook.events import parse_delivery

    queue = DeliveryQueue(conn, queue_name=stack.queue, prefix=stack.token)
    for n in numbers:
        if not queue.enqueue(parse_delivery(*enrol_delivery(stack.token, n, tag))):
            raise SystemExit("turns bench: a delivery id was seen already")


def cleanup(conn: redis.Redis, token: str, worker_keys: set[str],
            created_globals: tuple[str, ...]) -> int:
    """The run's keys: :func:`_common.cleanup_redis`, plus turn jobs (their ids carry no
    token) whose origin queue is the run's."""
    stale = []
    for key in conn.scan_iter(match="rq:job:turn-*", count=500):
        origin = conn.hget(key, "origin")
        if origin is not None and token.encode() in origin:
            stale.append(key)
    deleted = conn.unlink(*stale) if stale else 0
    return deleted + c.cleanup_redis(conn, token, tuple(sorted(worker_keys)), created_globals)


def python_startup_ms(rounds: int = 7) -> float:
    """Median wall time of ``PYTHON -c pass`` (the fake agent's interpreter)."""
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([PYTHON, "-c", "pass"], check=True)
        samples.append(time.perf_counter() - t0)
    return round(1000 * statistics.median(samples), 1)


# ------------------------------------------------------------------ part A: overhead


def _children_cpu() -> float:
    """CPU seconds of this process's children it waited for (git, the fake's git
    http-backend, the agent)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Trace:
    """Per-turn timings collected by the wrappers (see :func:`instrument`)."""

    def __init__(self) -> None:
        self.turns: dict[str, dict[str, Any]] = {}
        self.current: dict[str, Any] | None = None  # the turn the runner is on
        self.segment = "other"  # which wrapped step is running (git processes are counted per step)
        self.throttle_s = 0.0  # slept in WriteThrottle.acquire (GitHub's write budget)
        self.throttled_writes = 0  # WriteThrottle.acquire calls: writes counted in the budget

    def add(self, name: str, seconds: float) -> None:
        if self.current is not None:
            self.current[name] = self.current.get(name, 0.0) + seconds


@contextlib.contextmanager
def patched(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]
            ) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def instrument(trace: Trace) -> Iterator[None]:
    """Wrap the runner's steps (timing only; the product's code runs unchanged)."""
    import integrations.harness.command as command
    from foundation.turns import TurnRecords
    from integrations.throttle import WriteThrottle
    from runner import harness_turn
    from runner.service import TurnRunner
    from runner.workspace import Workspaces

    def order(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(self: Any, turn_order: Any, context: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(self, turn_order, context)
            finally:
                t1 = time.perf_counter()
                trace.turns[turn_order.id] = {
                    "id": turn_order.id, "ref": turn_order.ref, "node": turn_order.node,
                    "number": turn_order.number, "ordered_at": t0, "order": t1 - t0,
                    "git": {}, "git_s": {}, "github": {}}
        return wrapper

    def run(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(self: Any, ref: str, order_id: str) -> Any:
            trace.current = trace.turns.get(order_id)
            t0 = time.perf_counter()
            try:
                return original(self, ref, order_id)
            finally:
                trace.add("run", time.perf_counter() - t0)
        return wrapper

    def step(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(original)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                outer, trace.segment = trace.segment, name
                cpu0 = _children_cpu()
                t0 = time.perf_counter()
                try:
                    out = original(*args, **kwargs)
                finally:
                    trace.add(name, time.perf_counter() - t0)
                    trace.add(f"{name}_child_cpu", _children_cpu() - cpu0)
                    trace.segment = outer
                if name == "harness" and trace.current is not None:
                    trace.current["process"] = trace.current.get("process", 0.0) + \
                        out.duration_s
                return out
            return wrapper
        return make

    def launch(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.time()
            try:
                return original(*args, **kwargs)
            finally:
                if trace.current is not None:
                    trace.current.setdefault("launches", []).append((t0, time.time()))
        return wrapper

    def git(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(self: Any, repo: str, branch: str, step_name: str, args: list[str],
                    **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(self, repo, branch, step_name, args, **kwargs)
            finally:
                if trace.current is not None:
                    key = f"{trace.segment}:{args[0]}"
                    trace.current["git"][key] = trace.current["git"].get(key, 0) + 1
                    trace.current["git_s"][key] = (trace.current["git_s"].get(key, 0.0)
                                                   + time.perf_counter() - t0)
        return wrapper

    def throttle(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            slept = original(*args, **kwargs)
            trace.throttle_s += slept
            trace.throttled_writes += 1
            return slept
        return wrapper

    with contextlib.ExitStack() as stack:
        stack.enter_context(patched(WriteThrottle, "acquire", throttle))
        stack.enter_context(patched(TurnRecords, "order", order))
        stack.enter_context(patched(TurnRunner, "run", run))
        stack.enter_context(patched(Workspaces, "prepare", step("workspace")))
        stack.enter_context(patched(Workspaces, "commit_and_push", step("push")))
        stack.enter_context(patched(Workspaces, "_run", git))
        stack.enter_context(patched(harness_turn, "request", step("prompt")))
        stack.enter_context(patched(harness_turn, "run", step("harness")))
        stack.enter_context(patched(command, "launch", launch))
        stack.enter_context(patched(TurnRunner, "_draft_pull", step("pull_request")))
        stack.enter_context(patched(TurnRunner, "_report", step("report")))
        yield


class Stepper:
    """An RQ worker stepped one job at a time: RQ's dequeue, ``execute_job`` and
    heartbeat (the body of ``Worker.work``), without the blocking wait."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        worker.bootstrap(logging_level="WARNING")

    def step(self) -> bool:
        result = self.worker.dequeue_job_and_maintain_ttl(None)
        if result is None:
            return False
        job, queue = result
        self.worker.execute_job(job, queue)
        self.worker.heartbeat()
        return True

    def close(self) -> None:
        self.worker.teardown()


def _generic(part: str) -> str:
    """A path segment with numbers and shas replaced by ``*``."""
    if part.isdigit() or (len(part) == 40 and all(ch in "0123456789abcdef" for ch in part)):
        return "*"
    return part


def _requests_by_path(fake: Any, since: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in fake.requests[since:]:
        path = r.path.split("?")[0]
        parts = path.split("/")
        # /repos/O/N/issues/7/labels -> "POST issues/*/labels"; git smart HTTP by service
        if ".git" in path:
            key = f"{r.method} git {parts[-1]}"
        elif len(parts) > 4 and parts[1] == "repos":
            key = f"{r.method} " + "/".join(_generic(p) for p in parts[4:])
        else:
            key = f"{r.method} {'/'.join(_generic(p) for p in parts[1:])}"
        out[key] = out.get(key, 0) + 1
    return out


def overhead(items: int, wait_quiet: float = 0.0, profile: str | None = None,
             budget: tuple[int, int] = (UNTHROTTLED, 10 * UNTHROTTLED)) -> dict[str, Any]:
    """Part A (see the module docstring). ``profile``: write cProfile statistics of the
    worker's jobs on the reports (the exit chains) to this file; ``budget``: GitHub
    writes per minute and per hour."""
    import cProfile
    import logging

    from rq import Queue

    from foundation.settings import Settings
    from runner.service import TurnWorker
    from the_loop.wiring import build_runner, build_worker
    from workers.state import RedisStateStore
    from workers.worker import LoopWorker

    logging.disable(logging.WARNING)  # start-up notes (unconfigured Slack) are not turns
    token = c.new_token()
    conn = redis.Redis.from_url(c.BENCH_REDIS_URL)
    conn.ping()
    created_globals = c.absent_globals(conn)
    scratch = Path(tempfile.mkdtemp(prefix="the-loop-turns-"))
    stack = Stack(scratch, token, concurrency=1, sleep=0, writes_per_minute=budget[0],
                  writes_per_hour=budget[1])
    worker_keys: set[str] = set()
    trace = Trace()
    steppers: list[Stepper] = []
    profiler = cProfile.Profile() if profile else None
    try:
        processor = build_worker(Settings.from_env(stack.env, process="worker"))
        runner = build_runner(Settings.from_env(stack.env, process="worker"))  # as the CLI
        store = RedisStateStore(conn, token)
        wq = Queue(stack.queue, connection=conn)
        loop_worker = Stepper(LoopWorker([wq], connection=conn, name=f"{token}-worker",
                                         processor=processor))
        turn_worker = Stepper(TurnWorker([runner.records.queue], connection=conn,
                                         name=f"{token}-runner", runner=runner))
        steppers += [loop_worker, turn_worker]
        worker_keys |= {loop_worker.worker.key, turn_worker.worker.key}
        busy = c.wait_quiet(wait_quiet)
        enrol_ms: list[float] = []
        writes_per_item: list[int] = []
        with instrument(trace):
            for n in range(1, items + 1):
                writes_before = trace.throttled_writes
                inject(conn, stack, [n])
                t0 = time.perf_counter()
                while loop_worker.step():
                    pass
                enrol_ms.append(1000 * (time.perf_counter() - t0))
                pending = [t for t in trace.turns.values() if "runner_step" not in t]
                # the ordering job's rest, after the order (concurrent with the runner in
                # production: not in the overhead)
                for t in pending:
                    t["ordering_rest"] = time.perf_counter() - t["ordered_at"] - t["order"]
                while True:
                    before = len(stack.fake.requests)
                    t1 = time.perf_counter()
                    if not turn_worker.step():
                        break
                    turn = trace.current
                    assert turn is not None
                    turn["runner_step"] = time.perf_counter() - t1
                    turn["github"]["runner"] = _requests_by_path(stack.fake, before)
                    before = len(stack.fake.requests)
                    known = set(trace.turns)
                    slept = trace.throttle_s
                    t2 = time.perf_counter()
                    if profiler is not None:
                        profiler.enable()
                    while loop_worker.step():
                        pass
                    if profiler is not None:
                        profiler.disable()
                    t3 = time.perf_counter()
                    turn["worker_step"] = t3 - t2
                    turn["throttle_wait"] = trace.throttle_s - slept
                    turn["github"]["worker"] = _requests_by_path(stack.fake, before)
                    for new in set(trace.turns) - known:  # the repair, ordered on the report
                        nested = trace.turns[new]
                        turn["worker_step"] -= nested["order"]
                        nested["ordering_rest"] = t3 - nested["ordered_at"] - nested["order"]
                writes_per_item.append(trace.throttled_writes - writes_before)
                state = store.load(ref_of(n))
                if state is None or state.current_node != GATE or state.status != "waiting":
                    raise SystemExit(f"turns bench: work item {n} is at "
                                     f"{state and state.current_node}/{state and state.status}, "
                                     f"not waiting at {GATE}")
        if profiler is not None and profile:
            profiler.dump_stats(profile)
        times = stack.times()
        result = summarise_overhead(list(trace.turns.values()), times)
        result["settings"] = {"items": items, "harness": "command (tests/harnesses/agent)",
                              "github_writes_per_minute_hour": list(budget),
                              "agent_sleep_s": 0, "log_level": "WARNING",
                              "redis": c.BENCH_REDIS_URL.rsplit("@", 1)[-1]}
        result["machine_busy_pct_before"] = busy
        result["enrol_job_ms_median"] = round(statistics.median(enrol_ms), 1)
        # GitHub writes in the budget per work item (enrol + 2 turns + exit chains): with
        # GitHub's 80/min, 500/h per installation (burst 10, then one per 857 ms; past 80
        # in an hour, one per 8.6 s) this bounds how fast work items can move.
        result["github_writes_per_item"] = writes_per_item
        result["python_startup_ms"] = python_startup_ms()
        return result
    finally:
        for s in steppers:
            with contextlib.suppress(Exception):
                s.close()
        stack.close()
        cleanup(conn, token, worker_keys, created_globals)
        shutil.rmtree(scratch, ignore_errors=True)


#: The overhead's parts, in the order of a turn (ms; see the README for each).
PARTS = ("order", "rq_job", "runner_records", "workspace", "prompt", "harness_adapter",
         "push", "pull_request", "report", "exit_chain")


def summarise_overhead(turns: list[dict[str, Any]], times: list[dict[str, Any]]
                       ) -> dict[str, Any]:
    rows = []
    agent_times = sorted(times, key=lambda t: t["t0"])
    for t in turns:
        if "runner_step" not in t:
            continue
        ms = {k: 1000 * v for k, v in t.items() if isinstance(v, float)}
        inner = sum(ms.get(k, 0) for k in ("workspace", "prompt", "harness", "push",
                                           "pull_request", "report"))
        row = {
            "kind": "first" if t["number"] == 1 else "repair",
            "order": ms["order"],
            "rq_job": ms["runner_step"] - ms["run"],
            "runner_records": ms["run"] - inner,
            "workspace": ms.get("workspace", 0.0), "prompt": ms.get("prompt", 0.0),
            "harness_adapter": ms.get("harness", 0.0) - ms.get("process", 0.0),
            "push": ms.get("push", 0.0), "pull_request": ms.get("pull_request", 0.0),
            "report": ms.get("report", 0.0), "exit_chain": ms["worker_step"],
            "process": ms.get("process", 0.0),
            "ordering_rest": ms.get("ordering_rest", 0.0),
            "throttle_wait": ms.get("throttle_wait", 0.0),
            "child_cpu": {k[:-len("_child_cpu")]: round(v, 1) for k, v in ms.items()
                          if k.endswith("_child_cpu")},
            "git_processes": sum(t["git"].values()),
            "git": t["git"], "git_ms": {k: round(1000 * v, 1) for k, v in t["git_s"].items()},
            "github": t["github"],
        }
        row["overhead"] = sum(row[k] for k in PARTS)
        launches = t.get("launches") or []
        if launches:
            start, end = launches[-1]
            mine = [a for a in agent_times if start <= a["t0"] <= end]
            if mine:
                row["spawn_to_agent"] = 1000 * (mine[-1]["t0"] - start)
                row["agent"] = 1000 * (mine[-1]["t1"] - mine[-1]["t0"])
                row["agent_exit_to_reaped"] = 1000 * (end - mine[-1]["t1"])
        rows.append(row)

    def med(kind: str | None, key: str) -> float | None:
        vals = [r[key] for r in rows if key in r and (kind is None or r["kind"] == kind)]
        return round(statistics.median(vals), 1) if vals else None

    keys = (*PARTS, "overhead", "process", "spawn_to_agent", "agent", "agent_exit_to_reaped",
            "ordering_rest", "git_processes")
    summary = {kind or "all": {k: med(kind, k) for k in keys}
               for kind in ("first", "repair", None)}
    for kind in ("first", "repair"):
        vals = [r["overhead"] for r in rows if r["kind"] == kind]
        if vals:
            summary[kind]["overhead_min"] = round(min(vals), 1)
            summary[kind]["overhead_max"] = round(max(vals), 1)
        sample = next((r for r in rows if r["kind"] == kind), None)
        if sample:
            summary[kind]["git_example"] = sample["git"]
            summary[kind]["git_ms_example"] = sample["git_ms"]
            summary[kind]["github_example"] = sample["github"]
    return {"turns": len(rows), "median_ms": summary,
            "rows": [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}
                     for r in rows]}


def overhead_lines(result: dict[str, Any]) -> list[str]:
    m = result["median_ms"]
    labels = {
        "order": "order (TurnRecords.order)", "rq_job": "RQ job (runner side)",
        "runner_records": "lock, slots, records", "workspace": "workspace git (prepare)",
        "prompt": "prompt", "harness_adapter": "harness adapter (minus process)",
        "push": "commit + push", "pull_request": "draft pull request",
        "report": "report into the inbox", "exit_chain": "worker job: exit chain",
        "overhead": "OVERHEAD (sum)", "process": "harness process wall (excluded)",
        "spawn_to_agent": "  spawn + python start", "agent": "  agent's own work",
        "agent_exit_to_reaped": "  agent exit -> reaped",
        "ordering_rest": "ordering job after the order", "git_processes": "git processes",
    }
    out = [f"turn overhead, ms (median of {result['turns']} turns; "
           f"python -c pass: {result['python_startup_ms']} ms)",
           f"{'part':<36}{'first':>10}{'repair':>10}{'all':>10}"]
    for key, label in labels.items():
        cells = [m[k].get(key) for k in ("first", "repair", "all")]
        out.append(f"{label:<36}" + "".join(f"{'-' if v is None else v:>10}" for v in cells))
    return out


# --------------------------------------------------------------------- part B: drain


def memory(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM and Pss (KiB) of ``pid`` (0 when gone)."""
    out = {"VmRSS": 0, "VmHWM": 0, "Pss": 0}
    out.update(c.proc_status(pid))
    with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                out["Pss"] = int(line.split()[1])
                break
    return out


class MemoryWatch(threading.Thread):
    """Samples the runner's processes (the parent and its direct children) and the
    worker every ``interval`` seconds."""

    def __init__(self, runner_pid: int, worker_pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.runner_pid, self.worker_pid, self.interval = runner_pid, worker_pid, interval
        self.hwm: dict[int, int] = {}
        self.peak_rss_sum = self.peak_pss_sum = self.worker_hwm = 0
        self._stop_event = threading.Event()

    def sample(self) -> None:
        pids = [self.runner_pid, *c.children(self.runner_pid)]
        rss = pss = 0
        for pid in pids:
            m = memory(pid)
            if m["VmHWM"]:
                self.hwm[pid] = max(self.hwm.get(pid, 0), m["VmHWM"])
            rss += m["VmRSS"]
            pss += m["Pss"]
        self.peak_rss_sum = max(self.peak_rss_sum, rss)
        self.peak_pss_sum = max(self.peak_pss_sum, pss)
        self.worker_hwm = max(self.worker_hwm, memory(self.worker_pid)["VmHWM"])

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.sample()


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of ``pid`` and its direct children, from
    /proc/PID/stat (utime + stime; cutime + cstime: the git and harness processes they
    waited for)."""
    tick = os.sysconf("SC_CLK_TCK")
    own = reaped = 0
    for p in (pid, *c.children(pid)):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        own += int(fields[11]) + int(fields[12])
        reaped += int(fields[13]) + int(fields[14])
    return own / tick, reaped / tick


def failures(conn: redis.Redis, queues: tuple[str, ...]) -> list[str]:
    """``job id: last line of its exception`` of the RQ-failed jobs of ``queues``."""
    from rq.job import Job

    out = []
    for queue in queues:
        for raw in conn.zrange(f"rq:failed:{queue}", 0, 9):
            job_id = raw.decode()
            try:
                latest = Job.fetch(job_id, connection=conn).latest_result()
                text = (getattr(latest, "exc_string", None) or "").strip()
            except Exception as exc:  # noqa: BLE001 - diagnostics only
                text = f"could not read the failure ({type(exc).__name__})"
            out.append(f"{job_id}: {text.splitlines()[-1] if text else '?'}")
    return out


def drain_once(processes: int, work_items: int, sleep: float,
               wait_quiet: float = 0.0, timeout: float = 600.0) -> dict[str, Any]:
    """One drain run with ``processes`` runner processes (see the module docstring)."""
    from tests.support.processes import start, stop
    from workers.state import RedisStateStore

    token = c.new_token()
    conn = redis.Redis.from_url(c.BENCH_REDIS_URL)
    conn.ping()
    created_globals = c.absent_globals(conn)
    scratch = Path(tempfile.mkdtemp(prefix="the-loop-drain-"))
    stack = Stack(scratch, token, concurrency=processes, sleep=sleep)
    logs = scratch / "logs"
    logs.mkdir()
    worker_keys: set[str] = set()
    turns_queue = f"{stack.queue}-turns"
    procs = []
    the_loop = str(c.VENV_BIN / "the-loop")

    def seen_workers() -> set[str]:
        found = set()
        for name in (stack.queue, turns_queue):
            found |= {m.decode() for m in conn.smembers(f"rq:workers:{name}")}
        worker_keys.update(found)
        return found

    try:
        worker = start([the_loop, "worker"], stack.env, logs / "worker.out")
        procs.append(worker)
        runner = start([the_loop, "runner", "--processes", str(processes)], stack.env,
                       logs / "runner.out")
        procs.append(runner)
        deadline = time.monotonic() + 60
        while len(seen_workers()) < processes + 1:
            if time.monotonic() > deadline or worker.poll() is not None \
                    or runner.poll() is not None:
                raise SystemExit("turns bench: the worker/runner did not start:\n" + "\n".join(
                    f.read_text(errors="replace")[-2000:] for f in logs.iterdir()))
            time.sleep(0.05)
        watch = MemoryWatch(runner.pid, worker.pid)
        watch.sample()
        idle = {"runner_kib": sum(watch.hwm.values()), "worker_kib": watch.worker_hwm}
        watch.start()
        busy = c.wait_quiet(wait_quiet)
        refs = [ref_of(n) for n in range(1, work_items + 1)]
        store = RedisStateStore(conn, token)
        cpu0 = {"runner": cpu_seconds(runner.pid), "worker": cpu_seconds(worker.pid)}
        own0 = time.process_time()
        t0 = time.perf_counter()
        inject(conn, stack, list(range(1, work_items + 1)))
        done: dict[str, float] = {}
        while len(done) < len(refs):
            for ref in refs:
                if ref in done:
                    continue
                state = store.load(ref)
                if state is not None and state.current_node == GATE \
                        and state.status == "waiting":
                    done[ref] = time.perf_counter() - t0
                elif state is not None and state.status in ("escalated", "blocked"):
                    raise SystemExit(f"turns bench: {ref} is {state.status}")
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"turns bench: {len(done)} of {len(refs)} drained in "
                                 f"{timeout:g} s")
            time.sleep(0.05)
        drain_s = time.perf_counter() - t0
        own_cpu = time.process_time() - own0
        watch.stop()
        seen_workers()
        spent = {}
        for name, proc in (("runner", runner), ("worker", worker)):
            own, reaped = cpu_seconds(proc.pid)
            spent[name] = round(own - cpu0[name][0], 2)
            spent[f"{name}_git_and_harness"] = round(reaped - cpu0[name][1], 2)
        turns = len(stack.times())
        states = [store.load(ref) for ref in refs]
        per_turn_s = [t["t1"] - t["t0"] for t in stack.times()]
        result = {
            "processes": processes, "work_items": work_items, "turns": turns,
            "agent_sleep_s": sleep, "drain_s": round(drain_s, 2),
            "floor_s": round(turns * sleep / processes, 2),
            "turns_per_s": round(turns / drain_s, 2),
            "first_item_s": round(min(done.values()), 2),
            "item_s_median": round(statistics.median(done.values()), 2),
            "agent_s_median": round(statistics.median(per_turn_s), 3) if per_turn_s else None,
            "runner_peak_hwm_sum_mib": round(sum(watch.hwm.values()) / 1024, 1),
            "runner_hwm_mib_by_process": [round(v / 1024, 1) for v in watch.hwm.values()],
            "runner_peak_rss_sum_mib": round(watch.peak_rss_sum / 1024, 1),
            "runner_peak_pss_sum_mib": round(watch.peak_pss_sum / 1024, 1),
            "worker_peak_hwm_mib": round(watch.worker_hwm / 1024, 1),
            "idle_runner_hwm_sum_mib": round(idle["runner_kib"] / 1024, 1),
            "idle_worker_hwm_mib": round(idle["worker_kib"] / 1024, 1),
            "cpu_s": {**spent, "bench_and_fake_github": round(own_cpu, 2)},
            "spend_turns": sum(int(s.spend.get("turns", 0)) for s in states if s),
            "machine_busy_pct_before": busy,
        }
        # A runner process's time per turn beyond the agent's own work (contention included).
        if per_turn_s:
            result["runner_s_per_turn_beyond_agent"] = round(
                drain_s * processes / turns - statistics.mean(per_turn_s), 3)
        result["rq_failed"] = sum(conn.zcard(f"rq:failed:{q}") for q in (stack.queue,
                                                                        turns_queue))
        if result["rq_failed"]:
            result["failures"] = failures(conn, (stack.queue, turns_queue))
        result["ok"] = (turns == 2 * work_items and result["spend_turns"] == 2 * work_items
                        and result["rq_failed"] == 0)
        return result
    finally:
        for p in reversed(procs):
            stop(p)
        seen_workers()
        stack.close()
        cleanup(conn, token, worker_keys, created_globals)
        shutil.rmtree(scratch, ignore_errors=True)


def drain(concurrency: list[int], rounds: int, work_items: int, sleep: float,
          wait_quiet: float = 0.0) -> dict[str, Any]:
    """Part B: ``rounds`` runs per concurrency, medians."""
    out: dict[str, Any] = {"settings": {"work_items": work_items, "agent_sleep_s": sleep,
                                        "rounds": rounds, "concurrency": concurrency},
                           "runs": {}, "median": {}}
    for p in concurrency:
        runs = []
        for i in range(rounds):
            run = drain_once(p, work_items, sleep, wait_quiet)
            print(f"  drain P={p} round {i + 1}: {run['drain_s']} s "
                  f"(floor {run['floor_s']} s), runner peak {run['runner_peak_hwm_sum_mib']} MiB "
                  f"(PSS {run['runner_peak_pss_sum_mib']}), worker "
                  f"{run['worker_peak_hwm_mib']} MiB, ok={run['ok']}", file=sys.stderr)
            runs.append(run)
        out["runs"][str(p)] = runs
        out["median"][str(p)] = {
            k: round(statistics.median(r[k] for r in runs), 2)
            for k in ("drain_s", "floor_s", "turns_per_s", "item_s_median", "first_item_s",
                      "runner_s_per_turn_beyond_agent",
                      "runner_peak_hwm_sum_mib", "runner_peak_pss_sum_mib",
                      "runner_peak_rss_sum_mib", "worker_peak_hwm_mib")}
        out["median"][str(p)]["ok"] = all(r["ok"] for r in runs)
    return out


def drain_lines(result: dict[str, Any]) -> list[str]:
    s = result["settings"]
    out = [f"drain: {s['work_items']} work items, 2 turns each, agent sleep "
           f"{s['agent_sleep_s']} s (median of {s['rounds']})",
           f"{'P':>3}{'drain s':>10}{'floor s':>10}{'turns/s':>10}{'item s':>9}"
           f"{'runner HWM sum':>16}{'PSS sum':>10}{'worker HWM':>12}  ok"]
    for p, m in result["median"].items():
        out.append(f"{p:>3}{m['drain_s']:>10}{m['floor_s']:>10}{m['turns_per_s']:>10}"
                   f"{m['item_s_median']:>9}{m['runner_peak_hwm_sum_mib']:>12} MiB"
                   f"{m['runner_peak_pss_sum_mib']:>6} MiB{m['worker_peak_hwm_mib']:>8} MiB"
                   f"  {m['ok']}")
    return out


# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="Agent-turn benchmarks (overhead, drain).")
    p.add_argument("--part", choices=("overhead", "drain", "both"), default="both")
    p.add_argument("--items", type=int, default=8,
                   help="overhead: work items walked, 2 turns each (default 8)")
    p.add_argument("--concurrency", default="2,4",
                   help="drain: runner processes per run, comma-separated (default 2,4)")
    p.add_argument("--work-items", type=int, default=20, help="drain: work items (20)")
    p.add_argument("--sleep", type=float, default=0.5,
                   help="drain: the fake agent's sleep per turn, seconds (0.5)")
    p.add_argument("--rounds", type=int, default=3, help="drain: runs per concurrency (3)")
    p.add_argument("--wait-quiet", type=float, default=0.0,
                   help="wait up to N s for the machine to be < 25%% busy before each phase")
    p.add_argument("--github-budget", action="store_true",
                   help="overhead: GitHub's write budget (80/min, 500/h) instead of none")
    p.add_argument("--profile", help="overhead: cProfile statistics of the worker's jobs on "
                   "the reports to this file (read with python -m pstats)")
    p.add_argument("--json", help="also write the result object to this file")
    args = p.parse_args(argv)
    result: dict[str, Any] = {"machine": c.machine(), "code": c.code_version()}
    if args.part in ("overhead", "both"):
        print("turns benchmark: overhead ...", file=sys.stderr)
        result["overhead"] = overhead(args.items, args.wait_quiet, args.profile,
                                      (80, 500) if args.github_budget
                                      else (UNTHROTTLED, 10 * UNTHROTTLED))
    if args.part in ("drain", "both"):
        print("turns benchmark: drain ...", file=sys.stderr)
        result["drain"] = drain([int(x) for x in args.concurrency.split(",") if x.strip()],
                                args.rounds, args.work_items, args.sleep, args.wait_quiet)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


def summary_lines(result: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if "overhead" in result:
        out += overhead_lines(result["overhead"])
    if "drain" in result:
        out += ([""] if out else []) + drain_lines(result["drain"])
    return out


if __name__ == "__main__":
    res = main()
    print("\n".join(summary_lines(res)))
