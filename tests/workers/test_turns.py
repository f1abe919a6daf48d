"""The runner's Redis records (foundation/turns.py), its reaper, and the turn input
(runner/prompts.py), against the real Redis."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
from rq import Queue

from foundation.events import TURN_EVENT, GitHubEvent
from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import Keys
from foundation.turns import (
    INTERRUPTED,
    QUEUED,
    RUNNING,
    TurnContext,
    TurnKeys,
    TurnRecords,
    job_id,
)
from graph.markers import marker
from graph.refs import WorkItemRef
from graph.work import TurnEnded, TurnOrder
from runner import prompts
from runner.service import TurnReaper, TurnRunner, TurnWorker
from the_loop.sandbox.fakegithub.state import FakeGitHub
from workers.session import turn_work

REF = "github:o/r#7"
CONTEXT = TurnContext("o/r", 7, "Add a login page", "main", installation_id=3)


def order(number=1, **kw):
    base = dict(id=f"{REF}/requirements/1/turn/{number}", ref=REF, node="requirements",
                visit=1, number=number, max_turns=5,
                session_id="0b7c2f4e-1d1a-4c53-9a55-2f8f7f5f9f10",
                command="create-requirements", stage="requirements",
                artifacts=("specs/7/requirements.md",),
                checks=({"hook": "validate-artifacts",
                         "with": {"sections": ["Problem", "Requirements"]}},))
    base.update(kw)
    return TurnOrder(**base)


@pytest.fixture
def records(redis_ns):
    return TurnRecords(redis_ns.client, TurnKeys(redis_ns.prefix),
                       f"{redis_ns.queue_name}-turns")


def test_an_order_is_queued_once_with_its_record(records):
    assert records.order(order(), CONTEXT) is True
    assert records.order(order(), CONTEXT) is False  # the same id again: nothing
    queue = Queue(records.queue.name, connection=records.redis)
    assert queue.job_ids == [f"{job_id(order().id, records.keys.prefix)}-1"]
    record = records.get(REF)
    assert (record["status"], record["number"], record["attempt"]) == (QUEUED, "1", "1")
    assert json.loads(record["order"]) == order().to_dict()
    assert records.refs() == [REF]


def test_requeue_takes_the_next_attempt_and_an_ended_turn_is_not_requeued(records):
    records.order(order(), CONTEXT)
    records.update(REF, status=RUNNING)
    assert records.requeue(REF, reason="its runner stopped mid-turn") is True
    record = records.get(REF)
    assert (record["status"], record["attempt"]) == (INTERRUPTED, "2")
    assert record["detail"] == "its runner stopped mid-turn"
    records.update(REF, status="completed")
    assert records.requeue(REF, reason="again") is False


def test_one_live_turn_per_work_item(records):
    token = records.lock(REF, 30)
    assert token is not None
    assert records.lock(REF, 30) is None
    assert records.renew(REF, "someone-else", 30) is False
    assert records.renew(REF, token, 30) is True
    records.unlock(REF, token)
    assert records.lock(REF, 30) is not None


def test_slots_hold_the_global_and_the_installation_caps(records):
    take = records.take_slot
    assert take("t1", 1, 30, limit=3, per_installation=1)
    assert not take("t2", 1, 30, limit=3, per_installation=1)  # installation 1 is full
    assert take("t3", 2, 30, limit=3, per_installation=1)
    assert take("t4", 3, 30, limit=3, per_installation=1)
    assert not take("t5", 4, 30, limit=3, per_installation=1)  # the global cap
    assert take("t1", 1, 30, limit=3, per_installation=1)  # a holder renews
    records.release_slot("t1", 1)
    assert take("t2", 1, 30, limit=3, per_installation=1)


def test_expired_slots_are_given_back(records):
    assert records.take_slot("t1", 1, -1, limit=1, per_installation=1)  # already expired
    assert records.take_slot("t2", 1, 30, limit=1, per_installation=1)


def test_cancel_is_recorded_only_for_a_live_turn(records):
    assert records.request_cancel(REF) is False
    records.order(order(), CONTEXT)
    assert records.request_cancel(REF) is True
    assert records.get(REF)["cancel"] == "1"


def test_the_reaper_takes_back_a_turn_whose_runner_stopped(records):
    records.order(order(), CONTEXT)
    records.update(REF, status=RUNNING, host="elsewhere", lease_until=time.time() - 1)
    reaper = TurnReaper(records, "here")
    assert reaper.reap() == [REF]
    record = records.get(REF)
    assert (record["status"], record["attempt"]) == (INTERRUPTED, "2")
    # A live runner (its lock held) is left alone.
    records.update(REF, status=RUNNING, lease_until=time.time() - 1)
    token = records.lock(REF, 30)
    assert reaper.reap() == []
    records.unlock(REF, token)


def test_a_report_is_a_delivery_in_the_work_items_inbox(records, redis_ns):
    inbox = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    ended = TurnEnded(order().id, "completed", head_sha="a" * 40, pull=8, cost_usd=0.2)
    first = records.report(inbox, order(), CONTEXT, ended, attempt=1,
                           branch="the-loop/7-add-a-login-page")
    again = records.report(inbox, order(), CONTEXT, ended, attempt=1,
                           branch="the-loop/7-add-a-login-page")
    assert first == again  # the same report twice is one delivery
    keys = Keys(redis_ns.prefix, redis_ns.queue_name)
    assert [i.decode() for i in redis_ns.client.lrange(keys.inbox(REF), 0, -1)] == [first]
    body = redis_ns.client.hget(keys.delivery(first), "body")
    event = GitHubEvent.parse(TURN_EVENT, json.loads(body))
    inbound = event.inbound(first)
    assert inbound.kind == "turn.completed"
    assert inbound.turn["id"] == order().id and inbound.turn["pull"] == 8
    assert event.head_sha == "a" * 40 and event.head_ref == "the-loop/7-add-a-login-page"
    assert event.ref.format() == REF and event.installation_id == 3


def test_pull_requests_of_a_work_item_belong_to_it(records):
    records.remember_workspace(REF, "o/r", "the-loop/7-add-a-login-page", 8)
    assert records.owner_of("o/r", 8) == REF
    assert records.owner_of("o/r", 9) is None
    assert records.workspace(REF)["branch"] == "the-loop/7-add-a-login-page"


# -- the turn's input ------------------------------------------------------------------


def test_a_first_turn_gets_the_template_the_artifacts_and_the_checks():
    text = prompts.render(order(), CONTEXT, "the-loop/7-add-a-login-page", resumed=False)
    assert "Write the requirements for issue #7 of o/r" in text
    assert "- `specs/7/requirements.md` with sections: `## Problem`, `## Requirements`" in text
    assert "- validate-artifacts (sections: Problem, Requirements)" in text
    assert "the-loop/7-add-a-login-page" in text
    assert "Add a login page" not in text  # the title is a payload's text


def test_a_resumed_turn_gets_the_blocks_messages_only():
    blocked = order(2, resume="h-1", feedback={"block": {
        "hook": "validate-artifacts", "boundary": "exit", "messages": [{
            "text": "specs/7/requirements.md has no 'Requirements' section",
            "path": "specs/7/requirements.md", "code": "section-missing"}]}})
    text = prompts.render(blocked, CONTEXT, "b", resumed=True)
    assert ("- validate-artifacts: specs/7/requirements.md has no 'Requirements' section "
            "(specs/7/requirements.md)") in text
    assert "Write the requirements" not in text


def test_a_review_is_referenced_never_quoted():
    review = order(1, visit=2, resume="h-1", feedback={"feedback": {
        "kind": "changes-requested", "gate": "requirements-approval", "actor": "alice",
        "comment_id": 991, "body_sha256": "f" * 64}})
    text = prompts.render(review, CONTEXT, "b", resumed=True)
    assert "@alice decided `changes-requested` at the gate `requirements-approval`" in text
    assert "comment 991 on #7 of o/r" in text
    assert "f" * 64 not in text


def test_a_fresh_session_after_a_lost_one_is_seeded_with_the_artifacts():
    lost = order(2, seeded_with=("specs/7/requirements.md",), feedback={"block": {
        "hook": "validate-artifacts", "messages": [{"text": "x", "path": None}]}})
    text = prompts.render(lost, CONTEXT, "b", resumed=False)
    assert "read these files in the checkout first" in text
    assert "Write the requirements" in text and "- validate-artifacts: x" in text


def test_a_repository_may_override_a_template_from_its_default_branch():
    seen = []

    def override(path):
        seen.append(path)
        return "Our own words for #$number."

    text = prompts.render(order(), CONTEXT, "b", resumed=False, override=override)
    assert seen == [".the-loop/prompts/create-requirements.md"]
    assert "Our own words for #7." in text


def test_a_done_work_items_workspace_removal_is_queued_once(records, tmp_path):
    records.retire(REF, "o/r", 7)
    records.retire(REF, "o/r", 7)
    queue = Queue(records.queue.name, connection=records.redis)
    [job] = queue.jobs
    assert job.func_name == "runner.service.remove_workspace"
    assert job.args == (REF, "o/r", 7)


def test_a_local_turn_names_no_issue_and_promises_no_push():
    local = TurnContext("local", 0, "", "main")
    text = prompts.render(order(ref="local:demo", id="local:demo/requirements/1/turn/1"),
                          local, "main", resumed=False)
    assert "Write the requirements for the local work item local:demo" in text
    assert "gh issue view" not in text and "#0" not in text
    assert "commits what you changed on `main` (nothing is pushed)" in text


def test_a_resumed_turn_is_taken_before_waiting_first_turns(records):
    first = [order(id=f"github:o/r#{n}/requirements/1/turn/1", ref=f"github:o/r#{n}")
             for n in (1, 2)]
    for item in first:
        assert records.order(item, CONTEXT)
    repair = order(number=2, id="github:o/r#3/requirements/1/turn/2", ref="github:o/r#3",
                   resume="harness-session", feedback={"block": {"hook": "x"}})
    assert records.order(repair, CONTEXT)
    queue = Queue(records.queue.name, connection=records.redis)
    assert queue.job_ids == [f"{job_id(o.id, records.keys.prefix)}-1"
                             for o in (repair, *first)]


def _first_turn(repo, n):
    ref = f"github:{repo}#{n}"
    return order(id=f"{ref}/requirements/1/turn/1", ref=ref)


def _take_all(records):
    """Work the turns queue with the runner's own RQ worker (burst) and a runner that
    only notes which turn it was given; the refs in the order they were taken."""
    taken = []
    runner = SimpleNamespace(run=lambda ref, order_id: taken.append(ref) or "noted")
    worker = TurnWorker([records.queue], connection=records.redis, runner=runner)
    worker.work(burst=True, with_scheduler=False)
    return taken


def test_first_turns_are_taken_round_robin_across_installations_behind_a_resumed_one(records):
    """Given installation 1 with five waiting first turns and installation 2 with two,
      queued 1,1,1,1,1,2,2, and then a repair turn of installation 1
    When the runner's RQ worker takes the turns queue
    Then the repair comes first, then the first turns alternate between the installations,
      each installation's oldest first, until only installation 1's are left; and the
      rounds of the turns taken are forgotten."""
    a = [_first_turn("a/r", n) for n in range(1, 6)]
    b = [_first_turn("b/r", n) for n in range(1, 3)]
    for item in a:
        assert records.order(item, replace(CONTEXT, repository="a/r", number=1,
                                           installation_id=1))
    for item in b:
        assert records.order(item, replace(CONTEXT, repository="b/r", installation_id=2))
    repair = order(number=2, id="github:a/r#9/requirements/1/turn/2", ref="github:a/r#9",
                   resume="harness-session", feedback={"block": {"hook": "x"}})
    assert records.order(repair, replace(CONTEXT, repository="a/r", installation_id=1))

    assert _take_all(records) == [repair.ref] + [o.ref for o in (
        a[0], b[0], a[1], b[1], a[2], a[3], a[4])]
    records.order(_first_turn("a/r", 6), replace(CONTEXT, installation_id=1))
    assert list(records.redis.hkeys(records.keys.rounds)) == [
        f"{job_id(_first_turn('a/r', 6).id, records.keys.prefix)}-1".encode()]


def test_deployments_sharing_a_redis_order_the_same_turn_as_jobs_of_their_own(redis_ns):
    """Given two deployments (key prefixes) on one Redis, each ordering a turn of the same
    id on its own turns queue
    When each deployment's runner worker takes its queue
    Then each takes its own turn: RQ's job hashes (rq:job:ID, outside the prefix) differ."""
    mine = TurnRecords(redis_ns.client, TurnKeys(redis_ns.prefix),
                       f"{redis_ns.queue_name}-turns")
    theirs = TurnRecords(redis_ns.client, TurnKeys(f"{redis_ns.prefix}-other"),
                         f"{redis_ns.queue_name}-other-turns")
    same = _first_turn("a/r", 1)
    assert mine.order(same, CONTEXT) and theirs.order(same, CONTEXT)
    assert mine.queue.job_ids != theirs.queue.job_ids
    assert _take_all(mine) == [same.ref]
    assert _take_all(theirs) == [same.ref]


def _runner(records, per_installation=1):
    """A runner with only what its take path reads (the lease and the caps)."""
    return TurnRunner(records, None, None, None,  # type: ignore[arg-type]
                      SimpleNamespace(lease=30, concurrency=8,  # type: ignore[arg-type]
                                      per_installation=per_installation),
                      None, None, {})  # type: ignore[arg-type]


def test_an_installation_arriving_late_joins_the_round_under_way(records, monkeypatch):
    """Given installation 1's first turns in rounds 1-3 and installation 2's in 1
    When installation 3 orders a first turn
    Then it waits behind round 1 only, not behind installation 1's whole backlog; and
      installation 1's oldest, taken while the installation is at its cap, does not run
      and goes to the back of its installation's line."""
    monkeypatch.setattr("runner.service.SLOT_WAIT", 0)
    a = [_first_turn("a/r", n) for n in range(1, 4)]
    for item in a:
        records.order(item, replace(CONTEXT, installation_id=1))
    records.order(_first_turn("b/r", 1), replace(CONTEXT, installation_id=2))
    records.order(_first_turn("c/r", 1), replace(CONTEXT, installation_id=3))
    assert records.take_slot("elsewhere", 1, 30, limit=8, per_installation=1)
    records.queue.remove(f"{job_id(a[0].id, records.keys.prefix)}-1")  # a runner took it
    assert _runner(records).run(a[0].ref, a[0].id) == "waiting for a slot"
    assert records.get(a[0].ref)["status"] == QUEUED
    assert _take_all(records) == ["github:b/r#1", "github:c/r#1", a[1].ref, a[2].ref,
                                  a[0].ref]


def test_a_repair_that_finds_its_work_items_lock_held_keeps_its_place_at_the_front(
        records, monkeypatch):
    """Given two waiting first turns and a repair a runner took from the queue's front
      while the previous turn's runner still holds the work item's turn lock
    When the runner's take path meets the held lock
    Then the repair goes back to the queue's front, not behind the first turns."""
    monkeypatch.setattr("runner.service.BUSY_WAIT", 0)
    first = [_first_turn("a/r", n) for n in (1, 2)]
    for item in first:
        records.order(item, CONTEXT)
    repair = order(number=2, resume="harness-session", feedback={"block": {"hook": "x"}})
    records.order(repair, CONTEXT)
    records.queue.remove(f"{job_id(repair.id, records.keys.prefix)}-1")  # a runner took it
    assert records.lock(REF, 30) is not None  # the previous turn's runner is reporting
    runner = SimpleNamespace(records=records, runner_settings=SimpleNamespace(lease=30))
    assert TurnRunner.run(runner, REF, repair.id).startswith("busy")  # type: ignore[arg-type]
    assert records.queue.job_ids == [f"{job_id(o.id, records.keys.prefix)}-1"
                                     for o in (repair, *first)]


@pytest.mark.parametrize(("kind", "link"), [("issue", "Closes #7"), ("pull_request", "Refs #7")])
def test_the_draft_pull_request_closes_an_issue_work_item_and_refers_to_a_pull(kind, link):
    fake = FakeGitHub()
    fake.add_repo("o/r")
    fake.add_file("o/r", "README.md", "# r\n")
    fake.add_file("o/r", "specs/7/requirements.md", "# R\n", ref="the-loop/7-login")
    runner = SimpleNamespace(github=lambda installation: fake)
    context = replace(CONTEXT, kind=kind)
    ref = "github:o/r#7"
    number = TurnRunner._draft_pull(runner, ref, context, "the-loop/7-login")  # type: ignore[arg-type]
    pull = fake.repo("o/r").pulls[number]
    assert pull["draft"] is True
    # The closing keyword stands on a line of its own, inside the-loop's marked region.
    lines = pull["body"].splitlines()
    assert link in lines
    assert lines[0] == marker(f"{ref}/pull-body") and lines[-1] == marker(f"{ref}/pull-body/end")
    # The second turn finds it rather than opening another.
    assert TurnRunner._draft_pull(runner, ref, context, "the-loop/7-login") == number  # type: ignore[arg-type]


def test_a_turn_context_keeps_its_work_items_kind():
    context = replace(CONTEXT, kind="pull_request")
    assert TurnContext.from_dict(json.loads(json.dumps(context.to_dict()))) == context
    old = {k: v for k, v in CONTEXT.to_dict().items() if k != "kind"}  # a record from before
    assert TurnContext.from_dict(old).kind == "issue"


def test_a_turn_context_is_an_issue_unless_the_work_item_is_a_pull_request(records):
    agent = SimpleNamespace(turns=records, max_turns=5, cost_cap_usd=None)
    item, draft = WorkItemRef("o/r", 7), WorkItemRef("o/r", 8)

    def kind(event: GitHubEvent, stored: str | None = None) -> str:
        work, _ = turn_work(agent, event, item, "o/r", stored)  # type: ignore[arg-type]
        assert work is not None
        return work.context.kind

    assert kind(GitHubEvent("issues", ref=item, kind="issue")) == "issue"
    assert kind(GitHubEvent("pull_request", ref=item, kind="pull_request")) == "pull_request"
    # A delivery on the issue's draft pull request does not make the issue one.
    assert kind(GitHubEvent("pull_request", ref=draft, kind="pull_request")) == "issue"
    assert kind(GitHubEvent(TURN_EVENT, ref=item)) == "issue"
    # The kind the work item's state recorded wins (a turn report names no kind).
    assert kind(GitHubEvent(TURN_EVENT, ref=item), "pull_request") == "pull_request"


def test_a_turns_warnings_are_kept_in_its_record_and_its_report(records, redis_ns):
    inbox = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    records.order(order(), CONTEXT)
    runner = SimpleNamespace(records=records, inbox=inbox)
    ended = TurnEnded(order().id, "completed", warnings=("Reconnecting... 1/5",))
    TurnRunner._report(runner, REF, order(), CONTEXT, ended, 1, None)  # type: ignore[arg-type]
    record = records.get(REF)
    assert record is not None and record["status"] == "completed"
    assert json.loads(record["warnings"]) == ["Reconnecting... 1/5"]
    keys = Keys(redis_ns.prefix, redis_ns.queue_name)
    [delivery] = [i.decode() for i in redis_ns.client.lrange(keys.inbox(REF), 0, -1)]
    body = json.loads(redis_ns.client.hget(keys.delivery(delivery), "body"))
    inbound = GitHubEvent.parse(TURN_EVENT, body).inbound(delivery)
    assert TurnEnded.from_dict(inbound.turn).warnings == ("Reconnecting... 1/5",)
    # the next turn's record starts without them
    records.order(order(2), CONTEXT)
    assert "warnings" not in (records.get(REF) or {})


def test_a_turns_report_says_how_long_the_agent_ran_of_the_turn(records, redis_ns):
    inbox = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    records.order(order(), CONTEXT)
    runner = SimpleNamespace(records=records, inbox=inbox)
    ended = TurnEnded(order().id, "completed", seconds=2.5, agent_seconds=1.25)
    TurnRunner._report(runner, REF, order(), CONTEXT, ended, 1, None)  # type: ignore[arg-type]
    keys = Keys(redis_ns.prefix, redis_ns.queue_name)
    [delivery] = [i.decode() for i in redis_ns.client.lrange(keys.inbox(REF), 0, -1)]
    body = json.loads(redis_ns.client.hget(keys.delivery(delivery), "body"))
    reported = TurnEnded.from_dict(GitHubEvent.parse(TURN_EVENT, body).inbound(delivery).turn)
    assert (reported.seconds, reported.agent_seconds) == (2.5, 1.25)
    assert TurnEnded.from_dict({"id": "x", "status": "completed"}).agent_seconds == 0.0
