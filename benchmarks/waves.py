"""Task plans and wave joins (graph/tasks.py, graph/runtime/waves.py).

1. Planning at the caps: a random DAG of 1,000 tasks and ~10,000 dependency edges (each
   task depends on up to 10 earlier ones, seed 7): ``graph_findings`` + ``build`` (the
   validation and the waves) on typed tasks, and ``check`` on the ``tasks.md`` text
   (YAML parsing included), median of ``--runs``.
2. A wave join's overhead: a plan of two waves of ``--width`` tasks run by the runtime
   (a recording AgentWork; the state in memory, and in Redis DB 13 under a unique
   prefix). Measured per report: the advance that records a task of a wave still open,
   and the advance whose report completes the wave (the join record saved, the event
   logged, the next wave's turns ordered). The overhead is the difference of medians.

    .venv/bin/python benchmarks/waves.py [--runs 15] [--width 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from _common import BENCH_REDIS_URL, cleanup_redis, machine, new_token

from foundation.hooks import REGISTRY
from graph import tasks as T
from graph.compile import compile_graph
from graph.context import HookConfig
from graph.model import InboundEvent, WorkItem
from graph.runtime import Runtime
from graph.state import MemoryStateStore
from graph.work import TURN_COMPLETED, TurnEnded

GRAPH = """version: 1
name: bench
start: implementation
nodes:
  - {id: implementation, actor: agent, plan: tasks.md, maxParallel: 64, exit: []}
  - {id: done, actor: system}
edges:
  - {from: implementation, to: done, on: pass}
"""
REF = "github:bench/waves#1"


def big_plan(n: int = 1000, fan_in: int = 10) -> list[T.Task]:
    rng = random.Random(7)
    return [T.Task(f"t{i:04d}", f"task {i}", tuple(sorted(
        f"t{j:04d}" for j in rng.sample(range(i), min(i, fan_in)))), ("it works",))
        for i in range(n)]


def timed(fn, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def planning(runs: int) -> dict:
    tasks = big_plan()
    text = "# Tasks\n\n## Tasks\n\n```yaml\ntasks:\n" + "".join(
        f"  - {json.dumps(t.to_dict())}\n" for t in tasks) + "```\n"
    plan = T.build(tasks)
    return {"tasks": len(plan.tasks), "edges": plan.edges, "waves": len(plan.waves),
            "validate_and_waves_ms": round(timed(lambda: T.build(tasks), runs), 2),
            "check_markdown_ms": round(timed(lambda: T.check(text), max(3, runs // 3)), 2),
            "to_json_ms": round(timed(plan.to_json, runs), 2)}


class Files:
    revision = "bench"

    def __init__(self, text: str) -> None:
        self.text = text

    def read_text(self, path: str) -> str | None:
        return self.text if path.endswith("tasks.md") else None


class Work:
    max_turns, cost_cap_usd = 3, None

    def __init__(self) -> None:
        self.orders = []

    def order(self, order) -> None:
        if order.id not in {o.id for o in self.orders}:
            self.orders.append(order)


def report(order) -> InboundEvent:
    ended = TurnEnded(id=order.id, status="completed", session_id=order.session_id,
                      head_sha="b" * 40, merged=True)
    return InboundEvent(TURN_COMPLETED, f"turn:{order.id}", actor="the-loop[bot]",
                        actor_type="Bot", turn=ended.to_dict())


def one_join(store_factory, width: int) -> tuple[list[float], float]:
    lines = [f"  - {{id: a{i}, title: A, acceptance: [ok]}}" for i in range(width)]
    lines += [f"  - {{id: b{i}, title: B, depends_on: [a{i}], acceptance: [ok]}}"
              for i in range(width)]
    text = "```yaml\ntasks:\n" + "\n".join(lines) + "\n```\n"
    graph = compile_graph(GRAPH, source="bench.yaml", registry=REGISTRY)
    store = store_factory()
    rt = Runtime(graph, store)
    work = Work()
    config = HookConfig(files=Files(text), work=work)
    item = WorkItem(ref=REF, id=1, repository="bench/waves", spec_dir="specs/1")
    rt.enrol(item, config, None)
    first = list(work.orders)
    open_reports = []
    for order in first[:-1]:
        start = time.perf_counter()
        rt.advance(item, config, report(order))
        open_reports.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    rt.advance(item, config, report(first[-1]))
    joined = (time.perf_counter() - start) * 1000
    assert len(work.orders) == 2 * width and rt.store.load(REF).plan["joins"]
    return open_reports, joined


def joins(runs: int, width: int) -> dict:
    out = {}
    import redis

    from workers.state import RedisStateStore

    conn = redis.Redis.from_url(BENCH_REDIS_URL)
    token = new_token()
    factories = {"memory": MemoryStateStore}
    try:
        conn.ping()
        factories["redis"] = lambda: RedisStateStore(conn, f"{token}:{time.monotonic_ns()}")
    except redis.RedisError:
        pass
    try:
        for name, factory in factories.items():
            plain, joined = [], []
            for _ in range(runs):
                o, j = one_join(factory, width)
                plain += o
                joined.append(j)
            p, jm = statistics.median(plain), statistics.median(joined)
            out[name] = {"advance_ms": round(p, 3), "advance_with_join_ms": round(jm, 3),
                         "join_overhead_ms": round(jm - p, 3)}
    finally:
        cleanup_redis(conn, token)
    return {"width": width, **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {"machine": machine(), "planning": planning(args.runs),
              "join": joins(args.runs, args.width)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    p = result["planning"]
    print(f"planning {p['tasks']} tasks / {p['edges']} edges ({p['waves']} waves): "
          f"validate + waves {p['validate_and_waves_ms']} ms, tasks.md text "
          f"{p['check_markdown_ms']} ms, JSON {p['to_json_ms']} ms")
    for store in ("memory", "redis"):
        j = result["join"].get(store)
        if j:
            print(f"wave join ({store} state, {args.width} tasks a wave): advance "
                  f"{j['advance_ms']} ms, with the join {j['advance_with_join_ms']} ms, "
                  f"overhead {j['join_overhead_ms']} ms")


if __name__ == "__main__":
    main()
