"""The whole sandbox walk of one work item, timed and counted: ``make run``'s script in
sandbox mode (the sandbox's GitHub, gunicorn, the worker, the runner with the demo agent:
real processes, the real Redis, real git) through the shipped graph, driven as a person
would (``the-loop sandbox``): label an issue ``the-loop``, ``/approve`` at each gate the
work item waits at, an approving pull request review at ``review``, a merge by the person
when the item waits at ``done`` for one (``the-loop sandbox merge``, where it exists).

It goes as far as the code allows: it stops when the work item is done (merged), or when
nothing happened for ``--quiet`` seconds while no step of the person's is due (a check
that never reports, a missing piece), and says where it stopped.

Figures:

- **wall**: from the label to the end (done, or the last progress seen).
- **agent**: the harness's own seconds, from each ``turn.completed`` event's
  ``agent_seconds`` (the demo agent: no model, so this is process start and file writes).
- **CI**: the ``tests`` check runs' ``completed_at - started_at`` on the work item's
  commits (the sandbox's CI running the repository's check on every push, beside
  everything else); only those on a head ``verify-tests`` or ``merge-pull-request``
  waited on are taken out of the-loop's share (the others did not hold the work item
  up). The sandbox's check runs carry whole seconds, so each run is +-1 s.
- **person**: from the moment the driver saw the item waiting for a person to the moment
  its command returned (the driver polls every 50 ms; the command is a process).
- **the-loop's own**: wall - agent - CI - person: the receiver, the worker's walks and
  hooks, the runner's workspaces, commits, pushes and merges, the sandbox's deliveries,
  and the queues between them.
- **GitHub calls** of the whole work item, from the sandbox's request log
  (``GET /_sandbox/requests``), the-loop's only (installation-token and App-JWT
  requests): REST reads (a GET answered with a body), 304s (a conditional GET answered
  Not Modified: free under the primary limit), writes (POST/PATCH/PUT/DELETE), GraphQL
  (``POST /graphql``; counted as writes for the secondary limit: mutations are
  content-creating), git (smart HTTP: fetch and push), token requests.
- **work items/hour** for one installation: under GitHub's secondary limits on
  content-creating requests (80 a minute, 500 an hour:
  https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits)
  ``min(80 * 60, 500) / writes``; under the primary limit (5,000 requests an hour for an
  installation) ``5000 / (reads + writes)``; the smaller is the sustained figure.

Usage::

    .venv/bin/python benchmarks/sandbox_walk.py [--auto-merge | --no-auto-merge] [--json]

Redis: ``THE_LOOP_TEST_REDIS_URL`` (database 14) under a unique prefix; only its keys
are deleted afterwards (never FLUSHDB).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _common as c  # noqa: E402

REF = "github:sandbox/demo#1"
USER = "octo-dev"
WRITES = ("POST", "PATCH", "PUT", "DELETE")
#: A wait for CI in a parked reason (verify-tests', merge-pull-request's): the (short)
#: head it waits on.
WAITED_ON = re.compile(r"waiting for check \S+ (?:to pass )?on ([0-9a-f]{7,40})")
#: GitHub's secondary limits on content-creating requests, per minute and per hour.
SECONDARY_PER_MINUTE, SECONDARY_PER_HOUR = 80, 500
#: GitHub's primary limit of an installation (non-Enterprise), requests an hour.
PRIMARY_PER_HOUR = 5000


def split(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """The-loop's requests (installation token or App JWT) of ``requests`` (the sandbox's
    request log entries) by kind."""
    own = [r for r in requests if r["auth"] in ("token", "bearer", "basic")]
    git = [r for r in own if ".git/" in r["path"] or r["path"].endswith(".git")]
    tokens = [r for r in own if r["path"].endswith("/access_tokens")]
    graphql = [r for r in own if r["path"] == "/graphql"]
    api = [r for r in own if r not in git and r not in tokens and r not in graphql]
    reads = [r for r in api if r["method"] == "GET" and r["status"] != 304]
    not_modified = [r for r in api if r["method"] == "GET" and r["status"] == 304]
    writes = [r for r in api if r["method"] in WRITES]
    kinds: dict[str, int] = {}
    for r in writes + graphql:
        shape = "/".join("N" if p.isdigit() else p for p in r["path"].split("/")[4:])
        key = f"{r['method']} {shape or r['path']}"
        kinds[key] = kinds.get(key, 0) + 1
    return {"reads": len(reads), "not_modified": len(not_modified), "writes": len(writes),
            "graphql": len(graphql), "git": len(git), "token_requests": len(tokens),
            "conditional": sum(1 for r in api if r["conditional"]),
            "errors": sum(1 for r in api if r["status"] >= 400 and r["status"] != 404),
            "write_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1]))}


def per_hour(calls: dict[str, Any]) -> dict[str, float | None]:
    """Work items an hour one installation can complete, from one item's calls."""
    writes = calls["writes"] + calls["graphql"]
    secondary = (min(SECONDARY_PER_MINUTE * 60, SECONDARY_PER_HOUR) / writes
                 if writes else None)
    primary = (PRIMARY_PER_HOUR / (calls["reads"] + calls["writes"])
               if calls["reads"] + calls["writes"] else None)
    return {"secondary": secondary and round(secondary, 1),
            "secondary_per_minute_burst": writes and round(
                SECONDARY_PER_MINUTE / writes, 2),
            "primary": primary and round(primary, 1),
            "sustained": round(min(x for x in (secondary, primary) if x is not None), 1)
            if secondary or primary else None}


def drive(run: Any, store: Any, graph: Any, *, quiet: float, timeout: float,
          merge_ok: bool) -> dict[str, Any]:
    """Walk the work item as a person would, until done or stuck; returns the timeline."""
    from graph.model import Status

    steps: list[dict[str, Any]] = []
    person = 0.0
    acted: set[tuple[str, int, str]] = set()
    waited_on: set[str] = set()
    t0 = time.monotonic()
    run.sandbox("issue", "create", "Add a login page", "--label", "the-loop")
    person += time.monotonic() - t0
    seen, last_progress, stopped = 0, time.monotonic(), "timeout"
    while time.monotonic() - t0 < timeout:
        state = store.load(REF)
        events = len(store.events(REF)) if state else 0
        now = time.monotonic()
        if events != seen:
            seen, last_progress = events, now
        if state is None:
            time.sleep(0.05)
            continue
        node = graph.nodes.get(state.current_node)
        for sha in WAITED_ON.findall(state.parked_reason or ""):
            waited_on.add(sha)
        if state.status == Status.DONE:
            stopped = "done"
            break
        action: tuple[str, ...] | None = None
        key = (state.current_node, state.visits.get(state.current_node, 1), "")
        if state.status == Status.WAITING and node is not None:
            if node.actor == "human" and node.id != "review":
                action = ("comment", "1", "/approve", "--as", USER)
            elif node.id == "review":
                pulls = run.show("1")["pull_requests"]
                if pulls:
                    action = ("review", str(pulls[0]["number"]), "approve", "--as", USER)
            elif graph.is_terminal(node.id) and merge_ok:
                pulls = run.show("1")["pull_requests"]
                if pulls:
                    action = ("merge", str(pulls[0]["number"]), "--as", USER)
        if action is not None and (*key[:2], action[0]) not in acted:
            acted.add((*key[:2], action[0]))
            started = time.monotonic()
            run.sandbox(*action)
            person += time.monotonic() - started
            steps.append({"at": round(started - t0, 2), "node": state.current_node,
                          "action": " ".join(action[:3])})
            last_progress = time.monotonic()
            continue
        if now - last_progress > quiet:
            stopped = (f"stuck: {state.current_node} {state.status}"
                       f" ({state.parked_reason or 'no reason recorded'})")
            break
        time.sleep(0.05)
    end = time.monotonic() if stopped == "done" else last_progress
    state = store.load(REF)
    return {"stopped": stopped, "wall_s": round(end - t0, 2), "person_s": round(person, 2),
            "waited_on": sorted(waited_on),
            "steps": steps, "node": state.current_node if state else None,
            "status": str(state.status) if state else None}


def ci_seconds(run: Any, heads: list[str],
               waited_on: list[str]) -> tuple[float, int, float]:
    """Seconds the ``tests`` check runs on ``heads`` took, how many there were, and the
    seconds of those on a head verify-tests waited on (``waited_on``: short shas; the
    others ran beside the-loop's work, not in its way). Read with an installation token
    the benchmark mints with the App's key, after the request log was taken."""
    from datetime import datetime

    def github_time(value: Any) -> float | None:
        try:
            return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None

    token = run.app_token()
    total, count, waited = 0.0, 0, 0.0
    for sha in dict.fromkeys(heads):
        listed = run.api("GET", f"/repos/sandbox/demo/commits/{sha}/check-runs",
                         token=token, params={"check_name": "tests", "filter": "all"})
        if not listed.ok:
            continue
        for check in listed.json().get("check_runs", []):
            began, ended = (github_time(check.get("started_at")),
                            github_time(check.get("completed_at")))
            if check.get("name") == "tests" and began and ended:
                total += ended - began
                count += 1
                if any(sha.startswith(short) for short in waited_on):
                    waited += ended - began
    return round(total, 2), count, round(waited, 2)


def measure(*, auto_merge: bool, quiet: float, timeout: float,
            keep: Path | None = None) -> dict[str, Any]:
    import redis

    from foundation.config.repository import HARNESS_CONFIG_PATH
    from tests.conftest import TEST_REDIS_URL, RedisNamespace, _cleanup
    from tests.support.sandbox_run import sandbox_run
    from the_loop.graphs import load_graph
    from workers.state import RedisStateStore

    token = f"t{uuid.uuid4().hex}"
    client = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=10)
    ns = RedisNamespace(client=client, url=TEST_REDIS_URL, token=token,
                        prefix=f"the-loop-walk-{token}", queue_name=f"the-loop-walk-{token}")
    busy = c.wait_quiet(0)
    try:
        with tempfile.TemporaryDirectory(prefix="sandbox-walk-") as tmp:
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                tmp = str(keep)
            extra = {"THE_LOOP_LOG_LEVEL": "INFO" if keep else "WARNING"}
            with sandbox_run(ns, Path(tmp), user=USER, extra_env=extra) as run:
                store = RedisStateStore(client, ns.prefix)
                if not auto_merge:  # the demo repository merges by itself unless told
                    run.commit_as_person(HARNESS_CONFIG_PATH,
                                         "version: 1\nmerge: {method: squash, auto: false}\n",
                                         "merge setting: a person merges")
                since = run.admin("/requests")["next"]  # the work item's calls from here
                timeline = drive(run, store, load_graph(), quiet=quiet, timeout=timeout,
                                 merge_ok=not auto_merge)
                log: list[dict[str, Any]] = []
                while True:
                    page = run.admin(f"/requests?since={since}")
                    log += page["requests"]
                    if page["next"] == since or not page["requests"]:
                        break
                    since = page["next"]
                events = store.events(REF)
                completed = [e.data for e in events if e.type == "turn.completed"]
                heads = [str(t["head_sha"]) for t in completed if t.get("head_sha")]
                heads += [sha for name, sha in run.show("1")["branches"].items()
                          if name != "main"]
                ci_all, ci_runs, ci = ci_seconds(run, heads, timeline["waited_on"])
    finally:
        _cleanup(ns)
    agent = round(sum(float(t.get("agent_seconds") or 0) for t in completed), 2)
    turn_s = round(sum(float(t.get("seconds") or 0) for t in completed), 2)
    own = round(timeline["wall_s"] - agent - ci - timeline["person_s"], 2)
    calls = split(log)
    return {
        "benchmark": "sandbox_walk", "auto_merge": auto_merge, **timeline,
        "turns": len(completed), "agent_s": agent, "turns_s": turn_s,
        "turns_own_s": round(turn_s - agent, 2), "ci_s": ci, "ci_all_s": ci_all, "ci_runs": ci_runs,
        "the_loop_own_s": own,
        "the_loop_own_share": round(own / timeline["wall_s"], 3) if timeline["wall_s"] else None,
        "events": len(events), "github": calls, "work_items_per_hour": per_hour(calls),
        "machine": c.machine(), "machine_busy_pct_before": busy,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--auto-merge", action=argparse.BooleanOptionalAction, default=True,
                        help="the demo repository merges by itself once approved "
                             "(default), or waits for the person's merge")
    parser.add_argument("--quiet", type=float, default=60.0,
                        help="stop after this many seconds without progress")
    parser.add_argument("--timeout", type=float, default=900.0, help="the whole walk")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the sandbox's directory and the processes' output here")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    args = parser.parse_args(argv)
    figures = measure(auto_merge=args.auto_merge, quiet=args.quiet, timeout=args.timeout,
                      keep=args.keep)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    g, h = figures["github"], figures["work_items_per_hour"]
    print(f"sandbox walk: {figures['stopped']} (at {figures['node']}, {figures['status']})")
    for s in figures["steps"]:
        print(f"  +{s['at']:7.2f} s  {s['node']}: {s['action']}")
    print(f"wall {figures['wall_s']} s = agent {figures['agent_s']} s ({figures['turns']} "
          f"turns) + CI waited on {figures['ci_s']} s (of {figures['ci_all_s']} s in "
          f"{figures['ci_runs']} runs) + person "
          f"{figures['person_s']} s + the-loop's own {figures['the_loop_own_s']} s "
          f"({100 * (figures['the_loop_own_share'] or 0):.0f}%); turns' own part "
          f"{figures['turns_own_s']} s of {figures['turns_s']} s")
    print(f"GitHub calls: {g['reads']} reads, {g['not_modified']} 304s, {g['writes']} "
          f"writes, {g['graphql']} GraphQL; git {g['git']}, token requests "
          f"{g['token_requests']}, errors {g['errors']}")
    print("writes: " + ", ".join(f"{k} x{v}" for k, v in g["write_kinds"].items()))
    print(f"work items/hour, one installation: secondary limit ({SECONDARY_PER_MINUTE}/min, "
          f"{SECONDARY_PER_HOUR}/h) {h['secondary']}, primary ({PRIMARY_PER_HOUR}/h) "
          f"{h['primary']}, sustained {h['sustained']}; per minute (burst) "
          f"{h['secondary_per_minute_burst']}")
    print(f"machine busy before: {figures['machine_busy_pct_before']}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
