"""A seeded deployment for the read API and dashboard tests: real state, event logs,
turn records and a parked delivery in the test Redis, made by the real runtime (with the
in-process fake GitHub and the runner's turn records), never written by hand.

Work items (repository ``acme/widgets`` unless said):

* ``#1`` -- two agent turns at ``requirements`` (the first blocked: a section missing),
  approved by @alice with a comment, one turn at ``design``: waits at the gate
  ``design-approval``;
* ``#2`` -- its first turn blocked (requirements.md missing): turn 2 running;
* ``acme/gadgets#3`` -- forced by an operator from ``requirements`` to ``design``, then
  held by a parked delivery.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from foundation.config.repository import Collaborators
from foundation.inbox.dead import Deliveries
from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.record import DeliveryRecord
from foundation.settings import WorkerSettings
from foundation.turns import RunnerWork, TurnContext, TurnKeys, TurnRecords
from graph.context import HookConfig
from graph.model import InboundEvent, WorkItem
from graph.runtime import Runtime
from graph.work import TURN_COMPLETED, TurnEnded, TurnOrder
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from workers.state import RedisStateStore

WIDGETS, GADGETS = "acme/widgets", "acme/gadgets"
AT_GATE, WORKING, FORCED = f"github:{WIDGETS}#1", f"github:{WIDGETS}#2", f"github:{GADGETS}#3"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Alice, github: alice}\n"
PROBLEM_ONLY = "# Spec\n\n## Problem\n\nx\n"
REQUIREMENTS = "# Requirements\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"
DESIGN = "# Design\n\n## Overview\n\nx\n\n## Security design\n\ny\n"
#: Text only a person wrote (a comment body, an operator's reason): never in an answer.
COMMENT_TEXT = "/approve\n\nA private remark: the budget is 41923 dollars."
FORCE_REASON = "hotfix for incident 77311, skip the review"
PARKED = "6d1f0e2a-5c1b-11ef-9c4e-0242ac120002"
APPROVAL_COMMENT = 90001


class Files:
    """Reads artifacts at the default branch of the fake (an issue's revision)."""

    def __init__(self, gh: FakeGitHub, repo: str) -> None:
        self.gh, self.repo, self.revision = gh, repo, "main"

    def read_text(self, path: str) -> str | None:
        return self.gh.file(self.repo, path, "main")


@dataclass
class Seeded:
    """What was seeded: the fake, the store, the records and the runtime (to move a
    work item on during a test)."""

    gh: FakeGitHub
    store: RedisStateStore
    records: TurnRecords
    runtime: Runtime
    prefix: str
    queue: str

    def config(self, repo: str, number: int) -> HookConfig:
        return config(self, repo, number)

    def approve_design(self) -> None:
        """@alice approves design.md: #1 moves on to ``tasks``."""
        item = WorkItem(ref=AT_GATE, id=1, repository=WIDGETS, spec_dir="specs/1")
        self.runtime.advance(item, self.config(WIDGETS, 1), InboundEvent(
            "issue_comment.created", "d-approve-design", actor="alice", actor_type="User",
            body="/approve", comment_id=APPROVAL_COMMENT + 1))


def config(seeded: Seeded, repo: str, number: int) -> HookConfig:
    work = RunnerWork(seeded.records, TurnContext(repo, number, "A title", "main"),
                      max_turns=5, cost_cap_usd=None)
    return HookConfig(collaborators=Collaborators.parse(COLLABORATORS),
                      integrations={"github": seeded.gh}, files=Files(seeded.gh, repo),
                      work=work)


def report(order: dict, *, cost: float, seconds: float, status: str = "completed",
           delivery: str | None = None) -> InboundEvent:
    ended = TurnEnded(id=order["id"], status=status, session_id=order["session_id"],
                      harness_session=f"claude-{order['number']}", head_sha="b" * 40,
                      cost_usd=cost, seconds=seconds)
    return InboundEvent(TURN_COMPLETED, delivery or f"turn-{order['id']}",
                        actor="the-loop[bot]", actor_type="Bot", turn=ended.to_dict())


def received(store: RedisStateStore, ref: str, event: str, action: str, delivery: str,
             actor: str, body: str | None = None) -> None:
    """The ``delivery.received`` entry the worker's route writes (metadata only)."""
    import hashlib

    store.append_event(ref, "delivery.received", {
        "event": event, "action": action, "delivery": delivery, "actor": actor,
        "body_sha256": hashlib.sha256(body.encode()).hexdigest() if body else None},
        delivery)


def seed(client, prefix: str, queue: str) -> Seeded:
    """Seed the three work items and the parked delivery under ``prefix``."""
    gh = FakeGitHub()
    for repo in (WIDGETS, GADGETS):
        gh.add_repo(repo, default_branch="main")
        gh.add_file(repo, ".the-loop/collaborators.yaml", COLLABORATORS, ref="main")
    store = RedisStateStore(client, prefix)
    records = TurnRecords(client, TurnKeys(prefix), f"{queue}-turns")
    seeded = Seeded(gh, store, records, Runtime(load_graph(), store), prefix, queue)
    runtime = seeded.runtime

    def order(ref: str) -> dict:
        state = store.load(ref)
        assert state is not None and state.turn is not None, ref
        return state.turn["order"]

    # #1: two requirements turns, an approval, a design turn: waits at design-approval.
    one = WorkItem(ref=AT_GATE, id=1, repository=WIDGETS, spec_dir="specs/1")
    received(store, AT_GATE, "issues", "labeled", "d-enrol-1", "alice")
    runtime.enrol(one, config(seeded, WIDGETS, 1), InboundEvent(
        "issues.labeled", "d-enrol-1", actor="alice", actor_type="User", label="the-loop"))
    gh.add_file(WIDGETS, "specs/1/requirements.md", PROBLEM_ONLY, ref="main")
    runtime.advance(one, config(seeded, WIDGETS, 1), report(order(AT_GATE), cost=0.12,
                                                            seconds=95))
    gh.add_file(WIDGETS, "specs/1/requirements.md", REQUIREMENTS, ref="main")
    runtime.advance(one, config(seeded, WIDGETS, 1), report(order(AT_GATE), cost=0.31,
                                                            seconds=140))
    received(store, AT_GATE, "issue_comment", "created", "d-approve-1", "alice",
             COMMENT_TEXT)
    runtime.advance(one, config(seeded, WIDGETS, 1), InboundEvent(
        "issue_comment.created", "d-approve-1", actor="alice", actor_type="User",
        body=COMMENT_TEXT, comment_id=APPROVAL_COMMENT))
    gh.add_file(WIDGETS, "specs/1/design.md", DESIGN, ref="main")
    runtime.advance(one, config(seeded, WIDGETS, 1), report(order(AT_GATE), cost=0.44,
                                                            seconds=210))

    # #2: blocked first turn, the second one running.
    two = WorkItem(ref=WORKING, id=2, repository=WIDGETS, spec_dir="specs/2")
    received(store, WORKING, "issues", "labeled", "d-enrol-2", "alice")
    runtime.enrol(two, config(seeded, WIDGETS, 2), InboundEvent(
        "issues.labeled", "d-enrol-2", actor="alice", actor_type="User", label="the-loop"))
    runtime.advance(two, config(seeded, WIDGETS, 2), report(order(WORKING), cost=0.08,
                                                            seconds=61))
    records.update(WORKING, status="running", started_at=time.time(), host="runner-0")

    # acme/gadgets#3: forced past the requirements gate, then held by a parked delivery.
    three = WorkItem(ref=FORCED, id=3, repository=GADGETS, spec_dir="specs/3")
    received(store, FORCED, "issues", "labeled", "d-enrol-3", "alice")
    runtime.enrol(three, config(seeded, GADGETS, 3), InboundEvent(
        "issues.labeled", "d-enrol-3", actor="alice", actor_type="User", label="the-loop"))
    runtime.force(three, config(seeded, GADGETS, 3), "design", FORCE_REASON, operator="ops")
    inbox = DeliveryQueue(client, queue_name=queue, prefix=prefix)
    body = json.dumps({"action": "created", "comment": {"id": 5, "body": COMMENT_TEXT},
                       "issue": {"number": 3}, "repository": {"full_name": GADGETS}})
    inbox.put(DeliveryRecord(delivery_id=PARKED, event="issue_comment", action="created",
                             received_at=time.time(), installation_id=None,
                             repository=GADGETS, work_item=FORCED, body=body.encode()))
    settings = WorkerSettings(prefix=prefix, queue=queue)
    Deliveries(client, settings, store).park(
        PARKED, "issue_comment", FORCED, "github comment: 502 from GitHub, retries used up", 5)
    return seeded


def turn_order(ref: str, node: str, number: int) -> TurnOrder:
    """A turn order of ``ref`` (for tests that add a turn record by hand)."""
    return TurnOrder(id=f"{ref}/{node}/1/turn/{number}", ref=ref, node=node, visit=1,
                     number=number, max_turns=5, session_id="s-" + node)
