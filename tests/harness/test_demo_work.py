"""The demo agent's work (the_loop/sandbox/agent_work.py, shared with the test fakes):
what it writes passes the shipped graph's checks after one repair, its task plan is a
valid plan of dependent tasks, and its task code carries one defect that a real pytest
run catches and a ``verify-tests`` block's repair removes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from graph import tasks as task_plans
from the_loop.sandbox.agent_work import DEFECTIVE, do_work

TASKS_PROMPT = "Artifacts to write:\n- `specs/1/tasks.md` with sections: `## Tasks`\n"
TASKS_BLOCK = ("The-loop's checks blocked your last turn:\n- validate-artifacts: "
               "specs/1/tasks.md has no 'Tasks' section\n")
CI_BLOCK = ("The-loop's checks blocked your last turn:\n- verify-tests: check tests "
            "concluded failure on 0123456789ab; fix it and push\n")


def task_prompt(task: str) -> str:
    return f"Your task is `{task}` of the task list (wave 1): a task\n"


def pytest_in(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                          cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_the_task_plan_is_left_out_first_and_written_as_a_valid_plan_on_repair(tmp_path):
    state = do_work(TASKS_PROMPT, None, tmp_path)
    first = (tmp_path / "specs/1/tasks.md").read_text()
    assert "## Tasks" not in first
    plan, findings = task_plans.check(first)
    assert plan is None and findings

    do_work(TASKS_PROMPT + TASKS_BLOCK, state, tmp_path)
    plan, findings = task_plans.check((tmp_path / "specs/1/tasks.md").read_text())
    assert findings == [] and plan is not None
    assert len(plan.waves) == 2 and len(plan.waves[0]) == 2
    assert set(plan.tasks["banner"].depends_on) == {"greet", "shout"}


def test_the_first_turn_of_the_defective_task_fails_its_test_and_the_ci_repair_fixes_it(
        tmp_path):
    states = {t: do_work(task_prompt(t), None, tmp_path, task=t)
              for t in ("greet", "shout", "banner")}
    assert (tmp_path / "tasks/greet.md").is_file()  # the task's note, as before
    failed = pytest_in(tmp_path)
    assert failed.returncode == 1, failed.stdout
    assert "test_demo_greet.py" in failed.stdout and "Helo" in failed.stdout

    # A resumed turn without a CI block keeps the defect; the CI block's repair fixes it.
    do_work(task_prompt(DEFECTIVE) + TASKS_BLOCK, states[DEFECTIVE], tmp_path, task=DEFECTIVE)
    assert pytest_in(tmp_path).returncode == 1
    do_work(task_prompt(DEFECTIVE) + CI_BLOCK, states[DEFECTIVE], tmp_path, task=DEFECTIVE)
    passed = pytest_in(tmp_path)
    assert passed.returncode == 0, passed.stdout
    assert "3 passed" in passed.stdout


def test_other_tasks_write_code_and_a_passing_test_from_the_first_turn(tmp_path):
    do_work(task_prompt("add-docs"), None, tmp_path, task="add-docs")
    assert (tmp_path / "demo_add_docs.py").is_file()
    done = pytest_in(tmp_path)
    assert done.returncode == 0, done.stdout


def test_the_demo_agent_writes_the_task_its_turn_names(tmp_path):
    # As the runner starts it (the command adapter): the task's id in THE_LOOP_TASK.
    agent = Path(sys.executable).with_name("the-loop-demo-agent")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"),
           "THE_LOOP_SESSION_ID": "s1", "THE_LOOP_NODE": "implementation",
           "THE_LOOP_TASK": "shout", "THE_LOOP_RESULT_FILE": str(tmp_path / "result.json")}
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([str(agent)], input=task_prompt("shout"), cwd=work, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file()) == [
        "demo_shout.py", "tasks/shout.md", "tests/test_demo_shout.py"]
    assert pytest_in(work).returncode == 0


def test_the_plans_repair_after_its_waves_fixes_the_defect_on_the_merged_branch(tmp_path):
    # The waves merged every task's work into one checkout; the CI failed there and the
    # node's own session (no task) is given the check's block.
    for t in ("greet", "shout", "banner"):
        do_work(task_prompt(t), None, tmp_path, task=t)
    assert pytest_in(tmp_path).returncode == 1
    state = do_work("Your work: the implementation.\n" + CI_BLOCK, None, tmp_path)
    passed = pytest_in(tmp_path)
    assert passed.returncode == 0, passed.stdout
    assert "3 passed" in passed.stdout
    assert not (tmp_path / "IMPLEMENTED.md").exists() and state["fixed"]
    # Without the CI's block, a first turn with no artifact writes IMPLEMENTED.md as before.
    other = tmp_path / "other"
    other.mkdir()
    do_work("Your work: the implementation.\n", None, other)
    assert (other / "IMPLEMENTED.md").is_file()
