"""The walk of one delivery: what the-loop's own code does between ``POST /webhook`` and
the GitHub request that writes the ``phase:`` label.

One ``issues.labeled`` delivery that adds the enrolment label (``the-loop``) is sent to
the receiver (the Flask test client of :func:`the_loop.wiring.build_receiver`), then the
worker (:func:`the_loop.wiring.build_worker`) runs one wake-up
(:meth:`workers.drain.DeliveryProcessor.dispatch`) that enrols the work item, whose first
node sets its ``phase:`` label. GitHub is the loopback HTTP fake
(``the_loop/sandbox/fakegithub/http/``), reached through the real transport. Everything runs
in this process under :func:`sys.setprofile` (and :func:`threading.setprofile` for the
threads a hook runs in).

For the receiver and the worker separately it reports:

- ``functions``: the project functions entered, in order of first entry, as
  ``path:line:qualified name`` (project = this repository's code, without ``tests/``
  and the fake GitHub's state, ``the_loop/sandbox/fakegithub/{state,store,git}.py``);
- ``files``: the project files those functions are in;
- ``json_parses``: every JSON parse a project function asked for, with the caller and
  the document's size (``body`` marks a parse of the delivery's body);
- for the worker, the figures up to the label request (``functions_to_label``,
  ``files_to_label``) and ``chain``: the project frames on the stack at the label
  request (``depth`` = their number; a hook's thread continues the stack of the thread
  that started it). The label request is the first ``POST`` or ``PUT`` to an issue's
  ``/labels`` that requests sends;
- for the worker, ``state_loads`` and ``state_saves`` (calls of ``load`` and ``save`` of
  a project class whose name ends in ``StateStore``, up to the end of the wake-up) and
  ``github_requests_to_label`` (each request requests sent before the label request, as
  ``METHOD /path``).

Usage::

    .venv/bin/python benchmarks/walk.py          # a readable report
    .venv/bin/python benchmarks/walk.py --json   # the same as one JSON document

Redis: ``THE_LOOP_BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/13``). The run's
keys, queue and RQ job ids carry a unique token (``walk`` + 12 hex digits); afterwards
only keys containing it are deleted, and its queue is taken out of ``rq:queues``. Never
FLUSHDB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402  (the shared payload helpers)

REPO = "Codertocat/Hello-World"
SECRET = "walk-secret"
EXCLUDED = ("tests/", "the_loop/sandbox/fakegithub/state.py",
            "the_loop/sandbox/fakegithub/store.py", "the_loop/sandbox/fakegithub/git.py",
            "benchmarks/", ".venv/")


def project_path(filename: str) -> str | None:
    """``filename`` relative to the repository when it is the project's code, else
    ``None``."""
    if not os.path.isabs(filename):
        return None  # generated code (dataclasses, namedtuples): "<string>"
    try:
        rel = Path(filename).resolve().relative_to(ROOT).as_posix()
    except (ValueError, OSError):
        return None
    return None if rel.startswith(EXCLUDED) else rel


def project_frames(frame: FrameType | None) -> list[str]:
    """The project frames of the stack ending at ``frame``, outermost first."""
    chain: list[str] = []
    while frame is not None:
        rel = project_path(frame.f_code.co_filename)
        if rel is not None:
            chain.append(f"{rel}:{frame.f_lineno}:{frame.f_code.co_qualname}")
        frame = frame.f_back
    return chain[::-1]


def is_label_request(frame: FrameType) -> bool:
    """Whether ``frame`` is requests sending a POST or PUT to an issue's labels."""
    code = frame.f_code
    if code.co_name != "send" or not code.co_filename.endswith("requests/sessions.py"):
        return False
    request = frame.f_locals.get("request")
    method = getattr(request, "method", "")
    url = str(getattr(request, "url", "")).split("?")[0]
    return method in ("POST", "PUT") and "/issues/" in url and url.endswith("/labels")


class Tracer:
    """A profile function recording the project functions entered, their files, the JSON
    parses they ask for and the project stack at the first label request."""

    def __init__(self, body_size: int, *, stop_at: Callable[[FrameType], bool] | None = None):
        import orjson

        self.body_size = body_size
        self.stop_at = stop_at
        self.functions: dict[str, None] = {}
        self.files: dict[str, None] = {}
        self.parses: list[dict[str, Any]] = []
        self.chain: list[str] | None = None
        self.functions_to_label = 0
        self.files_to_label = 0
        self._orjson_loads = orjson.loads
        self._starters: dict[int, list[str]] = {}
        self.state_loads = 0
        self.state_saves = 0
        self.requests: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            if arg is self._orjson_loads:
                self._parse(frame, frame.f_locals.get("document"))
            return
        if event != "call":
            return
        code = frame.f_code
        if code.co_name == "loads" and code.co_filename.endswith("json/__init__.py"):
            self._parse(frame.f_back, frame.f_locals.get("s"))
            return
        if code.co_name == "start" and code.co_filename.endswith("threading.py"):
            # The stack of whoever starts a thread: a hook's thread continues it.
            self._starters[id(frame.f_locals.get("self"))] = project_frames(frame)
            return
        if code.co_name in ("load", "save") and ".".join(
                code.co_qualname.split(".")[-2:-1]).endswith("StateStore") \
                and project_path(code.co_filename) is not None:
            if code.co_name == "load":
                self.state_loads += 1
            else:
                self.state_saves += 1
        if code.co_name == "send" and code.co_filename.endswith("requests/sessions.py") \
                and self.chain is None and "request" in frame.f_locals:
            request = frame.f_locals["request"]
            path = str(getattr(request, "path_url", "")).split("?")[0]
            self.requests.append(f"{getattr(request, 'method', '')} {path}")
        if self.chain is None and self.stop_at is not None and self.stop_at(frame):
            own = project_frames(frame)
            started = self._starters.get(id(threading.current_thread()), [])
            self.chain = [*started, "-- thread --", *own] if started else own
            self.functions_to_label, self.files_to_label = len(self.functions), len(self.files)
            return
        rel = project_path(code.co_filename)
        if rel is None:
            return
        self.files.setdefault(rel, None)
        self.functions.setdefault(f"{rel}:{code.co_firstlineno}:{code.co_qualname}", None)

    def _parse(self, caller: FrameType | None, document: Any) -> None:
        chain = project_frames(caller)
        if not chain:
            return  # not asked for by the project (the fake GitHub, a library)
        size = len(document) if isinstance(document, (bytes, str)) else None
        self.parses.append({"caller": chain[-1], "bytes": size,
                            "body": size == self.body_size})

    def run(self, fn: Callable[[], Any]) -> Any:
        sys.setprofile(self)
        threading.setprofile(self)
        try:
            return fn()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "functions": list(self.functions), "files": list(self.files),
            "json_parses": self.parses,
            "body_parses": sum(1 for p in self.parses if p["body"]),
        }
        if self.stop_at is not None:
            out.update(functions_to_label=self.functions_to_label,
                       files_to_label=self.files_to_label,
                       depth=len([c for c in self.chain or [] if not c.startswith("--")]),
                       chain=self.chain, state_loads=self.state_loads,
                       state_saves=self.state_saves,
                       github_requests_to_label=self.requests[:-1])
        return out


def private_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()


def delivery(number: int = 1) -> tuple[bytes, dict[str, str]]:
    """The ``issues.labeled`` fixture for issue ``number``, adding the enrolment label, and
    its headers."""
    from tests.conftest import load_fixture, sign_body

    payload = json.loads(load_fixture("issues", "labeled"))
    payload["issue"]["number"] = number
    payload["label"] = c.gh_label("the-loop")
    payload["issue"]["labels"].append(c.gh_label("the-loop"))
    payload["installation"] = {"id": 1, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}
    body = json.dumps(payload).encode()
    return body, {"Content-Type": "application/json", "X-GitHub-Event": "issues",
                  "X-GitHub-Delivery": str(uuid.uuid4()),
                  "X-Hub-Signature-256": sign_body(body, SECRET)}


def measure(cpu_rounds: int = 0) -> dict[str, Any]:
    """Send one delivery through the receiver and the worker; returns both reports. With
    ``cpu_rounds``, then enrol that many more issues untraced, one delivery each, and add
    ``cpu``: the CPU seconds (this process, :func:`time.process_time`) of each one's
    receiver request and worker wake-up, as lists."""
    import redis

    from foundation.settings import Settings
    from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
    from the_loop.wiring import build_receiver, build_worker

    key = private_key()
    fake = HttpFakeGitHub(app_key=key)
    fake.add_repo(REPO, default_branch="master")
    fake.add_file(REPO, ".the-loop/collaborators.yaml",
                  "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n")
    fake.add_file(REPO, "specs/1/requirements.md",
                  "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n")
    api_url, stop = serve(fake)
    token = f"walk{uuid.uuid4().hex[:12]}"
    redis_url = os.environ.get("THE_LOOP_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
    env = {"REDIS_URL": redis_url, "THE_LOOP_REDIS_PREFIX": token,
           "THE_LOOP_QUEUE": token, "THE_LOOP_WEBHOOK_SECRET": SECRET,
           "THE_LOOP_GITHUB_API_URL": api_url, "THE_LOOP_GITHUB_APP_ID": "1",
           "THE_LOOP_GITHUB_PRIVATE_KEY": key,
           "THE_LOOP_GITHUB_WRITE_INTERVAL": "0", "THE_LOOP_GITHUB_READ_INTERVAL": "0",
           "THE_LOOP_LOG_LEVEL": "WARNING", "PATH": os.environ.get("PATH", "")}
    conn = redis.Redis.from_url(redis_url)
    try:
        client = build_receiver(Settings.from_env(env, process="receiver")).test_client()
        processor = build_worker(Settings.from_env(env, process="worker"))
        body, headers = delivery()
        receiver = Tracer(len(body))
        answer = receiver.run(lambda: client.post("/webhook", data=body, headers=headers))
        if answer.status_code != 202:
            raise SystemExit(f"the receiver answered {answer.status_code}: {answer.data!r}")
        worker = Tracer(len(body), stop_at=is_label_request)
        handled = worker.run(processor.dispatch)
        labels = [label for label in fake.labels(REPO, 1) if label.startswith("phase:")]
        if worker.chain is None or not labels:
            raise SystemExit(f"no phase label was written (handled: {handled})")
        cpu: dict[str, list[float]] = {"receiver": [], "worker": []}
        for number in range(2, 2 + cpu_rounds):
            fake.set_issue_labels(REPO, number, ["the-loop"])
            body, headers = delivery(number)
            began = time.process_time()
            answer = client.post("/webhook", data=body, headers=headers)
            cpu["receiver"].append(time.process_time() - began)
            began = time.process_time()
            done = processor.dispatch()
            cpu["worker"].append(time.process_time() - began)
            if answer.status_code != 202 or [h.outcome for h in done] != ["advanced"]:
                raise SystemExit(f"issue {number}: {answer.status_code}, {done}")
        return {"receiver": receiver.report(), "worker": worker.report(),
                "handled": [h.outcome for h in handled], "phase_labels": labels,
                **({"cpu": cpu} if cpu_rounds else {})}
    finally:
        stop()
        for key in conn.scan_iter(match=f"*{token}*", count=500):
            conn.delete(key)
        for member in conn.smembers("rq:queues"):
            if token in member.decode():
                conn.srem("rq:queues", member)


def print_report(result: dict[str, Any]) -> None:
    for side in ("receiver", "worker"):
        r = result[side]
        print(f"{side.upper()}: {len(r['functions'])} project functions entered, "
              f"{len(r['files'])} files, {r['body_parses']} parse(s) of the body")
        if side == "worker":
            print(f"  up to the label request: {r['functions_to_label']} functions, "
                  f"{r['files_to_label']} files; depth at the label request: {r['depth']}")
            print(f"  state loads: {r['state_loads']}, saves: {r['state_saves']}; "
                  f"GitHub requests before the label: {len(r['github_requests_to_label'])}")
            for request in r["github_requests_to_label"]:
                print(f"    {request}")
        print("  functions (in order of first entry):")
        for name in r["functions"]:
            print(f"    {name}")
        print("  files:")
        for name in r["files"]:
            print(f"    {name}")
        print("  JSON parses:")
        for p in r["json_parses"]:
            print(f"    {p['bytes']} bytes{' (the body)' if p['body'] else ''} "
                  f"from {p['caller']}")
        if side == "worker":
            print("  call chain at the label request (project frames, outermost first):")
            for frame in r["chain"]:
                print(f"    {frame}")
    print(f"handled: {result['handled']}; labels written: {result['phase_labels']}")
    if "cpu_median_ms" in result:
        print(f"CPU per enrolment delivery, median of {len(result['cpu']['worker'])}: "
              f"receiver {result['cpu_median_ms']['receiver']} ms, "
              f"worker {result['cpu_median_ms']['worker']} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--cpu", type=int, default=0, metavar="N",
                        help="then enrol N more issues untraced and report the median CPU "
                             "time of the receiver request and the worker wake-up")
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)  # start-up notes (unconfigured Slack) are not the walk
    result = measure(args.cpu)
    if args.cpu:
        result["cpu_median_ms"] = {side: round(statistics.median(v) * 1000, 3)
                                   for side, v in result["cpu"].items()}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
