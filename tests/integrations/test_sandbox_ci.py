"""The sandbox's CI (the_loop/sandbox/ci.py): ``.the-loop/ci.yaml`` read and checked,
pytest's output read into failures, and, with the real sandbox and a real ``git push``,
each push of a branch checked in a throwaway checkout and reported as GitHub Actions
reports a job: a check suite and a check run going queued -> in_progress -> completed,
signed ``check_run`` / ``check_suite`` deliveries whose objects are those GitHub's
webhook schema describes, and the same run through the REST API."""

from __future__ import annotations

import base64
import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import requests
from jsonschema import Draft7Validator

from foundation.config.loader import InvalidConfigError
from foundation.events import GitHubEvent
from foundation.webhook_schema import SCHEMA_PATH
from tests.integrations.test_sandbox_deliveries import SECRET, pushes, receiver
from the_loop.sandbox.agent_work import task_code
from the_loop.sandbox.ci import (
    CIConfig,
    SandboxCI,
    log_tail,
    parse_ci_config,
    pytest_failures,
    pytest_result,
)
from the_loop.sandbox.fakegithub.http import serve
from the_loop.sandbox.github import SandboxGitHub
from the_loop.sandbox.server import CI_YAML, README, REPOSITORY_TEST

REPO = "sandbox/demo"
SECRET_VALUE = "s3cr3t-not-for-ci"

# -- ci.yaml -----------------------------------------------------------------------------


def test_the_demo_repository_declares_the_check_verify_tests_reads():
    assert parse_ci_config(CI_YAML) == CIConfig("tests", "python -m pytest -q", 300)


def test_timeout_defaults_to_300_seconds():
    assert parse_ci_config("name: lint\nrun: ruff check .\n").timeout == 300


@pytest.mark.parametrize(("text", "says"), [
    ("run: pytest\n", "ci.yaml:1: name: is required"),
    ("name: tests\n", "run: is required"),
    ("name: tests\nrun: pytest\ntimeout: soon\n", "ci.yaml:3: timeout: must be a whole number"),
    ("name: tests\nrun: pytest\ntimeout: 0\n", "timeout: must be between 1 and 21600"),
    ("name: tests\nrun: pytest\nsteps: []\n", "steps: unknown key"),
    ("name: tests\nrun: ''\n", "run: must not be empty"),
    ("- name: tests\n", "must be a mapping"),
    ("name: [tests\n", "not valid YAML"),
])
def test_a_malformed_ci_yaml_is_refused_naming_the_key_and_line(text, says):
    with pytest.raises(InvalidConfigError) as caught:
        parse_ci_config(text)
    assert says in str(caught.value)


# -- pytest's output -----------------------------------------------------------------------

PYTEST_LOG = """\
FFF.                                                                     [100%]
=================================== FAILURES ===================================
__________________________________ test_greet __________________________________

    def test_greet():
>       assert greet("Ada") == "Hello, Ada!"
E       AssertionError: assert 'Helo, Ada!' == 'Hello, Ada!'

tests/test_demo_greet.py:5: AssertionError
__________________________________ test_boom ___________________________________

    def test_boom():
>       boom()

tests/test_demo_greet.py:9:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

    def boom():
>       raise ValueError("no")
E       ValueError: no

demo_greet.py:5: ValueError
_____________________________ TestX.test_in_class ______________________________

    def test_in_class(self):
>       helper()

helpers.py:3: in helper
    check()
/usr/lib/python3.11/unittest/case.py:10: AssertionError
=========================== short test summary info ============================
FAILED tests/test_demo_greet.py::test_greet - AssertionError: assert 'Helo, Ada!' == 'Hello, Ada!'

  - Hello, Ada!
FAILED tests/test_demo_greet.py::test_boom - ValueError: no
FAILED tests/test_demo_greet.py::TestX::test_in_class - assert 1 == 2
3 failed, 1 passed in 0.74s
"""

COLLECTION_LOG = """\
==================================== ERRORS ====================================
____________________ ERROR collecting tests/test_broken.py _____________________
ImportError while importing test module '/tmp/x/tests/test_broken.py'.
Traceback:
/usr/lib/python3.11/importlib/__init__.py:126: in import_module
    return _bootstrap._gcd_import(name[level:], package, level)
tests/test_broken.py:1: in <module>
    import nothere
E   ModuleNotFoundError: No module named 'nothere'
=========================== short test summary info ============================
ERROR tests/test_broken.py
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!
1 error in 1.83s
"""


def test_each_failing_test_is_found_at_its_line_in_its_own_file():
    found = [(f.path, f.line, f.test, f.message) for f in pytest_failures(PYTEST_LOG)]
    assert found == [
        ("tests/test_demo_greet.py", 5, "tests/test_demo_greet.py::test_greet",
         "AssertionError: assert 'Helo, Ada!' == 'Hello, Ada!'"),
        # raised in demo_greet.py, but the test's own file has a line: that one
        ("tests/test_demo_greet.py", 9, "tests/test_demo_greet.py::test_boom",
         "ValueError: no"),
        # no line in the test's file: the last one of its traceback in the checkout
        ("helpers.py", 3, "tests/test_demo_greet.py::TestX::test_in_class",
         "assert 1 == 2"),
    ]
    assert pytest_result(PYTEST_LOG) == "3 failed, 1 passed"


def test_a_collection_error_is_a_failure_with_its_error_line():
    [failure] = pytest_failures(COLLECTION_LOG)
    assert (failure.path, failure.line, failure.message) == (
        "tests/test_broken.py", 1, "ModuleNotFoundError: No module named 'nothere'")
    assert failure.annotation() == {
        "path": "tests/test_broken.py", "start_line": 1, "end_line": 1,
        "annotation_level": "failure", "title": "tests/test_broken.py",
        "message": "ModuleNotFoundError: No module named 'nothere'"}
    assert pytest_result(COLLECTION_LOG) == "1 error"


def test_output_without_pytest_has_no_failures_and_no_result():
    assert pytest_failures("make: *** [all] Error 2\n") == []
    assert pytest_result("make: *** [all] Error 2\n") is None


def test_the_log_tail_fits_githubs_output_limit_and_keeps_the_end():
    log = "".join(f"line {n}\n" for n in range(20000))
    tail = log_tail(log)
    assert len(tail) <= 65535
    assert tail.startswith("```\n[... ") and tail.endswith("line 19999\n```")
    assert log_tail("ok\n") == "```\nok\n```"


# -- the real sandbox ---------------------------------------------------------------------


@cache
def _webhook_definitions() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["definitions"]


def schema_problems(event: str, action: str, obj: dict[str, Any]) -> list[str]:
    """What GitHub's webhook schema (the receiver's, foundation/webhook_schema) finds
    wrong with a delivery's ``check_run`` / ``check_suite`` object (the sandbox's
    ``repository`` and ``sender`` are shorter than github.com's: not checked here)."""
    ref = {"$ref": f"#/definitions/{event}${action}/properties/{event}",
           "definitions": _webhook_definitions()}
    return [f"{'/'.join(map(str, e.path))}: {e.message[:100]}"
            for e in Draft7Validator(ref).iter_errors(obj)]


class Box:
    """A sandbox with its CI, a receiver, and a checkout to push from."""

    def __init__(self, tmp: Path, files: dict[str, str]) -> None:
        self.hook, self.got, self.server = receiver()
        self.fake = SandboxGitHub(webhook_url=self.hook, secret=SECRET, user_login="you")
        self.fake.add_git_repo(REPO, tmp / "git", files)
        self.url, self._stop = serve(self.fake)
        self.fake.start_delivering()
        (tmp / "ci").mkdir()
        self.ci = SandboxCI(self.fake, tmp / "ci")
        self.ci.start()
        self.checkout = tmp / "checkout"
        token = self.fake.issue_token(1)
        auth = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        self.h = {"Authorization": f"token {token}"}
        self.git = ["git", "-c", f"http.extraHeader=Authorization: Basic {auth}",
                    "-c", "user.name=bot", "-c", "user.email=bot@example.com",
                    "-C", str(self.checkout)]
        subprocess.run([*self.git[:-2], "clone", "-q", f"{self.url}/{REPO}.git",
                        str(self.checkout)], check=True, capture_output=True, timeout=60)
        subprocess.run([*self.git, "checkout", "-qb", "the-loop/1-greet"], check=True)

    def push(self, files: dict[str, str], message: str = "work") -> str:
        """Commit ``files`` and push the branch; returns the new head."""
        for rel, text in files.items():
            target = self.checkout / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        subprocess.run([*self.git, "add", "-A"], check=True)
        subprocess.run([*self.git, "commit", "-qm", message], check=True)
        subprocess.run([*self.git, "push", "-q", "origin", "HEAD"], check=True,
                       capture_output=True, timeout=60)
        return subprocess.run([*self.git, "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()

    def checks(self, sha: str) -> list[tuple[str, str, dict[str, Any]]]:
        """``(event, action, payload)`` of the check deliveries about ``sha``, in order."""
        assert self.fake.wait_delivered(10)
        found = []
        for headers, payload in list(self.got):
            event = headers["X-Github-Event"]
            obj = payload.get(event) or {}
            if event in ("check_run", "check_suite") and obj.get("head_sha") == sha:
                found.append((event, payload["action"], payload))
        return found

    def close(self) -> None:
        self.ci.stop()
        self.fake.stop_delivering()
        self._stop()
        self.server.shutdown()


@pytest.fixture
def box(tmp_path, monkeypatch):
    # what the sandbox's own environment holds: none of it may reach a CI script
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", SECRET_VALUE)
    monkeypatch.setenv("GH_TOKEN", SECRET_VALUE)
    made = Box(tmp_path, {"README.md": README, ".the-loop/ci.yaml": CI_YAML,
                          "tests/test_repository.py": REPOSITORY_TEST})
    try:
        yield made
    finally:
        made.close()


def test_a_push_is_checked_and_reported_as_github_actions_reports_a_job(box):
    first = box.push({"notes.md": "x\n"}, "start")
    assert box.ci.wait_run(first).conclusion == "success"  # the repository's own test
    number = requests.post(f"{box.url}/repos/{REPO}/pulls", headers=box.h, timeout=10, json={
        "title": "Greet", "head": "the-loop/1-greet", "base": "main",
        "draft": True}).json()["number"]

    # the demo agent's first turn of task greet: its deliberate defect
    defective = box.push(task_code("greet", defective=True), "greet")
    run = box.ci.wait_run(defective)
    assert (run.statuses, run.conclusion) == (["queued", "in_progress", "completed"],
                                              "failure")
    checks = box.checks(defective)
    assert [(e, a) for e, a, _ in checks] == [
        ("check_run", "created"), ("check_run", "completed"), ("check_suite", "completed")]
    created, completed, suite = (p for _, _, p in checks)
    assert created["check_run"]["status"] == "queued"
    assert created["check_run"]["conclusion"] is None
    cr = completed["check_run"]
    assert (cr["name"], cr["status"], cr["conclusion"]) == ("tests", "completed", "failure")
    assert cr["app"]["slug"] == "github-actions"
    assert cr["output"]["title"] == "1 failed, 1 passed"
    assert "tests/test_demo_greet.py::test_greet" in cr["output"]["summary"]
    assert "Helo, Ada!" in cr["output"]["text"] and len(cr["output"]["text"]) <= 65535
    assert cr["output"]["annotations_count"] == 1
    assert [p["number"] for p in cr["pull_requests"]] == [number]
    assert cr["check_suite"]["id"] == suite["check_suite"]["id"]
    assert (suite["check_suite"]["conclusion"], suite["check_suite"]["head_branch"]) == (
        "failure", "the-loop/1-greet")
    for event, action, payload in checks:
        assert schema_problems(event, action, payload[event]) == [], (event, action)
        assert payload["sender"]["login"] == "the-loop[bot]"  # the pusher
    # the worker's reading of it: check `tests` failed on that commit, for the PR
    event = GitHubEvent.parse("check_run", completed)
    assert (event.ci.name, event.ci.sha, event.ci.conclusion) == ("tests", defective,
                                                                  "failure")
    assert str(event.ref) == f"github:{REPO}#{number}"
    # stored in GitHub's annotation shape (what "List check run annotations" answers)
    [stored] = [c for c in box.fake.check_runs(REPO) if c["id"] == run.check_run_id]
    [note] = stored["annotations"]
    assert {k: note[k] for k in ("path", "start_line", "end_line", "annotation_level")} == {
        "path": "tests/test_demo_greet.py", "start_line": 5, "end_line": 5,
        "annotation_level": "failure"}
    assert note["message"].startswith("AssertionError: assert 'Helo, Ada!'")
    # the REST API answers the same run and suite, by branch and by sha
    listed = requests.get(f"{box.url}/repos/{REPO}/commits/the-loop/1-greet/check-runs",
                          timeout=10).json()
    assert [(c["id"], c["conclusion"]) for c in listed["check_runs"]] == [
        (run.check_run_id, "failure")]
    one = requests.get(f"{box.url}/repos/{REPO}/check-runs/{run.check_run_id}",
                       timeout=10).json()
    assert one["output"]["text"] == cr["output"]["text"]
    suites = requests.get(f"{box.url}/repos/{REPO}/commits/{defective}/check-suites",
                          timeout=10).json()
    assert [(s["app"]["slug"], s["conclusion"], s["latest_check_runs_count"])
            for s in suites["check_suites"]] == [("github-actions", "failure", 1)]

    # the repair turn fixes it
    fixed = box.push(task_code("greet", defective=False), "fix greet")
    run = box.ci.wait_run(fixed)
    assert run.conclusion == "success"
    [(_, _, done)] = [c for c in box.checks(fixed) if c[1] == "completed"
                      and c[0] == "check_run"]
    assert done["check_run"]["output"]["title"] == "2 passed"
    assert done["check_run"]["output"]["annotations_count"] == 0


def test_a_hanging_check_times_out_and_its_processes_are_killed(box):
    marker = box.checkout.parent / "survived"
    sha = box.push({".the-loop/ci.yaml": "name: tests\ntimeout: 1\nrun: |\n"
                    f"  (sleep 30; touch {marker}) &\n  sleep 600\n"}, "hang")
    run = box.ci.wait_run(sha)
    assert run.conclusion == "timed_out"
    [(_, _, done)] = [c for c in box.checks(sha) if c[:2] == ("check_run", "completed")]
    assert done["check_run"]["output"]["title"] == "timed out after 1 s"
    # the background child was in the killed process group
    ps = subprocess.run(["pgrep", "-f", f"touch {marker}"], capture_output=True)
    assert ps.returncode == 1 and not marker.exists()


def test_the_check_sees_no_secret_of_the_sandbox(box):
    sha = box.push({".the-loop/ci.yaml": "name: env\nrun: env | sort\n"}, "env")
    run = box.ci.wait_run(sha)
    assert run.conclusion == "success"
    [stored] = [c for c in box.fake.check_runs(REPO) if c["id"] == run.check_run_id]
    log = stored["output"]["text"]
    names = {line.partition("=")[0] for line in log.splitlines()[1:-1]}
    assert names <= {"PATH", "HOME", "TMPDIR", "LANG", "CI", "PWD", "SHLVL", "_", "OLDPWD"}
    assert SECRET_VALUE not in log and "THE_LOOP" not in log and "GH_TOKEN" not in log
    assert "CI=true" in log


def test_an_invalid_ci_yaml_fails_its_check_with_the_reason(box):
    sha = box.push({".the-loop/ci.yaml": "name: tests\nrun: pytest\ntimeout: soon\n"}, "bad")
    run = box.ci.wait_run(sha)
    assert (run.statuses, run.conclusion) == (["queued", "completed"], "failure")
    [stored] = [c for c in box.fake.check_runs(REPO) if c["id"] == run.check_run_id]
    assert stored["name"] == "tests"
    assert "timeout: must be a whole number" in stored["output"]["summary"]


def test_no_ci_yaml_no_check_and_the_default_branch_is_not_checked(box):
    sha = box.push({".the-loop/ci.yaml": ""}, "no ci")
    subprocess.run([*box.git, "rm", "-q", ".the-loop/ci.yaml"], check=True)
    gone = box.push({}, "remove ci")
    assert box.ci.wait_run(gone).check_run_id is None
    assert box.ci.wait_run(sha).check_run_id is not None  # an empty file is invalid
    subprocess.run([*box.git, "push", "-q", "origin", "HEAD:main"], check=True,
                   capture_output=True, timeout=60)
    pushes(box.fake, 3)
    assert [r.branch for r in box.ci.runs] == ["the-loop/1-greet"] * 2


def test_the_sandbox_check_reaches_verify_tests_through_a_real_worker(box, redis_ns):
    """The check run the sandbox's CI delivers is what ``verify-tests`` (``check:
    tests``, graph/pdlc.yaml's implementation) reads: through the worker on the real
    Redis, a failed run blocks the work item, the fixed one lets it pass to review."""
    from rq import Queue

    from foundation.inbox.enqueue import DeliveryQueue
    from foundation.settings import WorkerSettings
    from foundation.webhook_schema import PayloadSchemas
    from graph.context import HookConfig
    from graph.refs import WorkItemRef
    from the_loop.graphs import load_graph
    from the_loop.wiring import build_processor
    from webhook.events import parse_delivery
    from workers.state import RedisStateStore
    from workers.worker import LoopWorker

    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    # make run's worker talks to the sandbox's URL, not api.github.com: payloads are not
    # checked against github.com's schemas (the_loop/wiring.py payload_schemas)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: box.fake,
                                schemas=PayloadSchemas(enterprise=True))
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)

    def deliver(event: str, payload: dict[str, Any]) -> None:
        parsed = parse_delivery({"X-GitHub-Event": event, "X-GitHub-Delivery":
                                 redis_ns.new_id(), "Content-Type": "application/json"},
                                json.dumps(payload).encode())
        assert queue.enqueue(parsed)
        LoopWorker([Queue(redis_ns.queue_name, connection=redis_ns.client)],
                   connection=redis_ns.client, name=f"w-{redis_ns.new_id()}",
                   processor=processor).work(burst=True, with_scheduler=False)

    box.ci.wait_run(box.push({"notes.md": "x\n"}, "start"))
    with box.fake.acting_as("you"):
        number = box.fake.create_pull_request(REPO, "the-loop/1-greet", "main", "Greet",
                                              "", draft=True)["number"]
        box.fake.add_label(REPO, number, "the-loop")
    assert box.fake.wait_delivered(10)
    [labeled] = [p for h, p in box.got if h["X-Github-Event"] == "pull_request"
                 and p["action"] == "labeled"]
    deliver("pull_request", labeled)
    ref = f"github:{REPO}#{number}"
    item = GitHubEvent.parse("pull_request", labeled).work_item(WorkItemRef.parse(ref))
    processor.agent.runtime.force(item, HookConfig(), "implementation",
                                  "test: the task wave is done")

    def completed(sha: str) -> dict[str, Any]:
        box.ci.wait_run(sha)
        [(_, _, payload)] = [c for c in box.checks(sha) if c[:2] == ("check_run",
                                                                     "completed")]
        return payload

    deliver("check_run", completed(box.push(task_code("greet", defective=True), "greet")))
    state = store.load(ref)
    assert state.current_node == "implementation"
    assert "check tests concluded failure" in json.dumps(state.to_dict())
    deliver("check_run", completed(box.push(task_code("greet", defective=False), "fix")))
    assert store.load(ref).current_node == "review"


def test_a_newer_push_of_the_branch_cancels_the_older_run(box):
    hanging = box.push({".the-loop/ci.yaml": "name: tests\nrun: sleep 600\n"}, "hang")
    newer = box.push({".the-loop/ci.yaml": "name: tests\nrun: 'true'\n"}, "quick")
    assert box.ci.wait_run(newer).conclusion == "success"
    old = box.ci.wait_run(hanging)
    assert old.conclusion == "cancelled" and old.statuses[-1] == "completed"
    [(_, _, done)] = [c for c in box.checks(hanging) if c[:2] == ("check_run", "completed")]
    assert done["check_run"]["conclusion"] == "cancelled"
