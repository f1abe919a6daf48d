"""The loop of an agent node at the runtime level: order a turn -> the turn's report ->
exit chain -> a block's messages become the same session's next turn -> pass -> gate.

The runner is replaced by a recording :class:`graph.work.AgentWork` whose turns the test
performs itself (writing the artifacts into the fake GitHub, then reporting), so every
assertion is about what the runtime decided and ordered.
"""

import dataclasses

import pytest

from graph.model import InboundEvent
from graph.work import TURN_COMPLETED, TurnEnded, TurnOrder
from tests.graph.test_runtime import REF, REPO, comment, setup

PROBLEM_ONLY = "# Spec\n\n## Problem\n\nx\n"
COMPLETE = "# Spec\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"


class Runner:
    """Records the orders placed (the port's contract: an id ordered twice runs once)."""

    def __init__(self, max_turns=5, cost_cap_usd=None):
        self.max_turns = max_turns
        self.cost_cap_usd = cost_cap_usd
        self.orders: list[TurnOrder] = []
        self.placed = 0

    def order(self, order):
        self.placed += 1
        if order.id not in {o.id for o in self.orders}:
            self.orders.append(order)


def report(order, status="completed", *, cost=0.1, seconds=90.0, harness_session=None,
           delivery=None, session_id=None):
    ended = TurnEnded(id=order.id, status=status, session_id=session_id or order.session_id,
                      harness_session=harness_session or f"h-{order.number}",
                      head_sha="a" * 40, cost_usd=cost, seconds=seconds,
                      detail="" if status == "completed" else "ran past 1800 s")
    return InboundEvent(TURN_COMPLETED, delivery or f"turn:{order.id}", actor="the-loop[bot]",
                        actor_type="Bot", turn=ended.to_dict())


def agent_setup(**runner):
    gh, config, item, rt = setup()
    work = Runner(**runner)
    return gh, dataclasses.replace(config, work=work), item, rt, work


def test_entering_an_agent_node_orders_a_turn_and_runs_no_exit_chain():
    gh, config, item, rt, work = agent_setup()
    r = rt.enrol(item, config, None)
    assert (r.status, r.node) == ("working", "requirements")
    assert [c.boundary for c in r.chains] == ["entry"]
    [order] = work.orders
    assert (order.node, order.number, order.resume, order.command) == (
        "requirements", 1, None, "create-requirements")
    assert order.artifacts == ("specs/1/requirements.md",)
    assert order.checks[0] == {"hook": "validate-artifacts",
                               "with": {"sections": ["Problem", "Requirements"]}}
    state = rt.store.load(REF)
    assert state.turn["id"] == order.id == f"{REF}/requirements/1/turn/1"
    assert state.sessions["requirements"]["id"] == order.session_id
    assert len(order.session_id) == 36 and order.session_id.count("-") == 4
    status = gh.comments(REPO, 1)[-1]["body"]
    assert "Agent working: turn 1 of 5, 0 min, $0.00." in status


def test_a_block_resumes_the_same_session_with_its_messages_then_a_pass_reaches_the_gate():
    gh, config, item, rt, work = agent_setup()
    rt.enrol(item, config, None)
    first = work.orders[0]
    gh.add_file(REPO, "specs/1/requirements.md", PROBLEM_ONLY)
    r = rt.advance(item, config, report(first, harness_session="claude-1"))
    assert (r.status, r.node) == ("working", "requirements")
    second = work.orders[1]
    assert (second.number, second.session_id, second.resume) == (2, first.session_id,
                                                                  "claude-1")
    block = second.feedback["block"]
    assert block["hook"] == "validate-artifacts"
    assert [m["code"] for m in block["messages"]] == ["section-missing"]
    assert "'Requirements'" in block["messages"][0]["text"]
    status = gh.comments(REPO, 1)[-1]["body"]
    assert "Agent working: turn 2 of 5, 2 min, $0.10." in status
    assert "The agent's next turn repairs what `validate-artifacts` needs" in status

    gh.add_file(REPO, "specs/1/requirements.md", COMPLETE)
    r = rt.advance(item, config, report(second, cost=0.31, harness_session="claude-2"))
    assert (r.status, r.node) == ("waiting", "requirements-approval")
    state = rt.store.load(REF)
    assert state.turn is None
    assert state.spend["cost_usd"] == pytest.approx(0.41)
    assert state.spend["turns"] == 2
    assert state.sessions["requirements-approval"]["resume"] == "claude-2"  # inherited
    assert len(work.orders) == 2


def test_events_while_a_turn_is_out_do_not_run_the_exit_chain_and_reorders_run_once():
    gh, config, item, rt, work = agent_setup()
    rt.enrol(item, config, None)
    gh.add_file(REPO, "specs/1/requirements.md", COMPLETE)
    r = rt.advance(item, config, comment("alice", "/approve"))
    assert (r.status, r.node) == ("working", "requirements")
    assert r.chains == []
    assert len(work.orders) == 1 and work.placed == 2
    # A report of some other turn (stale, forged id) is not this turn's end either.
    other = dataclasses.replace(work.orders[0], id=f"{REF}/requirements/1/turn/9")
    r = rt.advance(item, config, report(other))
    assert (r.status, r.node) == ("working", "requirements")


def test_the_same_report_delivered_twice_counts_once():
    gh, config, item, rt, work = agent_setup()
    rt.enrol(item, config, None)
    gh.add_file(REPO, "specs/1/requirements.md", PROBLEM_ONLY)
    event = report(work.orders[0])
    rt.advance(item, config, event)
    rt.advance(item, config, event)
    state = rt.store.load(REF)
    assert state.spend["turns"] == 1 and len(work.orders) == 2


def test_a_failed_turn_is_a_block_and_the_next_turn_resumes():
    gh, config, item, rt, work = agent_setup()
    rt.enrol(item, config, None)
    r = rt.advance(item, config, report(work.orders[0], status="timeout"))
    assert (r.status, r.node) == ("working", "requirements")
    feedback = work.orders[1].feedback["block"]
    assert feedback["hook"] == "harness"
    assert feedback["messages"][0]["code"] == "turn-timeout"


def test_a_cancelled_turn_escalates_and_orders_nothing_more():
    gh, config, item, rt, work = agent_setup()
    rt.enrol(item, config, None)
    r = rt.advance(item, config, report(work.orders[0], status="cancelled"))
    assert (r.status, r.node) == ("escalated", "requirements")
    assert len(work.orders) == 1


def test_the_turn_limit_escalates_instead_of_ordering_more():
    gh, config, item, rt, work = agent_setup(max_turns=2)
    rt.enrol(item, config, None)
    gh.add_file(REPO, "specs/1/requirements.md", "# nothing\n")
    rt.advance(item, config, report(work.orders[0]))
    gh.add_file(REPO, "specs/1/requirements.md", PROBLEM_ONLY)  # a different block
    r = rt.advance(item, config, report(work.orders[1]))
    assert (r.status, r.node) == ("escalated", "requirements")
    assert len(work.orders) == 2
    state = rt.store.load(REF)
    assert state.escalated["reason"] == "node requirements used its 2 agent turns"
    # Escalated, the node is evaluated on every event, as when a person does the work.
    gh.add_file(REPO, "specs/1/requirements.md", COMPLETE)
    r = rt.advance(item, config, comment("bob", "pushed a fix", delivery="d-fix"))
    assert (r.status, r.node) == ("waiting", "requirements-approval")


def test_the_cost_cap_escalates_instead_of_spending_more():
    gh, config, item, rt, work = agent_setup(cost_cap_usd=0.5)
    rt.enrol(item, config, None)
    gh.add_file(REPO, "specs/1/requirements.md", PROBLEM_ONLY)
    r = rt.advance(item, config, report(work.orders[0], cost=0.6))
    assert (r.status, r.node) == ("escalated", "requirements")
    assert len(work.orders) == 1
    assert "cost cap of $0.50" in rt.store.load(REF).escalated["reason"]


def test_changes_requested_resumes_the_producing_session_with_a_reference_to_the_review():
    gh, config, item, rt, work = agent_setup()
    rt.enrol(item, config, None)
    gh.add_file(REPO, "specs/1/requirements.md", COMPLETE)
    rt.advance(item, config, report(work.orders[0], harness_session="claude-1"))
    r = rt.advance(item, config, comment("alice", "/request-changes", delivery="d-rc"))
    assert (r.status, r.node) == ("working", "requirements")
    again = work.orders[-1]
    assert (again.visit, again.number, again.resume) == (2, 1, "claude-1")
    assert again.session_id == work.orders[0].session_id
    review = again.feedback["feedback"]
    assert (review["kind"], review["actor"], review["gate"]) == (
        "changes-requested", "alice", "requirements-approval")
    assert "body" not in review and "/request-changes" not in str(again.to_dict())


def test_without_a_harness_an_agent_node_waits_for_pushed_artifacts_as_before():
    gh, config, item, rt = setup()
    r = rt.enrol(item, config, None)
    assert (r.status, r.node) == ("blocked", "requirements")


def test_orders_and_reports_round_trip():
    gh, config, item, rt, work = agent_setup()
    rt.enrol(item, config, None)
    order = work.orders[0]
    assert TurnOrder.from_dict(order.to_dict()) == order
    ended = TurnEnded.from_dict(report(order).turn)
    assert ended.ok and ended.head_sha == "a" * 40


def test_a_cost_cap_escalation_on_entering_the_node_is_saved_once():
    gh, config, item, rt, work = agent_setup(cost_cap_usd=0.0)  # spent 0 >= cap 0
    # No status comment to publish (a local run): nothing else saves the state.
    config = dataclasses.replace(config, integrations={})
    r = rt.enrol(item, config, None)
    assert (r.status, r.node) == ("escalated", "requirements")
    state = rt.store.load(REF)
    assert state.status == "escalated" and state.escalated is not None
    assert "cost cap of $0.00" in state.escalated["reason"]
    rt.advance(item, config, comment("bob", "any news?", delivery="d-later"))
    logged = [e for e in rt.store.events(REF) if e.type == "work-item.escalated"]
    assert len(logged) == 1
    assert work.orders == []
