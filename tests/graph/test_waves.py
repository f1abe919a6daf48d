"""An agent node with a plan, at the runtime level: waves of task turns under
``maxParallel``, the durable join record before the next wave's first turn, a failed task
keeping its dependents pending, a task's block fed to its own session, and
``work-graph.json`` rewritten at each join.

The runner is a recording :class:`graph.work.AgentWork`; the test reports the turns."""

from __future__ import annotations

import dataclasses
import json

from foundation.hooks import REGISTRY
from graph.compile import compile_graph
from graph.model import InboundEvent
from graph.runtime import Runtime
from graph.state import MemoryStateStore
from graph.work import TURN_COMPLETED, TurnEnded
from tests.graph.test_runtime import REF, REPO, setup

GRAPH = """
version: 1
name: waves
start: implementation
nodes:
  - id: implementation
    actor: agent
    command: implement
    plan: tasks.md
    maxParallel: {max_parallel}
    exit: [log-entry]
  - id: done
    actor: system
edges:
  - {{from: implementation, to: done, on: pass}}
"""

#: a, b (wave 1) -> c (wave 2, needs a and b) ; d (wave 2, needs a) -> e (wave 3)
TASKS = """# Tasks

## Tasks

```yaml
tasks:
  - {id: a, title: A, acceptance: [a works]}
  - {id: b, title: B, acceptance: [b works]}
  - {id: c, title: C, depends_on: [a, b], acceptance: [c works]}
  - {id: d, title: D, depends_on: [a], acceptance: [d works]}
  - {id: e, title: E, depends_on: [d], acceptance: [e works]}
  - {id: f, title: F, acceptance: [f works]}
```
"""


class Runner:
    """Records orders; checks, as each is placed, what the state already holds."""

    def __init__(self, store, max_turns=3, cost_cap_usd=None):
        self.store, self.max_turns, self.cost_cap_usd = store, max_turns, cost_cap_usd
        self.orders = []
        self.joins_seen = {}

    def order(self, order):
        if order.id in {o.id for o in self.orders}:
            return
        state = self.store.load(order.ref)
        self.joins_seen[order.id] = [j["wave"] for j in state.plan["joins"]]
        self.orders.append(order)


def report(order, status="completed", merged=True, delivery=None):
    ended = TurnEnded(id=order.id, status=status, session_id=order.session_id,
                      harness_session=f"h-{order.task_id}-{order.number}",
                      head_sha="b" * 40, cost_usd=0.01, seconds=1.0, merged=merged,
                      detail="" if status == "completed" else "exit 1")
    return InboundEvent(TURN_COMPLETED, delivery or f"turn:{order.id}", actor="the-loop[bot]",
                        actor_type="Bot", turn=ended.to_dict())


def build(max_parallel=2, **runner):
    gh, config, item, _ = setup()
    graph = compile_graph(GRAPH.format(max_parallel=max_parallel), source="waves.yaml",
                          registry=REGISTRY)
    store = MemoryStateStore()
    rt = Runtime(graph, store, clock=lambda: 1000.0)
    work = Runner(store, **runner)
    gh.add_file(REPO, "specs/1/tasks.md", TASKS)
    config = dataclasses.replace(config, work=work, head_ref="the-loop/1-x")
    return gh, config, item, rt, work


def live(work, rt):
    state = rt.store.load(REF)
    return sorted(t for t, s in state.plan["status"].items() if s == "running")


def by_task(work, task):
    return [o for o in work.orders if o.task_id == task]


def test_waves_run_in_order_with_at_most_max_parallel_sessions_and_join_first():
    gh, config, item, rt, work = build(max_parallel=2)
    r = rt.enrol(item, config, None)
    assert r.status == "working"
    assert [o.task_id for o in work.orders] == ["a", "b"]  # wave 1 is a, b, f; cap 2
    assert live(work, rt) == ["a", "b"]
    rt.advance(item, config, report(work.orders[0]))  # a passes: f takes its slot
    assert [o.task_id for o in work.orders] == ["a", "b", "f"]
    rt.advance(item, config, report(work.orders[1]))
    assert len(work.orders) == 3  # wave 2 waits for f: the join comes first
    rt.advance(item, config, report(work.orders[2]))
    assert [o.task_id for o in work.orders[3:]] == ["c", "d"]
    for o in work.orders[3:]:
        assert work.joins_seen[o.id] == [1]  # the join record was saved before the order
    state = rt.store.load(REF)
    assert state.plan["joins"][0] == {"wave": 1, "passed": ["a", "b", "f"], "failed": [],
                                      "blocked": [], "at": 1000.0}
    types = [e.type for e in rt.store.events(REF)]
    assert types.index("wave.joined") < max(i for i, t in enumerate(types)
                                            if t == "turn.ordered")
    for o in work.orders[3:5]:
        rt.advance(item, config, report(o))
    [e] = work.orders[5:]
    assert e.task_id == "e" and work.joins_seen[e.id] == [1, 2]
    r = rt.advance(item, config, report(e))
    assert (r.status, r.node) == ("done", "done")  # the exit chain ran after the last join
    first = work.orders[0]
    assert first.task == {"id": "a", "title": "A", "acceptance": ["a works"], "paths": [],
                          "tier": None, "wave": 1, "shared": False}
    assert first.id == f"{REF}/implementation/1/task/a/turn/1"
    assert first.seeded_with == ()
    assert len({o.session_id for o in work.orders}) == 6  # one session per task


def test_a_failed_task_keeps_its_dependents_and_later_waves_pending():
    gh, config, item, rt, work = build(max_parallel=3, max_turns=2)
    rt.enrol(item, config, None)
    a, b, f = work.orders
    rt.advance(item, config, report(b))
    rt.advance(item, config, report(f))
    rt.advance(item, config, report(a, status="failed"))
    [a2] = work.orders[3:]
    assert (a2.task_id, a2.number, a2.session_id, a2.resume) == ("a", 2, a.session_id,
                                                                  "h-a-1")
    assert "ended without completing" in json.dumps(a2.feedback)  # its own block, its session
    r = rt.advance(item, config, report(a2, status="failed"))
    assert r.status == "escalated"
    state = rt.store.load(REF)
    assert state.plan["joins"] == [{"wave": 1, "passed": ["b", "f"], "failed": ["a"],
                                    "blocked": ["c", "d", "e"], "at": 1000.0}]
    assert len(work.orders) == 4  # nothing of wave 2 was ordered
    assert "task a of wave 1 failed" in state.escalated["reason"]
    graph_doc = json.loads(gh.file(REPO, "specs/1/work-graph.json", "the-loop/1-x"))
    statuses = {n["task"]: n["status"] for n in graph_doc["nodes"] if n["kind"] == "task"}
    assert statuses == {"a": "failed", "b": "passed", "c": "blocked", "d": "blocked",
                        "e": "blocked", "f": "passed"}


def test_a_merge_conflict_fails_the_task_at_once_and_a_replayed_report_counts_once():
    gh, config, item, rt, work = build(max_parallel=3)
    rt.enrol(item, config, None)
    a, b, f = work.orders
    rt.advance(item, config, report(a, delivery="r1"))
    rt.advance(item, config, report(a, delivery="r1"))  # the same delivery again
    assert rt.store.load(REF).spend["turns"] == 1
    rt.advance(item, config, report(f))
    r = rt.advance(item, config, report(b, merged=False))
    assert r.status == "escalated"
    assert rt.store.load(REF).plan["joins"][0]["failed"] == ["b"]


def test_max_parallel_one_runs_tasks_one_at_a_time_on_the_shared_branch():
    gh, config, item, rt, work = build(max_parallel=1)
    rt.enrol(item, config, None)
    for expected in ["a", "b", "f", "c", "d", "e"]:
        [last] = work.orders[-1:]
        assert last.task_id == expected and last.task["shared"] is True
        assert live(work, rt) == [expected]
        rt.advance(item, config, report(last))
    assert rt.store.load(REF).status == "done"
    gh_graph = json.loads(gh.file(REPO, "specs/1/work-graph.json", "the-loop/1-x"))
    assert [n["wave"] for n in gh_graph["nodes"] if n["kind"] == "wave-join"] == [1, 2, 3]


def test_an_invalid_plan_fails_closed_with_every_finding():
    gh, config, item, rt, work = build()
    gh.add_file(REPO, "specs/1/tasks.md", TASKS
                .replace("D, depends_on: [a]", "D, depends_on: [a, e]")
                .replace("{id: f, title: F", "{id: f, title: F, depends_on: [zz]"))
    r = rt.enrol(item, config, None)
    assert r.status == "escalated" and not work.orders
    texts = [m.text for m in r.messages]
    assert any("cycle" in t for t in texts) and any("'zz'" in t for t in texts)
