"""What the payload schema check costs the worker, per delivery, beside what the worker
already spends on the same delivery's body: the check (``PayloadSchemas.check``, warm:
each definition compiled once), the body's parse (``foundation.events.loads``) and its
typed reading (``GitHubEvent.parse``), side by side on the same real payloads, in one
process, interleaved (so a loaded machine slows all three alike); and the one-time
compile of each definition (cold, first use in a process). Then the worker's own
handling of one routine delivery (``DeliveryProcessor.handle`` of an
``issue_comment.created`` about an issue that is not enrolled: read, check, route, ignore;
real Redis, the in-process fake GitHub), with the check and without it, interleaved.

    .venv/bin/python benchmarks/payload_schema.py            # readable report
    .venv/bin/python benchmarks/payload_schema.py --json     # the same as JSON

Redis: ``THE_LOOP_BENCH_REDIS_URL`` (default DB 13); only keys holding this run's token
are written, and they are deleted at the end.

The payloads are those of ``worker.py``'s routine mix (issue_comment/created, push,
status, check_run/completed) and the enrolment and review paths (issues/labeled,
pull_request/opened, pull_request_review/submitted). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from foundation.events import GitHubEvent, loads  # noqa: E402
from foundation.webhook_schema import PayloadSchemas  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "github-webhooks" / "api.github.com"
CASES = [("issue_comment", "created"), ("push", "with-installation"),
         ("status", "payload"), ("check_run", "completed"), ("issues", "labeled"),
         ("pull_request", "opened"), ("pull_request_review", "submitted")]


def _body(event: str, name: str) -> bytes:
    folder = FIXTURES / event
    for candidate in (f"{name}.payload.json", f"{name}.json"):
        if (folder / candidate).is_file():
            return (folder / candidate).read_bytes()
    raise SystemExit(f"no fixture {event}/{name}")


def _per_call_us(fn, rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - start) / rounds * 1e6


def measure_one(event: str, name: str, rounds: int, repeats: int) -> dict:
    """The figures of one payload (see the module docstring)."""
    body = _body(event, name)
    payload = loads(body)
    action = payload.get("action")
    schemas = PayloadSchemas()
    start = time.perf_counter()
    first = schemas.check(event, action, payload)  # compiles the definition
    compile_ms = (time.perf_counter() - start) * 1e3
    checks, parses, reads = [], [], []
    for _ in range(repeats):  # interleaved: the same load for all three
        checks.append(_per_call_us(lambda: schemas.check(event, action, payload), rounds))
        parses.append(_per_call_us(lambda: loads(body), rounds))
        reads.append(_per_call_us(lambda: GitHubEvent.parse(event, payload), rounds))
    check, parse, read = (statistics.median(x) for x in (checks, parses, reads))
    return {"event": event, "action": action, "bytes": len(body), "outcome": first.outcome,
            "compile_ms": round(compile_ms, 1), "check_us": round(check, 1),
            "loads_us": round(parse, 1), "parse_us": round(read, 1),
            "check_per_loads_and_parse": round(check / (parse + read), 2)}


def measure(rounds: int, repeats: int) -> list[dict]:
    return [measure_one(event, name, rounds, repeats) for event, name in CASES]


def routine(rounds: int, repeats: int) -> dict:
    """Median microseconds of ``DeliveryProcessor.handle`` for one routine delivery, with
    the schema check (github.com) and without it (the check passes everything)."""
    import uuid

    import redis

    from foundation.inbox.record import DeliveryRecord
    from foundation.settings import WorkerSettings
    from the_loop.graphs import load_graph
    from the_loop.sandbox.fakegithub.state import FakeGitHub
    from the_loop.wiring import build_processor
    from webhook.events import parse_delivery

    url = os.environ.get("THE_LOOP_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
    conn = redis.Redis.from_url(url)
    token = f"schemabench{uuid.uuid4().hex[:12]}"
    settings = WorkerSettings(prefix=token, queue=token)
    gh = FakeGitHub()
    graph = load_graph()
    body = _body("issue_comment", "created")
    record = DeliveryRecord.of(parse_delivery(
        {"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": f"{token}-1",
         "Content-Type": "application/json"}, body), time.time())
    processors = {
        "checked": build_processor(settings, conn, graph, lambda _i: gh,
                                   schemas=PayloadSchemas()),
        "unchecked": build_processor(settings, conn, graph, lambda _i: gh,
                                     schemas=PayloadSchemas(enterprise=True)),
    }
    try:
        for processor in processors.values():
            assert processor.handle(record).outcome == "ignored"  # warm: config, compile
        times: dict[str, list[float]] = {name: [] for name in processors}
        for _ in range(repeats):
            for name, processor in processors.items():
                times[name].append(_per_call_us(lambda p=processor: p.handle(record), rounds))
    finally:
        keys = list(conn.scan_iter(match=f"*{token}*", count=1000))
        if keys:
            conn.delete(*keys)
        conn.close()
    checked, unchecked = (statistics.median(times[n]) for n in ("checked", "unchecked"))
    return {"checked_us": round(checked, 1), "unchecked_us": round(unchecked, 1),
            "added_fraction": round(checked / unchecked - 1, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = measure(args.rounds, args.repeats)
    worker = routine(max(20, args.rounds // 5), args.repeats)
    if args.json:
        print(json.dumps({"payloads": rows, "routine_delivery": worker}, indent=2))
        return
    print(f"{'event.action':34} {'bytes':>6} {'check us':>9} {'loads us':>9} "
          f"{'parse us':>9} {'ratio':>6} {'compile ms':>11}")
    for r in rows:
        kind = f"{r['event']}.{r['action']}" if r["action"] else r["event"]
        print(f"{kind:34} {r['bytes']:>6} {r['check_us']:>9} {r['loads_us']:>9} "
              f"{r['parse_us']:>9} {r['check_per_loads_and_parse']:>6} {r['compile_ms']:>11}")
    print(f"routine issue_comment.created, DeliveryProcessor.handle: "
          f"{worker['checked_us']} us checked, {worker['unchecked_us']} us unchecked "
          f"(+{worker['added_fraction']:.0%})")


if __name__ == "__main__":
    main()
