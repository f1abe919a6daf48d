"""GitHub API budget: REST calls per transition for the full issue and pull request flow,
through the real receiver and worker, against the loopback fake GitHub.

The flow (default graph ``graph/pdlc.yaml``, App mode, installation 1):

- issue #1 labelled ``the-loop`` (its ``specs/1/*.md`` on the default branch): enrolled
  at ``requirements`` -> ``requirements-approval``; ``/approve`` -> ``design`` ->
  ``design-approval``; ``/approve`` -> ``tasks`` -> ``implementation`` (which then waits
  for a pull request head);
- pull request #2 labelled ``the-loop`` (its ``specs/2/*.md`` on its head branch, one
  source file changed): ``requirements`` -> ``requirements-approval``; an approving review
  -> ``design`` -> ``design-approval``; another -> ``tasks`` -> ``implementation``, which
  waits for its check; the check run ``tests`` completes successfully -> ``review``; an
  approving review -> ``done``.

``--comments N`` first puts N comments by someone else on each work item, made long
before (the status comment's cost must not grow with them). The repository has the ``phase:`` labels
already (the steady state of a repository the-loop has worked in); ``--cold`` leaves
them out, so the run also pays their one-time creation (``POST /labels``, one per
phase).

Each delivery is sent to the receiver (:func:`the_loop.wiring.build_receiver`, Flask's test
client) and handled by the worker (:func:`the_loop.wiring.build_worker`, one
:meth:`~workers.drain.DeliveryProcessor.dispatch` after another until the queue is
idle); the fake's request log (:attr:`the_loop.sandbox.fakegithub.http.HttpFakeGitHub.requests`)
is split per delivery into **reads** (``GET`` answered with a body), **304s**
(conditional ``GET`` answered Not Modified: free of the primary rate limit) and **writes**
(POST/PATCH/PUT/DELETE); installation-token requests and git traffic are left out.
Transitions are the nodes entered (``work-item.enrolled`` and ``edge.taken`` events).

Transitions per hour one installation sustains, from the per-transition figures:

- primary limit, 5,000 requests an hour, counting reads and writes (not 304s):
  ``5000 / (reads + writes)``;
- secondary limits on content-creating requests, 80 a minute and 500 an hour (GitHub's
  "Rate limits for the REST API"; every write counts as one here):
  ``min(500, 80 * 60) / writes``;
- ``sustained``: the smaller of the two.

Also reported: ``repeated_gets``, GETs of a URL already read within the same delivery
(the per-delivery memo should make these 0), and ``conditional``, the GETs that carried
``If-None-Match``/``If-Modified-Since``.

Usage::

    .venv/bin/python benchmarks/api_budget.py [--comments 0] [--json]
    .venv/bin/python benchmarks/api_budget.py --code OTHER_CHECKOUT   # e.g. main's code

``--code`` imports the-loop (and its fake GitHub) from another checkout of this
repository, so one script measures before and after side by side.

Redis: ``THE_LOOP_BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/13``); every key
and queue carries a unique token (``budget`` + 12 hex digits) and only those keys are
deleted afterwards. Never FLUSHDB.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402  (the shared payload helpers)

REPO = "Codertocat/Hello-World"
SECRET = "budget-secret"
COLLABORATORS = ("version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n")
SPECS = {
    "requirements.md": "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n",
    "design.md": "# D\n\n## Overview\n\nx\n\n## Security design\n\ny\n",
    "tasks.md": ("# T\n\n## Tasks\n\n```yaml\ntasks:\n  - id: t1\n    title: Do it\n"
                 "    depends_on: []\n    acceptance: [\"it is done\"]\n```\n"),
}
WRITES = frozenset({"POST", "PATCH", "PUT", "DELETE"})
PRIMARY_PER_HOUR = 5000
SECONDARY_PER_HOUR = 500
SECONDARY_PER_MINUTE = 80


def private_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()


def payload(event: str, action: str) -> dict[str, Any]:
    from tests.conftest import load_payload

    p = load_payload(event, action)
    p["installation"] = {"id": 1, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}
    return p


def issue_enrol() -> tuple[str, dict[str, Any]]:
    p = payload("issues", "labeled")
    p["label"] = c.gh_label("the-loop")
    p["issue"]["labels"].append(c.gh_label("the-loop"))
    return "issues", p


def issue_approve(cid: int) -> tuple[str, dict[str, Any]]:
    p = payload("issue_comment", "created")
    p["issue"]["labels"].append(c.gh_label("the-loop"))
    c.act_as(p, "Codertocat")
    p["comment"]["body"] = "/approve"
    p["comment"]["id"] = cid
    return "issue_comment", p


def pull_enrol() -> tuple[str, dict[str, Any]]:
    p = payload("pull_request", "labeled")
    p["label"] = c.gh_label("the-loop")
    p["pull_request"]["labels"].append(c.gh_label("the-loop"))
    return "pull_request", p


def pull_review(head_sha: str, rid: int) -> tuple[str, dict[str, Any]]:
    p = payload("pull_request_review", "submitted")
    p["review"].update(state="approved", commit_id=head_sha, id=rid)
    p["pull_request"]["labels"].append(c.gh_label("the-loop"))
    c.act_as(p, "Codertocat")
    return "pull_request_review", p


def check_completed(head_sha: str, number: int) -> tuple[str, dict[str, Any]]:
    p = payload("check_run", "completed")
    run = p["check_run"]
    run.update(name="tests", head_sha=head_sha, status="completed", conclusion="success")
    run["check_suite"]["head_sha"] = head_sha
    for pr in run.get("pull_requests") or []:
        pr["number"] = number
        pr["head"]["sha"] = head_sha
    return "check_run", p


def split(requests: list[Any]) -> dict[str, Any]:
    """One delivery's requests as reads, 304s, writes and repeated GETs."""
    counted = [r for r in requests if "/access_tokens" not in r.path
               and ".git/" not in r.path]
    reads = [r for r in counted if r.method == "GET" and getattr(r, "status", 200) != 304]
    not_modified = [r for r in counted if r.method == "GET"
                    and getattr(r, "status", 200) == 304]
    writes = [r for r in counted if r.method in WRITES]
    seen: collections.Counter[tuple[str, str]] = collections.Counter(
        (r.path, r.query) for r in counted if r.method == "GET")
    return {
        "reads": len(reads), "not_modified": len(not_modified), "writes": len(writes),
        "conditional": sum(1 for r in counted if r.method == "GET"
                           and getattr(r, "conditional", False)),
        "repeated_gets": sum(n - 1 for n in seen.values() if n > 1),
        "repeated": sorted(f"{p}{'?' + q if q else ''} x{n}" for (p, q), n in seen.items()
                           if n > 1),
        "write_ops": sorted(f"{r.method} {_shape(r.path)}" for r in writes),
    }


def _shape(path: str) -> str:
    parts = path.split("/")
    return "/".join("N" if p.isdigit() else p for p in parts[4:]) or path


PHASES = ("requirements", "requirements-approval", "design", "design-approval", "tasks",
          "implementation", "review", "done")


def measure(comments: int, *, cold: bool = False) -> dict[str, Any]:
    import redis

    from foundation.settings import Settings
    from tests.conftest import sign_body
    from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
    from the_loop.wiring import build_receiver, build_worker

    key = private_key()
    fake = HttpFakeGitHub(app_key=key)
    fake.add_repo(REPO, default_branch="master")
    fake.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS)
    if not cold:
        for phase in PHASES:
            fake.add_repo_label(REPO, f"phase:{phase}", color="5319e7")
    for name, text in SPECS.items():
        fake.add_file(REPO, f"specs/1/{name}", text)
    _, pr = pull_enrol()
    head = pr["pull_request"]["head"]
    fake.add_pull(REPO, 2, head_sha=head["sha"], head_ref=head["ref"], files=["src/app.py"])
    for ref in (head["sha"], head["ref"]):
        for name, text in SPECS.items():
            fake.add_file(REPO, f"specs/2/{name}", text, ref=ref)
    for number in (1, 2):
        for i in range(comments):
            made = fake.comment_store[fake.add_comment(REPO, number, f"comment {i}",
                                                       user="octocat")]
            made["created_at"] = made["updated_at"] = "2020-01-01T00:00:00Z"  # long ago
    api_url, stop = serve(fake)
    token = f"budget{uuid.uuid4().hex[:12]}"
    redis_url = os.environ.get("THE_LOOP_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
    env = {"REDIS_URL": redis_url, "THE_LOOP_REDIS_PREFIX": token,
           "THE_LOOP_QUEUE": token, "THE_LOOP_WEBHOOK_SECRET": SECRET,
           "THE_LOOP_GITHUB_API_URL": api_url, "THE_LOOP_GITHUB_APP_ID": "1",
           "THE_LOOP_GITHUB_PRIVATE_KEY": key,
           "THE_LOOP_GITHUB_WRITE_INTERVAL": "0", "THE_LOOP_GITHUB_READ_INTERVAL": "0",
           "THE_LOOP_GITHUB_WRITES_PER_MINUTE": "6000",
           "THE_LOOP_GITHUB_WRITES_PER_HOUR": "60000",
           "THE_LOOP_LOG_LEVEL": "WARNING", "PATH": os.environ.get("PATH", "")}
    conn = redis.Redis.from_url(redis_url)
    deliveries: list[dict[str, Any]] = []
    try:
        client = build_receiver(Settings.from_env(env, process="receiver")).test_client()
        processor = build_worker(Settings.from_env(env, process="worker"))
        store = processor.agent.store

        def transitions() -> int:
            return sum(1 for ref in (f"github:{REPO}#1", f"github:{REPO}#2")
                       for e in store.events(ref)
                       if e.type in ("work-item.enrolled", "edge.taken"))

        def send(name: str, event: str, body_json: dict[str, Any]) -> None:
            before_requests, before_moves = len(fake.requests), transitions()
            body = json.dumps(body_json).encode()
            answer = client.post("/webhook", data=body, headers={
                "Content-Type": "application/json", "X-GitHub-Event": event,
                "X-GitHub-Delivery": str(uuid.uuid4()),
                "X-Hub-Signature-256": sign_body(body, SECRET)})
            if answer.status_code != 202:
                raise SystemExit(f"{name}: the receiver answered {answer.status_code}")
            for _ in range(20):
                if not processor.dispatch():
                    break
            row = split(fake.requests[before_requests:])
            row.update(delivery=name, transitions=transitions() - before_moves)
            deliveries.append(row)

        send("issue labelled", *issue_enrol())
        send("issue /approve (requirements)", *issue_approve(9001))
        send("issue /approve (design)", *issue_approve(9002))
        send("pull request labelled", *pull_enrol())
        send("review approved (requirements)", *pull_review(head["sha"], 7001))
        send("review approved (design)", *pull_review(head["sha"], 7002))
        send("check run tests completed", *check_completed(head["sha"], 2))
        send("review approved (review)", *pull_review(head["sha"], 7003))
        nodes = {ref: (s.current_node if (s := store.load(ref)) else None)
                 for ref in (f"github:{REPO}#1", f"github:{REPO}#2")}
    finally:
        stop()
        for key in conn.scan_iter(match=f"*{token}*", count=500):
            conn.delete(key)
        for member in conn.smembers("rq:queues"):
            if token in member.decode():
                conn.srem("rq:queues", member)
    return summarize(deliveries, nodes, comments) | {"cold": cold}


def summarize(deliveries: list[dict[str, Any]], nodes: dict[str, Any],
              comments: int) -> dict[str, Any]:
    total = {k: sum(d[k] for d in deliveries)
             for k in ("reads", "not_modified", "writes", "conditional", "repeated_gets",
                       "transitions")}
    moves = max(1, total["transitions"])
    reads, not_modified, writes = (total["reads"] / moves, total["not_modified"] / moves,
                                   total["writes"] / moves)
    primary = PRIMARY_PER_HOUR / max(reads + writes, 1e-9)
    secondary = min(SECONDARY_PER_HOUR, SECONDARY_PER_MINUTE * 60) / max(writes, 1e-9)
    ops: collections.Counter[str] = collections.Counter(
        op for d in deliveries for op in d["write_ops"])
    return {
        "comments_per_item": comments, "final_nodes": nodes, "totals": total,
        "per_transition": {"calls": round(reads + not_modified + writes, 2),
                           "reads": round(reads, 2), "not_modified": round(not_modified, 2),
                           "writes": round(writes, 2)},
        "transitions_per_hour": {"primary": round(primary, 1),
                                 "secondary": round(secondary, 1),
                                 "sustained": round(min(primary, secondary), 1)},
        "writes_by_endpoint": dict(ops.most_common()),
        "deliveries": deliveries,
    }


def print_report(r: dict[str, Any]) -> None:
    t, p, h = r["totals"], r["per_transition"], r["transitions_per_hour"]
    print(f"comments per work item: {r['comments_per_item']}; final nodes: {r['final_nodes']}")
    print(f"{'delivery':34} {'moves':>5} {'reads':>5} {'304':>5} {'writes':>6} "
          f"{'cond':>5} {'rep':>4}")
    for d in r["deliveries"]:
        print(f"{d['delivery']:34} {d['transitions']:5} {d['reads']:5} {d['not_modified']:5} "
              f"{d['writes']:6} {d['conditional']:5} {d['repeated_gets']:4}")
    print(f"{'total':34} {t['transitions']:5} {t['reads']:5} {t['not_modified']:5} "
          f"{t['writes']:6} {t['conditional']:5} {t['repeated_gets']:4}")
    print(f"per transition: {p['calls']} calls = {p['reads']} reads + {p['not_modified']} "
          f"304s + {p['writes']} writes")
    print(f"transitions/hour for one installation: primary {h['primary']}, secondary "
          f"{h['secondary']}, sustained {h['sustained']}")
    print("writes by endpoint: " + ", ".join(f"{k} x{v}"
                                             for k, v in r["writes_by_endpoint"].items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comments", type=int, default=0,
                        help="comments by someone else on each work item first")
    parser.add_argument("--code", type=Path, default=HERE,
                        help="checkout whose the-loop is measured (default: this one)")
    parser.add_argument("--cold", action="store_true",
                        help="the repository has no phase: labels yet")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.code.resolve()))
    import logging

    logging.disable(logging.WARNING)
    result = measure(args.comments, cold=args.cold)
    result["code"] = str(args.code)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
