"""The task plan (graph/tasks.py): every finding kind in one result, the caps, cycles
named, and deterministic waves (property tests over random DAGs with hypothesis)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph import tasks as T


def md(body: str) -> str:
    return f"# tasks.md\n\n## Tasks\n\n```yaml\n{body}```\n"


def codes(findings):
    return [f.code for f in findings]


def test_the_seed_plan_has_two_waves_and_the_ready_set():
    plan = T.load(md("tasks:\n"
                     "  - {id: C, title: C, depends_on: [A, B], acceptance: [test C],"
                     " tier: frontier}\n"
                     "  - {id: A, title: A, acceptance: [test A], tier: economy}\n"
                     "  - {id: B, title: B, acceptance: [test B]}\n"))
    assert plan.waves == (("A", "B"), ("C",))
    assert plan.ready() == ("A", "B")
    assert plan.ready({"A": "passed", "B": "running"}) == ()
    assert plan.ready({"A": "passed", "B": "passed"}) == ("C",)
    assert plan.ready({"A": "passed", "B": "failed"}) == ()  # a failed blocker never unlocks
    assert plan.downstream(["B"]) == ("C",)


def test_front_matter_holds_a_task_list_too():
    plan = T.load("---\ntasks:\n  - {id: a, title: A, acceptance: [ok]}\n---\n# Tasks\n")
    assert plan.waves == (("a",),)


def test_every_finding_kind_is_reported_in_one_result():
    _, findings = T.check(md(
        "tasks:\n"
        "  - {id: a, title: A, depends_on: [b], acceptance: [x]}\n"
        "  - {id: b, title: B, depends_on: [a], acceptance: [x]}\n"
        "  - {id: c, title: C, depends_on: [c, ghost], acceptance: [x]}\n"
        "  - {id: d, title: D, acceptance: [x]}\n"
        "  - {id: d, title: D again, acceptance: [x]}\n"
        "  - {id: 'bad id', title: E, acceptance: [x]}\n"
        "  - {id: f, title: F, acceptance: [], colour: red}\n"))
    assert sorted(set(codes(findings))) == sorted({
        "cycle", "self-dependency", "missing-dependency", "duplicate-id", "task-invalid"})
    cycle = next(f for f in findings if f.code == "cycle")
    assert cycle.tasks == ("a", "b") and "a -> b -> a" in cycle.message
    assert any("ghost" in f.message for f in findings if f.code == "missing-dependency")
    assert any("'colour'" in f.message for f in findings)


def test_each_cycle_is_one_finding_naming_its_members():
    _, findings = T.check(md(
        "tasks:\n"
        "  - {id: a, title: A, depends_on: [c], acceptance: [x]}\n"
        "  - {id: b, title: B, depends_on: [a], acceptance: [x]}\n"
        "  - {id: c, title: C, depends_on: [b], acceptance: [x]}\n"
        "  - {id: x, title: X, depends_on: [y], acceptance: [x]}\n"
        "  - {id: y, title: Y, depends_on: [x], acceptance: [x]}\n"
        "  - {id: z, title: Z, depends_on: [a], acceptance: [x]}\n"))
    cycles = [f for f in findings if f.code == "cycle"]
    assert [c.tasks for c in cycles] == [("a", "b", "c"), ("x", "y")]
    assert "a -> c -> b -> a" in cycles[0].message


def test_a_missing_or_broken_list_fails_closed():
    assert codes(T.check("# Tasks\n\n- do it\n")[1]) == ["task-list-missing"]
    assert codes(T.check(md("tasks: [unclosed\n"))[1]) == ["task-list-invalid"]
    assert codes(T.check(md("tasks: 3\n"))[1]) == ["task-list-invalid"]
    assert codes(T.check(md("tasks: []\n"))[1]) == ["task-list-invalid"]
    with pytest.raises(T.TaskPlanError) as err:
        T.load(md("tasks: [{id: a}]\n"))
    assert codes(err.value.findings) == ["task-invalid", "task-invalid"]  # title, acceptance


def _tasks(n: int, deps) -> list[T.Task]:
    return [T.Task(f"t{i:04d}", f"task {i}", tuple(sorted(deps(i))), ("ok",))
            for i in range(n)]


def test_the_caps_are_1000_tasks_and_10000_edges():
    rng = random.Random(7)
    at_cap = _tasks(1000, lambda i: {f"t{j:04d}" for j in rng.sample(range(i), min(i, 10))})
    plan = T.build(at_cap)
    assert len(plan.tasks) == 1000 and plan.edges == 9945
    over = _tasks(1001, lambda i: set())
    assert codes(T.graph_findings(over)) == ["too-many-tasks"]
    dense = _tasks(200, lambda i: {f"t{j:04d}" for j in range(i)})  # 19,900 edges
    assert codes(T.graph_findings(dense)) == ["too-many-edges"]


@st.composite
def dags(draw):
    """A random DAG: task i may depend only on tasks listed before it in a hidden
    order, under random ids, listed in a random order."""
    n = draw(st.integers(min_value=1, max_value=40))
    ids = draw(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True),
                        min_size=n, max_size=n, unique=True))
    deps = [draw(st.sets(st.sampled_from(ids[:i]), max_size=4)) if i else set()
            for i in range(n)]
    order = draw(st.permutations(list(range(n))))
    return [{"id": ids[i], "title": f"task {i}", "depends_on": sorted(deps[i]),
             "acceptance": ["done"]} for i in order]


def _plan(raw) -> T.Plan:
    tasks, findings = T.parse(raw)
    assert not findings
    return T.build(tasks)


def _render(raw) -> str:
    return md("tasks:\n" + "".join(f"  - {json.dumps(t)}\n" for t in raw))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.randoms())
def test_waves_are_a_deterministic_topological_layering(raw, rnd):
    plan = T.load(_render(raw))
    shuffled = list(raw)
    rnd.shuffle(shuffled)
    again = _plan([{**t, "depends_on": list(reversed(t["depends_on"]))} for t in shuffled])
    assert again.to_json() == plan.to_json()  # same plan, same bytes, any listing order
    assert again.to_mermaid() == plan.to_mermaid()
    assert again.digest == plan.digest
    placed = [t for wave in plan.waves for t in wave]
    assert sorted(placed) == sorted(t["id"] for t in raw)  # every task exactly once
    for n, wave in enumerate(plan.waves, 1):
        assert list(wave) == sorted(wave)
        for t in wave:
            deps = plan.tasks[t].depends_on
            assert all(plan.wave_of[d] < n for d in deps)  # dependencies come first
            assert n == 1 or max(plan.wave_of[d] for d in deps) == n - 1  # as early as can be
    assert plan.ready() == plan.waves[0]


@settings(max_examples=40, deadline=None)
@given(dags(), st.data())
def test_a_failed_task_never_unlocks_its_dependents(raw, data):
    plan = _plan(raw)
    failed = data.draw(st.sampled_from(sorted(plan.tasks)))
    status = {t: T.PASSED for t in plan.tasks if t not in plan.downstream([failed])}
    status[failed] = T.FAILED
    for t in plan.downstream([failed]):
        assert t not in plan.ready(status)
        status[t] = T.PENDING
    assert not set(plan.ready(status)) & set(plan.downstream([failed]))


@settings(max_examples=40, deadline=None)
@given(dags(), st.data())
def test_a_back_edge_is_always_a_named_cycle(raw, data):
    plan = _plan(raw)
    deep = [t for t in plan.tasks if plan.tasks[t].depends_on]
    if not deep:
        return
    t = data.draw(st.sampled_from(sorted(deep)))
    d = data.draw(st.sampled_from(plan.tasks[t].depends_on))
    broken = [{**x, "depends_on": [*x["depends_on"], t]} if x["id"] == d else x for x in raw]
    findings = T.graph_findings(T.parse(broken)[0])
    cycles = [f for f in findings if f.code == "cycle"]
    assert len(cycles) == 1 and {t, d} <= set(cycles[0].tasks)


def test_the_work_graph_is_metadata_only_and_canonical():
    plan = T.load(md("tasks:\n"
                     "  - {id: a, title: Secret plan, acceptance: [the hidden criterion]}\n"
                     "  - {id: b, title: B, depends_on: [a], acceptance: [ok]}\n"))
    doc = T.work_graph(ref="github:o/r#1", graph_digest="g" * 64, node="implementation",
                       visit=1, plan=plan, status={"a": "passed"}, heads={"a": "f" * 40},
                       joins=[{"wave": 1, "passed": ["a"], "failed": [], "blocked": [],
                               "at": 10.0}])
    text = T.dumps(doc)
    assert "Secret plan" not in text and "hidden criterion" not in text
    assert doc["dataClassification"] == "metadata_only"
    assert doc["schema"] == "the-loop.work-graph/v1" and doc["planDigest"] == plan.digest
    assert {"from": "task/a", "to": "task/b", "relation": "depends_on"} in doc["edges"]
    assert {"from": "task/a", "to": "join/1", "relation": "joined_by"} in doc["edges"]
    assert [n["status"] for n in doc["nodes"] if n["kind"] == "task"] == ["passed", "pending"]
    assert text == T.dumps(json.loads(text))
