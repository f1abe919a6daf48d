"""The sandbox walk through the shipped graph (``graph/pdlc.yaml``, unchanged): ``make
run``'s script in sandbox mode (real processes: the sandbox's GitHub, gunicorn, the
worker, the runner with the demo agent; the real Redis and real git), driven through
``the-loop sandbox`` as the README's walk does.

Label an issue ``the-loop`` -> ``requirements`` (the demo agent leaves a section out:
block, repair) -> ``/approve`` -> ``design`` (block, repair; its mermaid diagram passes
``lint-artifacts``) -> ``/approve`` -> ``tasks`` (block, repair: the plan, ``greet`` and
``shout``, and ``banner`` depending on both) -> ``implementation`` as a wave of the two
task sessions, then the dependent one, each writing its module and its pytest test on a
task branch merged into the work item's -> the sandbox's CI (``.the-loop/ci.yaml``) fails
on greet's deliberate defect, ``verify-tests`` blocks, the node's repair turn fixes it,
the CI passes -> the pull request is marked ready and the approver requested -> an
approving pull request review -> the-loop merges it (the demo repository's
``merge: {auto: true}``) -> the issue is closed (``Closes #1``), ``phase:done``, every
branch but main deleted, main holding the tasks' code and tests.

Also: with ``auto: false`` the work item waits at ``done`` until the person merges
(``the-loop sandbox merge``); a pull request closed unmerged ends ``abandoned``.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
import requests

from foundation.config.repository import HARNESS_CONFIG_PATH
from graph.state import Past
from tests.e2e.test_end_to_end import wait_until
from tests.support.sandbox_run import SandboxRun, sandbox_run
from the_loop.sandbox.agent_work import task_code
from workers.state import RedisStateStore

pytestmark = pytest.mark.e2e

USER = "octo-dev"
REF = "github:sandbox/demo#1"
TASKS = ("greet", "shout", "banner")
#: Per step, for a busy 2-CPU machine running the suite with -n 4: each wait ends as
#: soon as its event happens.
STEP = 240


def exit_chains(store: RedisStateStore, node: str) -> list[str]:
    """The statuses of ``node``'s exit chains, in order."""
    return [e.data["status"] for e in store.events(REF) if e.type == "chain.completed"
            and e.data["node"] == node and e.data["boundary"] == "exit"]


def at(store: RedisStateStore, node: str, status: str | None = None) -> bool:
    state = store.load(REF)
    return bool(state and state.current_node == node
                and (status is None or state.status == status))


def file_at(run: SandboxRun, path: str, ref: str) -> str | None:
    """``path``'s text at ``ref`` in the demo repository (REST contents API), or
    ``None``."""
    answer = requests.get(f"{run.url}/repos/sandbox/demo/contents/{path}",
                          params={"ref": ref}, timeout=30)
    if answer.status_code == 404:
        return None
    answer.raise_for_status()
    return base64.b64decode(answer.json()["content"]).decode()


def walk_to_implementation(run: SandboxRun, store: RedisStateStore) -> str:
    """From the label to ``implementation``'s wave done and ``verify-tests`` waiting,
    asserting each step; returns the work item's branch."""
    out = run.sandbox("issue", "create", "Add a login page", "--label", "the-loop")
    assert out.strip() == f"opened {REF} with the-loop"
    wait_until(lambda: at(store, "requirements-approval", "waiting"), STEP,
               "requirements written, blocked, repaired, at the gate")
    assert exit_chains(store, "requirements") == ["block", "pass"]

    run.sandbox("comment", "1", "/approve", "--as", USER)
    wait_until(lambda: at(store, "design-approval", "waiting"), STEP,
               "design written, blocked, repaired, at the gate")
    assert exit_chains(store, "design") == ["block", "pass"]
    # Nothing went back: a push delivered late did not reopen the first gate.
    assert not [e for e in store.events(REF) if e.type == "gate.reopened"]

    run.sandbox("comment", "1", "/approve", "--as", USER)
    wait_until(lambda: at(store, "implementation"), STEP, "the tasks node passed")
    assert exit_chains(store, "tasks") == ["block", "pass"]  # each document: one left out
    assert [d["actor"] for d in Past.read(store, REF).decisions] == [USER, USER]
    assert [d["node"] for d in Past.read(store, REF).decisions] == [
        "requirements-approval", "design-approval"]

    def first_check() -> list:
        return [e for e in store.events(REF) if e.type == "chain.completed"
                and e.data["node"] == "implementation" and e.data["boundary"] == "exit"]

    wait_until(first_check, 2 * STEP, "the wave of tasks done, implementation's exit chain")
    events = store.events(REF)
    ordered = [(e.data["task"], e.data["wave"]) for e in events
               if e.type == "turn.ordered" and e.data.get("task")]
    assert sorted(ordered[:2]) == [("greet", 1), ("shout", 1)]
    assert ordered[2:] == [("banner", 2)]
    kinds = [(e.type, e.data.get("task") or e.data.get("wave")) for e in events
             if e.type in ("turn.ordered", "wave.joined") and e.data.get("node") ==
             "implementation"]
    assert kinds.index(("wave.joined", 1)) < kinds.index(("turn.ordered", "banner"))
    assert [e.data["passed"] for e in events if e.type == "wave.joined"] == [
        sorted(["greet", "shout"]), ["banner"]]
    # verify-tests waits for the check (or has its failure already: the CI was quick).
    waited = first_check()[0]
    assert [h["hook"] for h in waited.data["hooks"]] == ["is-docs-only", "verify-tests"]
    assert waited.data["status"] in ("wait", "block")

    # Each turn's record says how long the agent ran of it; the rest was the-loop's.
    completed = [e.data for e in events if e.type == "turn.completed"]
    assert len(completed) == 9  # 2 + 2 + 2 documents, 3 tasks
    assert all(0 < t["agent_seconds"] <= t["seconds"] for t in completed), completed

    # The draft pull request's deliveries (forwarded to the issue) left it an issue.
    assert store.load(REF).kind == "issue"

    shown = run.show("1")
    branch = next(b for b in shown["branches"] if b.startswith("the-loop/1-"))
    assert [(p["head"], p["state"]) for p in shown["pull_requests"]] == [(branch, "draft")]
    # The wave's last head holds every task's code and test (the first task's with its
    # deliberate defect, until the CI's block has it repaired).
    wave_head = completed[-1]["head_sha"]
    for task in TASKS:
        for rel, text in task_code(task, defective=True).items():
            assert file_at(run, rel, wave_head) == text, rel
        assert file_at(run, f"tasks/{task}.md", wave_head)
    assert file_at(run, "demo_greet.py", "main") is None  # nothing merged yet
    return branch


def check_runs(run: SandboxRun, token: str, sha: str) -> list[dict]:
    """Every ``tests`` check run on commit ``sha`` (REST, as the App reads them)."""
    answer = run.api("GET", f"/repos/sandbox/demo/commits/{sha}/check-runs", token=token,
                     params={"check_name": "tests", "filter": "all"})
    answer.raise_for_status()
    return list(answer.json()["check_runs"])


def walk_to_review(run: SandboxRun, store: RedisStateStore, branch: str) -> None:
    """The sandbox's CI fails once on the deliberate defect, the repair turn fixes it,
    the check passes, ``implementation`` passes: the pull request is ready for review and
    the approver is requested."""
    wait_until(lambda: at(store, "review", "waiting"), 3 * STEP,
               "the CI failing once, the repair, the CI passing, the review gate waiting")
    events = store.events(REF)
    chains = [e.data for e in events if e.type == "chain.completed"
              and e.data["node"] == "implementation" and e.data["boundary"] == "exit"]
    blocked = [c for c in chains if c["status"] == "block"]
    assert [c["hooks"][-1]["hook"] for c in blocked] == ["verify-tests"]  # once
    assert chains[-1]["status"] == "pass"
    # The repair: a turn of the node's own session (no task) after the waves.
    repairs = [e.data for e in events if e.type == "turn.ordered"
               and e.data["node"] == "implementation" and not e.data.get("task")]
    assert len(repairs) == 1
    token = run.app_token()
    # The branch's commits, newest first, from the sandbox's own git storage.
    commits = subprocess.run(
        ["git", "-C", str(Path(run.env["THE_LOOP_SANDBOX_DIR"]) / "git" / "sandbox" /
                          "demo.git"), "rev-list", branch],
        capture_output=True, text=True, check=True, timeout=30).stdout.split()
    runs = {sha: check_runs(run, token, sha) for sha in commits}
    failed = [c for sha in commits for c in runs[sha] if c["conclusion"] == "failure"]
    # Every push ran the CI: each commit with greet's defect failed (verify-tests blocked
    # once, on the head it checked), the repair's passed.
    assert failed and commits[0] not in {c["head_sha"] for c in failed}
    assert "test_demo_greet" in (failed[0]["output"]["text"] or "")
    notes = run.api("GET", f"/repos/sandbox/demo/check-runs/{failed[0]['id']}/annotations",
                    token=token).json()
    # greet's defect fails its test and banner's, built on greet.
    assert sorted(a["path"] for a in notes) == ["tests/test_demo_banner.py",
                                                 "tests/test_demo_greet.py"]
    assert [c["conclusion"] for c in runs[commits[0]]] == ["success"]  # the repair's
    assert failed[0]["output"]["title"] and failed[0]["output"]["summary"]
    # The pull request: ready for review, the approver asked.
    shown = wait_until(lambda: (x := run.show("1")) and "phase:review" in x["labels"]
                       and x, STEP, "phase:review on the issue")
    assert [(p["head"], p["state"]) for p in shown["pull_requests"]] == [(branch, "open")]
    number = shown["pull_requests"][0]["number"]
    pull = run.api("GET", f"/repos/sandbox/demo/pulls/{number}", token=token).json()
    assert [u["login"] for u in pull["requested_reviewers"]] == [USER]
    assert "Closes #1" in (pull["body"] or "")


def review_and_merge(run: SandboxRun, store: RedisStateStore, branch: str, *,
                     auto: bool) -> None:
    """An approving pull request review passes the review gate; the pull request is
    merged (by the-loop with ``auto``, else by the person at ``done``); the issue is
    closed, ``phase:done``, the branches are gone, main holds the tasks' code."""
    number = run.show("1")["pull_requests"][0]["number"]
    out = run.sandbox("review", str(number), "approve", "--as", USER)
    assert out.startswith("reviewed")
    if not auto:
        wait_until(lambda: at(store, "done", "waiting"), STEP, "done waiting for the merge")
        assert run.show("1")["pull_requests"][0]["state"] == "open"
        run.sandbox("merge", str(number), "--as", USER)
    wait_until(lambda: (s := store.load(REF)) and s.status == "done", STEP,
               "the pull request merged and the work item done")
    merged = wait_until(lambda: [e.data for e in store.events(REF)
                                 if e.type == "pull-request.merged"], STEP,
                        "who merged it, in the event log")
    assert [(m["by_the_loop"], m["by"]) for m in merged] == [
        (True, None) if auto else (False, USER)]  # the-loop's own merge names no person
    wait_until(lambda: set(run.show("1")["branches"]) == {"main"}, STEP,
               "the work item's and the tasks' branches deleted")
    shown = wait_until(lambda: (x := run.show("1")) and "phase:done" in x["labels"] and x,
                       STEP, "phase:done on the issue")
    assert shown["state"] == "closed"  # Closes #1
    assert [p["state"] for p in shown["pull_requests"]] == ["merged"]
    for task in TASKS:
        for rel, text in task_code(task, defective=False).items():
            assert file_at(run, rel, "main") == text, rel
    bot = [c["body"] for c in shown["comments"] if c["user"] == "the-loop[bot]"]
    for gate in ("requirements-approval", "design-approval", "review"):
        assert any(f"phase `{gate}` is waiting for a decision" in b for b in bot), gate
        assert any(f"approved at gate `{gate}`" in b for b in bot), gate


def test_the_shipped_graph_walks_a_work_item_from_the_label_to_merged(
        redis_ns, tmp_path):
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    with sandbox_run(redis_ns, tmp_path, user=USER) as run:
        try:
            branch = walk_to_implementation(run, store)
            walk_to_review(run, store, branch)
            review_and_merge(run, store, branch, auto=True)
            # The-loop's own label writes came back as deliveries and were ignored.
            assert not [e for e in store.events(REF) if e.type.startswith("labels.drift")]
        except AssertionError:
            print(run.tail())
            for e in store.events(REF):
                print(e.type, e.data)
            raise
    assert run.proc.returncode in (0, 143), run.tail(3000)
    assert run.left == ([], []), f"left running: {run.left}"



def test_without_auto_merge_the_work_item_waits_at_done_for_a_persons_merge(
        redis_ns, tmp_path):
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    with sandbox_run(redis_ns, tmp_path, user=USER) as run:
        try:
            run.commit_as_person(HARNESS_CONFIG_PATH,
                                 "version: 1\nmerge: {method: squash, auto: false}\n",
                                 "merge setting: a person merges")
            branch = walk_to_implementation(run, store)
            walk_to_review(run, store, branch)
            review_and_merge(run, store, branch, auto=False)
        except AssertionError:
            print(run.tail())
            raise
    assert run.left == ([], []), f"left running: {run.left}"


def test_a_pull_request_closed_unmerged_ends_the_work_item_abandoned(redis_ns, tmp_path):
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    with sandbox_run(redis_ns, tmp_path, user=USER) as run:
        try:
            run.sandbox("issue", "create", "Add a login page", "--label", "the-loop")
            wait_until(lambda: at(store, "requirements-approval", "waiting"), STEP,
                       "requirements at the gate, the draft pull request open")
            shown = run.show("1")
            [pull] = shown["pull_requests"]
            closed = run.api("PATCH", f"/repos/sandbox/demo/pulls/{pull['number']}",
                             token=run.person_token(), json={"state": "closed"})
            assert closed.ok, closed.text
            wait_until(lambda: (s := store.load(REF)) and s.status == "abandoned", STEP,
                       "the work item abandoned")
            assert store.load(REF).current_node == "requirements-approval"  # never done
            shown = run.show("1")
            assert "phase:done" not in shown["labels"]
            assert pull["head"] in shown["branches"]  # the work is kept
            # The status comment is edited through the outbox after the state is saved:
            # wait for that edit, not for the state.
            wait_until(lambda: "**abandoned**" in next(
                c["body"] for c in run.show("1")["comments"] if c["user"] == "the-loop[bot]"),
                STEP, "the status comment saying abandoned")
            # Nothing moves an abandoned work item: the gate's /approve is not taken.
            run.sandbox("comment", "1", "/approve", "--as", USER)
            wait_until(lambda: any(e.type == "delivery.received" and e.data["actor"] == USER
                                   and e.data["event"] == "issue_comment"
                                   for e in store.events(REF)), STEP, "the comment delivered")
            assert store.load(REF).status == "abandoned"
        except AssertionError:
            print(run.tail())
            raise
    assert run.left == ([], []), f"left running: {run.left}"
