"""Sessions that follow the work item, on the real Redis: a runner takes from the turns
queue with :class:`runner.service.AffinityQueue` (the pick of
:meth:`foundation.turns.TurnRecords.pick`), so a turn whose work item's session is held by
another live runner waits for that runner, a dead holder's turns are anyone's, and the
queue's order (continuations first, first turns round-robin per installation) holds for
what each runner takes."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from foundation.turns import TurnContext, TurnKeys, TurnRecords, runner_id
from runner.service import TurnReaper, TurnWorker, affinity_queue
from tests.workers.test_turns import CONTEXT, order

A, B = "node-a-11111111", "node-b-22222222"


@pytest.fixture
def records(redis_ns):
    return TurnRecords(redis_ns.client, TurnKeys(redis_ns.prefix),
                       f"{redis_ns.queue_name}-turns")


def _take_all_as(records: TurnRecords, runner: str) -> list[str]:
    """Work the turns queue (burst) with the runner's own RQ worker and affinity queue as
    runner id ``runner``; the refs it was given, in order."""
    taken: list[str] = []
    fake = SimpleNamespace(run=lambda ref, order_id: taken.append(ref) or "noted",
                           records=records, runner_id=runner)
    queue_class = affinity_queue(records, runner)
    queue = queue_class(records.queue.name, connection=records.redis)
    worker = TurnWorker([queue], connection=records.redis, runner=fake,
                        queue_class=queue_class)
    worker.work(burst=True, with_scheduler=False)
    return taken


def _first(repo: str, n: int):
    ref = f"github:{repo}#{n}"
    return order(id=f"{ref}/requirements/1/turn/1", ref=ref)


def _repair(repo: str, n: int):
    ref = f"github:{repo}#{n}"
    return order(number=2, id=f"{ref}/requirements/1/turn/2", ref=ref,
                 resume="harness-session", feedback={"block": {"hook": "x"}})


def _ctx(repo: str, installation: int) -> TurnContext:
    return replace(CONTEXT, repository=repo, installation_id=installation)


def test_a_turn_whose_holder_lives_is_left_for_it_and_taken_by_it(records):
    """Given a repair turn of an item whose session runner A holds, A alive
    When runner B works the queue
    Then B takes the other item's turn only; the repair waits, and A takes it next."""
    held, other = _repair("o/r", 1), _first("o/r", 2)
    records.hold(held.ref, A)
    records.alive(A, 30)
    assert records.order(held, _ctx("o/r", 1)) and records.order(other, _ctx("o/r", 1))

    assert _take_all_as(records, B) == [other.ref]
    assert len(records.queue.job_ids) == 1
    assert _take_all_as(records, A) == [held.ref]
    assert records.queue.job_ids == []
    assert not records.redis.exists(records.keys.job_refs)  # picked jobs are forgotten


def test_a_dead_or_absent_holders_turn_is_anyones(records):
    """Given one turn held by runner A, which has no liveness key (it died: its key
    expired), and one turn no runner holds
    When runner B works the queue
    Then B takes both, in the queue's order (the continuation first)."""
    dead, fresh = _repair("o/r", 1), _first("o/r", 2)
    records.hold(dead.ref, A)
    assert records.order(fresh, _ctx("o/r", 1)) and records.order(dead, _ctx("o/r", 1))
    assert _take_all_as(records, B) == [dead.ref, fresh.ref]


def test_a_runner_that_stops_gives_its_turns_away_at_once(records):
    """Given runner A alive holding an item's session, then A's stop (``gone``)
    When runner B works the queue
    Then B takes the item's turn without waiting for A's key to expire."""
    held = _repair("o/r", 1)
    records.hold(held.ref, A)
    records.alive(A, 300)
    assert records.order(held, _ctx("o/r", 1))
    assert _take_all_as(records, B) == []
    records.gone(A)
    assert _take_all_as(records, B) == [held.ref]


def test_continuations_first_and_round_robin_hold_for_what_each_runner_takes(records):
    """Given installation 1 with three first turns and installation 2 with two, queued
      1,1,1,2,2, then repairs of two items: one held by live runner A, one by B
    When B works the queue, then A
    Then B takes its repair first, then the first turns alternating between the
      installations (oldest first) as without affinity; A then takes the repair it holds
      (left at the front for it)."""
    one = [_first("a/r", n) for n in (1, 2, 3)]
    two = [_first("b/r", n) for n in (1, 2)]
    for item in one:
        assert records.order(item, _ctx("a/r", 1))
    for item in two:
        assert records.order(item, _ctx("b/r", 2))
    mine, theirs = _repair("a/r", 8), _repair("a/r", 9)
    records.hold(mine.ref, B)
    records.hold(theirs.ref, A)
    records.alive(A, 30)
    records.alive(B, 30)
    assert records.order(mine, _ctx("a/r", 1)) and records.order(theirs, _ctx("a/r", 1))

    assert _take_all_as(records, B) == [mine.ref] + [o.ref for o in (
        one[0], two[0], one[1], two[1], one[2])]
    assert _take_all_as(records, A) == [theirs.ref]


def test_a_cleanup_job_goes_to_the_runner_holding_the_workspace(records):
    """Given a done work item whose workspace runner A holds (A alive)
    When its workspace removal is queued and B works the queue
    Then B leaves it; A takes it."""
    ref = "github:o/r#5"
    records.hold(ref, A)
    records.alive(A, 30)
    records.retire(ref, "o/r", 5)
    assert _take_all_as(records, B) == []
    assert len(records.queue.job_ids) == 1
    records.gone(A)
    assert _take_all_as(records, B) == []  # taken now (its removal runs outside ``run``)
    assert records.queue.job_ids == []


def test_the_reaper_keeps_the_runner_alive_for_three_rounds_at_least(records):
    """The reaper's beat writes the runner's liveness key with a TTL of at least three
    reaper rounds (a runner between turns stays the holder of its work items)."""
    reaper = TurnReaper(records, "host", interval=5.0, runner=A, alive_ttl=6)
    reaper.beat()
    assert records.is_alive(A)
    assert 14 <= records.redis.ttl(records.keys.runner_alive(A)) <= 15
    records.gone(A)
    assert not records.is_alive(A)


def test_a_runner_is_named_by_its_host_and_home_unless_told():
    assert runner_id("pod-1", "/home/a") != runner_id("pod-1", "/home/b")
    assert runner_id("pod-1", "/home/a") == runner_id("pod-1", "/home/a")
    assert runner_id("pod-1", "/home/a").startswith("pod-1-")
    assert runner_id("pod-1", "/home/a", "explicit") == "explicit"


def test_the_refs_of_jobs_gone_from_the_queue_are_forgotten(records):
    """Given a held turn whose job was deleted from the queue some other way
    When a runner finds nothing it may take
    Then the job's ref entry is dropped (the hash does not grow)."""
    held = _repair("o/r", 1)
    records.hold(held.ref, A)
    records.alive(A, 30)
    assert records.order(held, _ctx("o/r", 1))
    assert _take_all_as(records, B) == []
    assert records.redis.hlen(records.keys.job_refs) == 1  # still waiting: kept
    records.redis.delete(records.queue.key)
    assert _take_all_as(records, B) == []
    assert not records.redis.exists(records.keys.job_refs)
