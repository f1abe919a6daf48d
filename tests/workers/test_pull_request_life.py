"""The work item's pull request through the shipped graph, in the worker: real Redis, the
one fake GitHub (in memory), the worker's processor, and the runner's side played by
the runner's own pieces (its draft pull request, its reports through the turn records).

An issue is labelled and its agent turns write each node's artifact: requirements,
design (each approved by ``/approve``), a plan of three tasks (two, then one that
depends on one of them). While they run the draft pull request's body shows the task
table; when ``implementation`` passes the pull request is marked ready for review, the
review gate's approvers are requested as reviewers, and a pull request review decides
the gate: an approver's approval passes it, a stranger's does nothing.

The graph is ``graph/pdlc.yaml`` less ``verify-tests`` (CI is another test's matter).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import SHARED_INBOX
from foundation.settings import WorkerSettings
from foundation.turns import TurnContext, TurnKeys, TurnRecords
from graph.markers import marker
from graph.ports import IntegrationError
from graph.work import TurnEnded, TurnOrder
from runner.service import TurnRunner
from tests.conftest import act_as, gh_label, load_payload
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.events import parse_delivery
from workers.state import RedisStateStore

REPO = "Codertocat/Hello-World"
REF = f"github:{REPO}#1"
#: The commit every turn reports it pushed (the fake's files are kept under it too).
HEAD = "c" * 40
COLLABORATORS = ("version: 1\nroles:\n  approver:\n"
                 "    - {name: Coder, github: Codertocat}\n"
                 "    - {name: Reviewers, github: Codertocat/reviewers}\n"
                 "    - {name: Bot, github: \"the-loop[bot]\"}\n")
ARTIFACTS = {
    "requirements": ("requirements.md", "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"),
    "design": ("design.md", "# D\n\n## Overview\n\nx\n\n## Security design\n\ny\n"),
    "tasks": ("tasks.md", "# T\n\n## Tasks\n\n```yaml\ntasks:\n"
                          "  - {id: api, title: The login API, acceptance: [it answers]}\n"
                          "  - {id: page, title: The login page, acceptance: [it shows]}\n"
                          "  - {id: e2e, title: The walk | end to end, depends_on: [page],"
                          " acceptance: [it passes]}\n```\n"),
}


def graph_without_ci(tmp_path: Path) -> Path:
    text = (Path(__file__).parents[2] / "graph" / "pdlc.yaml").read_text()
    check = "      - {hook: verify-tests, with: {check: tests}}\n"
    assert check in text
    path = tmp_path / "pdlc-without-ci.yaml"
    path.write_text(text.replace(check, ""))
    return path


@pytest.fixture
def loop(redis_ns, tmp_path):
    return build(redis_ns, tmp_path, FakeGitHub())


def build(redis_ns, tmp_path, gh: FakeGitHub) -> SimpleNamespace:
    gh.add_repo(REPO, default_branch="master")
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    records = TurnRecords(redis_ns.client, TurnKeys(redis_ns.prefix),
                          f"{redis_ns.queue_name}-turns")
    processor = build_processor(settings, redis_ns.client,
                                load_graph(graph_without_ci(tmp_path)), lambda _i: gh,
                                turns=records)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    return SimpleNamespace(gh=gh, records=records, processor=processor, queue=queue,
                           store=store, reported=[])


def deliver(loop, event: str, payload: dict[str, Any]) -> None:
    parsed = parse_delivery({"X-GitHub-Event": event,
                             "X-GitHub-Delivery": f"d-{uuid.uuid4()}",
                             "Content-Type": "application/json"},
                            json.dumps(payload).encode())
    assert loop.queue.enqueue(parsed)
    loop.processor.drain(parsed.work_item or SHARED_INBOX)
    loop.processor.drain(REF)  # a delivery on the draft pull request is forwarded here


def run_turns(loop) -> list[str]:
    """Play the runner: each queued turn writes its node's artifact (a task: one file)
    on the work item's branch, opens or finds the draft pull request with the runner's
    own code, and reports through the turn records; the worker then takes the report.
    Returns the turns run (node or task), in order."""
    ran = []
    while jobs := [j for j in loop.records.queue.jobs if j.id not in loop.reported]:
        for job in jobs:
            loop.reported.append(job.id)
            record = loop.records.get(job.args[0])
            order = TurnOrder.from_dict(json.loads(record["order"]))
            context = TurnContext.from_dict(json.loads(record["context"]))
            branch = context.branch
            assert branch
            if order.task_id:
                path, text = f"src/{order.task_id}.py", "ok = True\n"
            else:
                name, text = ARTIFACTS[order.node]
                path = f"specs/1/{name}"
            for ref in (branch, HEAD):  # the in-memory fake keeps files by ref name
                loop.gh.add_file(REPO, path, text, ref=ref)
            runner = SimpleNamespace(github=lambda _i: loop.gh)
            pull = TurnRunner._draft_pull(runner, order.ref, context, branch)  # type: ignore[arg-type]
            ended = TurnEnded(id=order.id, status="completed", session_id=order.session_id,
                              head_sha=HEAD, pull=pull,
                              merged=True if order.task else None)
            loop.records.report(loop.queue, order, context, ended, attempt=1, branch=branch)
            loop.processor.drain(REF)
            ran.append(order.task_id or order.node)
    return ran


def approve(login: str = "Codertocat") -> dict[str, Any]:
    p = load_payload("issue_comment", "created")
    p["issue"].setdefault("labels", []).append(gh_label("the-loop"))
    act_as(p, login)
    p["comment"]["body"] = "/approve"
    p["comment"]["id"] = uuid.uuid4().int % 10**9
    return p


def review(loop, number: int, login: str, state: str = "approved") -> dict[str, Any]:
    pr = loop.gh.get_pull_request(REPO, number)
    p = load_payload("pull_request_review", "submitted")
    p["pull_request"].update(number=number, draft=pr["draft"])
    p["pull_request"]["head"].update(sha=pr["head_sha"], ref=pr["head_ref"])
    p["review"].update(id=uuid.uuid4().int % 10**9, state=state, commit_id=pr["head_sha"])
    act_as(p, login)
    return p


def at_review(loop, edit: Any = None) -> int:
    """Walk issue #1 to the review gate (``edit``: called with the pull request once it
    exists, before the tasks are planned); returns its pull request's number."""
    enrol = load_payload("issues", "labeled")
    enrol["issue"].setdefault("labels", []).append(gh_label("the-loop"))
    enrol["label"] = gh_label("the-loop")
    deliver(loop, "issues", enrol)
    assert run_turns(loop) == ["requirements"]
    deliver(loop, "issue_comment", approve())
    assert run_turns(loop) == ["design"]
    state = loop.store.load(REF)
    assert state.current_node == "design-approval", state.current_node
    [number] = loop.gh.repo(REPO).pulls
    pull = loop.gh.repo(REPO).pulls[number]
    assert pull["draft"] is True and "Closes #1" in pull["body"].splitlines()
    assert "specs/1/requirements.md" in pull["body"]
    if edit is not None:
        edit(pull)
    deliver(loop, "issue_comment", approve())
    ran = run_turns(loop)
    assert ran[0] == "tasks" and sorted(ran[1:3]) == ["api", "page"] and ran[3:] == ["e2e"]
    return number


def test_implementation_passing_hands_the_pull_request_over(loop):
    number = at_review(loop)
    state = loop.store.load(REF)
    assert (state.current_node, str(state.status)) == ("review", "waiting")
    pull = loop.gh.repo(REPO).pulls[number]
    assert pull["draft"] is False
    assert f"{REPO}#{number}:ready-for-review" in loop.gh.actions
    # The approvers: the login and the team; never the bot, who wrote the pull request.
    assert pull["requested"] == ["Codertocat"]
    assert pull["requested_teams"] == ["reviewers"]
    body = pull["body"]
    lines = body.splitlines()
    assert lines[0] == marker(f"{REF}/pull-body") and lines[-1] == marker(f"{REF}/pull-body/end")
    assert "Closes #1" in lines
    for name in ("requirements.md", "design.md", "tasks.md"):
        assert f"[`specs/1/{name}`](/{REPO}/blob/the-loop/1-" in body
    assert "| `api` | The login API | 1 | - | passed |" in lines
    assert "| `page` | The login page | 1 | - | passed |" in lines
    assert "| `e2e` | The walk \\| end to end | 2 | page | passed |" in lines
    # Once written, an unchanged region is not written again.
    writes = [a for a in loop.gh.actions if a.endswith(f"#{number}:update-pull-request")]
    deliver(loop, "issue_comment", approve("stranger"))
    assert [a for a in loop.gh.actions
            if a.endswith(f"#{number}:update-pull-request")] == writes


def test_a_person_s_text_outside_the_region_is_kept(loop):
    def edit(pull: dict[str, Any]) -> None:
        pull["body"] = "Notes from a person.\n\n" + pull["body"] + "\n\nAnd after."

    number = at_review(loop, edit)
    body = loop.gh.repo(REPO).pulls[number]["body"]
    assert body.startswith("Notes from a person.\n\n" + marker(f"{REF}/pull-body"))
    assert body.endswith(marker(f"{REF}/pull-body/end") + "\n\nAnd after.")
    assert "| `e2e` |" in body  # the region was written after the person's edit


def test_an_approvers_review_passes_the_review_gate_a_strangers_does_not(loop):
    number = at_review(loop)
    deliver(loop, "pull_request_review", review(loop, number, "mallory"))
    state = loop.store.load(REF)
    assert (state.current_node, str(state.status)) == ("review", "waiting")
    deliver(loop, "pull_request_review", review(loop, number, "Codertocat", "approved"))
    state = loop.store.load(REF)
    # The review gate passed; done means merged, so it waits there for a person's merge
    # (merge.auto is off by default) and is not labelled done before that.
    assert state.current_node == "done" and str(state.status) == "waiting"
    assert "waiting for a person to merge" in (state.parked_reason or "")
    assert f"{REPO}#1:add-label:phase:done" not in loop.gh.actions


def test_an_approvers_changes_requested_review_sends_the_work_back(loop):
    number = at_review(loop)
    deliver(loop, "pull_request_review",
            review(loop, number, "Codertocat", "changes_requested"))
    state = loop.store.load(REF)
    assert state.current_node == "implementation"


class RefusingReviewers(FakeGitHub):
    """GitHub's answer to a review request naming someone who is not a collaborator
    (here: the team): the whole request is refused."""

    def request_reviewers(self, repo: str, number: int, reviewers: list[str],
                          team_reviewers: list[str] | None = None) -> Any:
        if team_reviewers:
            raise IntegrationError(
                "github request-reviewers: HTTP 422", integration="github",
                op="request-reviewers", status=422,
                reason="Reviews may only be requested from collaborators. One or more of "
                       "the users or teams you specified is not a collaborator of the "
                       f"{REPO} repository.")
        return super().request_reviewers(repo, number, reviewers, team_reviewers)


def test_a_refused_review_request_is_a_note_and_the_others_are_still_asked(
        redis_ns, tmp_path):
    loop = build(redis_ns, tmp_path, RefusingReviewers())
    number = at_review(loop)
    state = loop.store.load(REF)
    assert (state.current_node, str(state.status)) == ("review", "waiting")
    pull = loop.gh.repo(REPO).pulls[number]
    assert pull["draft"] is False
    assert (pull["requested"], pull["requested_teams"]) == (["Codertocat"], [])
    [status] = [c["body"] for c in loop.gh.comments(REPO, 1)
                if c["body"].rstrip().endswith(marker(f"{REF}/status"))]
    assert ("Note: mark-ready: GitHub refused to request a review from team `reviewers` "
            "(HTTP 422: Reviews may only be requested from collaborators.") in status
    # The review request comment still asks, and an approval still decides.
    deliver(loop, "pull_request_review", review(loop, number, "Codertocat"))
    assert loop.store.load(REF).current_node == "done"
