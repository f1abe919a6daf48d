"""End to end, a task plan run in waves: gunicorn, an RQ worker and ``the-loop runner``
(two processes) as real processes, the real Redis, the loopback fake GitHub backed by a
bare git repository, and the fake command harness.

The work item enters a one-node graph whose ``implementation`` node runs
``specs/1/tasks.md`` (on the default branch) with ``maxParallel: 2``: each task's turn
runs in its own checkout on ``the-loop/1-<slug>--<task>``, merged into the work item's
branch when it completes.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.e2e.test_agent_loop import (
    BIN,
    HARNESSES,
    REF,
    REPO,
    branch_of,
    build_stack,
    item_home,
    turns,
    untrusted_enrol,
)
from tests.e2e.test_end_to_end import post, wait_until
from tests.support.processes import start, stop

pytestmark = pytest.mark.e2e

GRAPH = """version: 1
name: waves
start: implementation
nodes:
  - id: implementation
    actor: agent
    command: implement
    plan: tasks.md
    maxParallel: 2
    entry: [log-entry]
    exit: [log-entry]
  - id: done
    actor: system
edges:
  - {from: implementation, to: done, on: pass}
"""


def tasks_md(*lines: str) -> str:
    return "# Tasks\n\n## Tasks\n\n```yaml\ntasks:\n" + "".join(
        f"  - {line}\n" for line in lines) + "```\n"


def stack_for(redis_ns, tmp_path, tasks: str, *, max_turns: int):
    graph = tmp_path / "waves.yaml"
    graph.write_text(GRAPH)
    harness = {**HARNESSES["command"], "maxTurns": max_turns}
    return build_stack(redis_ns, tmp_path, harness, runner={"concurrency": 2},
                       files={"specs/1/tasks.md": tasks},
                       env={"THE_LOOP_GRAPH": str(graph)})


def task_calls(loop, task: str) -> list[dict]:
    return [c for c in turns(loop.home) if c["env"].get("THE_LOOP_TASK") == task]


def knobs(loop, value: dict) -> None:
    path = item_home(loop.home) / ".fake-harness" / "knobs.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def shutdown(loop, stop_fake):
    for proc in loop.procs.values():
        stop(proc)
    stop_fake()
    if os.environ.get("THE_LOOP_E2E_SHOW_LOGS"):
        print(loop.logs_text())


def test_a_failing_task_keeps_its_dependents_pending(redis_ns, tmp_path):
    loop, stop_fake = stack_for(redis_ns, tmp_path, tasks_md(
        "{id: a, title: A, acceptance: [a works]}",
        "{id: b, title: B, acceptance: [b works]}",
        "{id: c, title: C, depends_on: [b], acceptance: [c works]}",
    ), max_turns=1)
    try:
        knobs(loop, {"fail_tasks": ["b"]})
        post(loop.url, "issues", untrusted_enrol())
        try:
            wait_until(lambda: (s := loop.state()) and s.status == "escalated", timeout=60,
                       what="the failed wave escalated")
        except AssertionError:
            print(loop.logs_text())
            raise
        state = loop.state()
        assert state.plan["joins"] == [{"wave": 1, "passed": ["a"], "failed": ["b"],
                                        "blocked": ["c"], "at": state.plan["joins"][0]["at"]}]
        assert task_calls(loop, "c") == []  # never started: its wave stays pending
        assert len(task_calls(loop, "a")) == len(task_calls(loop, "b")) == 1
        branch = branch_of(loop)
        assert loop.fake.file(REPO, "tasks/a.md", branch) is not None  # merged back
        assert loop.fake.file(REPO, "tasks/b.md", branch) is None
        assert loop.fake.file(REPO, "tasks/a.md", f"{branch}--a") is not None  # own branch
        doc = json.loads(loop.fake.file(REPO, "specs/1/work-graph.json", branch))
        assert doc["schema"] == "the-loop.work-graph/v1"
        assert {n["task"]: n["status"] for n in doc["nodes"] if n["kind"] == "task"} == {
            "a": "passed", "b": "failed", "c": "blocked"}
        assert "task b of wave 1 failed" in state.escalated["reason"]
    finally:
        shutdown(loop, stop_fake)


def test_a_killed_runner_resumes_the_wave_without_rerunning_passed_tasks(redis_ns, tmp_path):
    loop, stop_fake = stack_for(redis_ns, tmp_path, tasks_md(
        "{id: a, title: A, acceptance: [a works]}",
        "{id: b, title: B, acceptance: [b works]}",
        "{id: c, title: C, depends_on: [a, b], acceptance: [c works]}",
    ), max_turns=3)
    try:
        knobs(loop, {"sleep_tasks": {"b": 30}})
        post(loop.url, "issues", untrusted_enrol())
        try:
            wait_until(lambda: (s := loop.state()) and s.plan
                       and s.plan["status"]["a"] == "passed" and task_calls(loop, "b"),
                       timeout=60, what="a passed while b runs")
        except AssertionError:
            print(loop.logs_text())
            raise
        runner = loop.procs["runner"]
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(timeout=10)
        knobs(loop, {})
        loop.procs["runner"] = start([str(BIN / "the-loop"), "runner"], loop.env,
                                     loop.logs / "runner-2.out")
        try:
            wait_until(lambda: (s := loop.state()) and s.status == "done", timeout=90,
                       what="the plan done after the restart")
        except AssertionError:
            print(loop.logs_text())
            raise
        assert len(task_calls(loop, "a")) == 1  # passed before the kill: never run again
        b_calls = task_calls(loop, "b")
        assert len(b_calls) == 2  # the killed attempt and exactly one more
        assert b_calls[0]["env"]["THE_LOOP_SESSION_ID"] == b_calls[1]["env"][
            "THE_LOOP_SESSION_ID"]
        assert len(task_calls(loop, "c")) == 1
        events = loop.store.events(REF)
        joined = [e.seq for e in events if e.type == "wave.joined"]
        c_ordered = [e.seq for e in events if e.type == "turn.ordered"
                     and e.data.get("task") == "c"]
        assert len(joined) == 2 and joined[0] < c_ordered[0] < joined[1]
        branch = branch_of(loop)
        for task in "abc":
            assert loop.fake.file(REPO, f"tasks/{task}.md", branch) is not None
        doc = json.loads(loop.fake.file(REPO, "specs/1/work-graph.json", branch))
        assert [n["wave"] for n in doc["nodes"] if n["kind"] == "wave-join"] == [1, 2]
    finally:
        shutdown(loop, stop_fake)
