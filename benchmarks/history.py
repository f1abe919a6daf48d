"""History benchmark: CPU per delivery as a work item's past grows.

Each sample is one work item of ``Codertocat/Hello-World`` walked by the real worker
(``the_loop.wiring.build_processor``: routes, runtime, hooks, outbox, Redis state store)
against the in-process fake GitHub (``the_loop.sandbox.fakegithub.state.FakeGitHub``), Redis
database 13. The item is enrolled with its requirements in place, taken twice around the
changes-requested loop for real (``/request-changes``, the artifact changed, back at the
gate), and then given ``N`` prior events: the entries of its event log are repeated in
front of the real ones until the log holds ``N``, and whatever the stored state record
keeps per past step (lists such as ``history`` and ``decisions`` in older formats) is
repeated by the same factor, so the record is what that many events would have left.
Then, at the gate, the CPU (``time.process_time``, the whole process: worker code, Redis
client and the fake) of each of these is measured:

- **comment**: a plain comment (decides nothing) delivered through the inbox (five of
  them per sample: their median);
- **retry**: each of those deliveries handled again as a replay (an earlier attempt had
  started: ``DeliveryProcessor.handle(record, replay=True)``; the median of five);
- **loop**: one changes-requested loop, two deliveries: ``/request-changes`` (back to
  ``requirements``) and a comment after the artifact changed (back to the gate);
- **transition**: ``/approve`` (the gate passes, ``design`` is entered, its entry chain
  runs, its exit chain blocks: no design yet).

Each figure is taken with the cyclic garbage collector paused (as ``timeit`` does) and is
the median over ``--reps`` work items per ``N``, the sizes interleaved. Also reported per
``N``: the state record's bytes (the JSON string plus, where the
format keeps them apart, the outbox's effect records) and the event log's bytes (sum of
its entries). Every key carries a unique token and is deleted afterwards (never FLUSHDB).

    .venv/bin/python benchmarks/history.py [--sizes 10,1000,10000] [--reps 5] [--json out]

The script uses only what both older and newer formats share (the processor, the store's
``load``/``events``, Redis keys by the store's ``state_key``/``events_key``), so the same
file measures an older checkout: ``--repo PATH`` imports the-loop from there.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _setup_path(repo: Path) -> None:
    """Import the-loop from ``repo`` (ahead of this checkout, which ``_common`` adds)."""
    sys.path.insert(0, str(HERE))
    import _common  # noqa: F401  (puts this checkout on the path first)

    sys.path.insert(0, str(repo))


REPO = "Codertocat/Hello-World"
COLLABORATORS = ("version: 1\nroles:\n  approver:\n"
                 "    - {name: Coder, github: Codertocat}\n")
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"
#: Comments (and their retries) measured per sample.
REPEAT = 5


class Bench:
    """One processor, one fake GitHub, one Redis namespace for a whole run."""

    def __init__(self, redis_url: str) -> None:
        import redis

        from foundation.inbox.enqueue import DeliveryQueue
        from foundation.settings import WorkerSettings
        from the_loop.graphs import load_graph
        from the_loop.sandbox.fakegithub.state import FakeGitHub
        from the_loop.wiring import build_processor
        from workers.state import RedisStateStore

        self.token = "bench" + uuid.uuid4().hex[:12]
        self.conn = redis.Redis.from_url(redis_url)
        self.gh = FakeGitHub()
        self.gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
        settings = WorkerSettings(prefix=self.token, queue=self.token)
        self.processor = build_processor(settings, self.conn, load_graph(None),
                                         lambda _i: self.gh)
        self.queue = DeliveryQueue(self.conn, queue_name=self.token, prefix=self.token)
        self.store = RedisStateStore(self.conn, self.token)
        self.comment_id = 10_000

    def close(self) -> None:
        import _common as c

        c.cleanup_redis(self.conn, self.token)

    # -- deliveries ------------------------------------------------------------------

    def _payload(self, event: str, name: str, number: int) -> dict[str, Any]:
        import _common as c

        from tests.conftest import load_payload

        p = load_payload(event, name)
        issue = p["issue"]
        issue["number"] = number
        issue.setdefault("labels", []).append(c.gh_label("the-loop"))
        return p

    def record(self, event: str, payload: dict[str, Any]) -> Any:
        from foundation.inbox.record import DeliveryRecord
        from webhook.events import parse_delivery

        body = json.dumps(payload).encode()
        parsed = parse_delivery({"X-GitHub-Event": event,
                                 "X-GitHub-Delivery": f"{self.token}-{uuid.uuid4()}",
                                 "Content-Type": "application/json"}, body)
        return parsed, DeliveryRecord.of(parsed, time.time())

    def deliver(self, event: str, payload: dict[str, Any]) -> tuple[float, Any]:
        """Enqueue as the receiver does, then drain; the CPU seconds of the drain."""
        parsed, record = self.record(event, payload)
        assert self.queue.enqueue(parsed)
        return cpu(lambda: self.processor.drain(parsed.work_item)), record

    def comment(self, number: int, body: str) -> tuple[float, Any]:
        import _common as c

        p = self._payload("issue_comment", "created", number)
        self.comment_id += 1
        p["comment"]["id"] = self.comment_id
        p["comment"]["body"] = body
        c.act_as(p, "Codertocat")
        return self.deliver("issue_comment", p)

    def enrol(self, number: int) -> None:
        import _common as c

        p = self._payload("issues", "labeled", number)
        p["label"] = c.gh_label("the-loop")
        self.deliver("issues", p)

    def node(self, number: int) -> str:
        state = self.store.load(self.ref(number))
        assert state is not None
        return f"{state.current_node}:{state.status}"

    @staticmethod
    def ref(number: int) -> str:
        return f"github:{REPO}#{number}"

    def loop(self, number: int, turn: int) -> float:
        """One changes-requested loop; its CPU seconds (two deliveries)."""
        cpu, _ = self.comment(number, "/request-changes\nplease say more")
        assert self.node(number).startswith("requirements:"), self.node(number)
        self.gh.add_file(REPO, f"specs/{number}/requirements.md",
                         REQUIREMENTS + f"\nrevision {turn}\n", ref="master")
        more, _ = self.comment(number, "updated the requirements")
        assert self.node(number) == "requirements-approval:waiting", self.node(number)
        return cpu + more

    # -- prior events ----------------------------------------------------------------

    def inflate(self, number: int, template: int, events: int) -> None:
        """Give item ``number`` ``events`` log entries: the entries of ``template``'s log
        (an item taken around the loop for real) repeated in front of its own, and the
        per-step lists of its state record (``history``, ``decisions``... in formats that
        keep them) grown at the template's rate per event."""
        ref, model = self.ref(number), self.ref(template)
        ekey, skey = self.store.events_key(ref), self.store.state_key(ref)
        own, pattern = self.conn.lrange(ekey, 0, -1), self.conn.lrange(
            self.store.events_key(model), 0, -1)
        missing = events - len(own)
        if missing <= 0:
            return
        extra = [pattern[i % len(pattern)] for i in range(missing)]
        pipe = self.conn.pipeline(transaction=True)
        pipe.delete(ekey)
        for start in range(0, len(extra), 1000):
            pipe.rpush(ekey, *extra[start:start + 1000])
        pipe.rpush(ekey, *own)
        raw = json.loads(self.conn.get(skey))
        modelled = json.loads(self.conn.get(self.store.state_key(model)))
        for key in ("history", "decisions", "forced", "migrations"):
            entries = modelled.get(key)
            if isinstance(entries, list) and entries and isinstance(raw.get(key), list):
                want = int(len(entries) * missing / len(pattern))
                raw[key] = [entries[i % len(entries)] for i in range(want)] + raw[key]
        pipe.set(skey, json.dumps(raw, sort_keys=True))
        pipe.execute()

    def sizes(self, number: int) -> dict[str, int]:
        ref = self.ref(number)
        record = self.conn.strlen(self.store.state_key(ref))
        effects_key = getattr(self.store, "effects_key", None)
        if callable(effects_key):
            record += sum(len(k) + len(v) for k, v in
                          self.conn.hgetall(effects_key(ref)).items())
        log = sum(len(e) for e in self.conn.lrange(self.store.events_key(ref), 0, -1))
        return {"state_bytes": record, "events": self.conn.llen(self.store.events_key(ref)),
                "event_log_bytes": log}


def cpu(fn: Any) -> float:
    """CPU seconds of ``fn()`` with the cyclic garbage collector paused, as ``timeit``
    does (a collection triggered by earlier allocations is not this delivery's cost)."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()
        fn()
        return time.process_time() - t0
    finally:
        gc.enable()


def template(bench: Bench, number: int) -> None:
    """An item taken twice around the changes-requested loop: the model of a past."""
    bench.gh.add_file(REPO, f"specs/{number}/requirements.md", REQUIREMENTS, ref="master")
    bench.enrol(number)
    for turn in (1, 2):
        bench.loop(number, turn)


def sample(bench: Bench, number: int, model: int, events: int) -> dict[str, Any]:
    bench.gh.add_file(REPO, f"specs/{number}/requirements.md", REQUIREMENTS, ref="master")
    bench.enrol(number)
    assert bench.node(number) == "requirements-approval:waiting", bench.node(number)
    bench.inflate(number, model, events)
    sizes = bench.sizes(number)
    comments, retries = [], []
    for _ in range(REPEAT):  # the cheap ones, a few times each: their median
        took, record = bench.comment(number, "looks good so far")
        comments.append(took)
        retries.append(cpu(functools.partial(bench.processor.handle, record, replay=True)))
    loop = bench.loop(number, 1)
    transition, _ = bench.comment(number, "/approve")
    assert bench.node(number).startswith("design:"), bench.node(number)
    return {"comment": statistics.median(comments), "retry": statistics.median(retries),
            "loop": loop, "transition": transition, **sizes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--repo", type=Path, default=HERE.parent,
                        help="the checkout to import the-loop from (default: this one)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    _setup_path(args.repo.resolve())
    import logging

    import _common as c

    logging.disable(logging.WARNING)
    sizes = [int(s) for s in args.sizes.split(",")]
    bench = Bench(c.BENCH_REDIS_URL)
    busy = c.cpu_busy_pct(0.5)
    results: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    try:
        number = 0
        # Interleave the sizes so drifting machine load touches each alike.
        for _ in range(args.reps):
            number += 1
            model = number
            template(bench, model)
            for n in sizes:
                number += 1
                results[n].append(sample(bench, number, model, n))
    finally:
        bench.close()
    table: dict[str, Any] = {"repo": str(args.repo), "machine": c.machine(),
                             "machine_busy_pct_before": busy, "reps": args.reps,
                             "sizes": {}}
    for n, runs in results.items():
        row: dict[str, Any] = {}
        for key in ("comment", "retry", "loop", "transition"):
            row[f"{key}_cpu_ms"] = round(1000 * statistics.median(r[key] for r in runs), 2)
        for key in ("state_bytes", "event_log_bytes", "events"):
            row[key] = int(statistics.median(r[key] for r in runs))
        table["sizes"][n] = row
    first, last = table["sizes"][sizes[0]], table["sizes"][sizes[-1]]
    table["ratio_last_to_first"] = {
        key: round(last[f"{key}_cpu_ms"] / first[f"{key}_cpu_ms"], 2)
        for key in ("comment", "retry", "loop", "transition")}
    print(f"{'events':>8} {'comment':>9} {'retry':>9} {'loop':>9} {'transition':>11} "
          f"{'state B':>9} {'log B':>10}  (CPU ms per delivery, median of {args.reps})")
    for row in table["sizes"].values():
        print(f"{row['events']:>8} {row['comment_cpu_ms']:>9} {row['retry_cpu_ms']:>9} "
              f"{row['loop_cpu_ms']:>9} {row['transition_cpu_ms']:>11} "
              f"{row['state_bytes']:>9} {row['event_log_bytes']:>10}")
    print(f"ratio {sizes[-1]}:{sizes[0]}: {table['ratio_last_to_first']}  "
          f"(machine busy before: {busy}%)")
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
