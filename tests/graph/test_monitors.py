"""Monitors of waiting gates (graph/monitors.py) and their reminders, on a controlled
clock: healthy / stale / skew / unknown, and exactly one reminder per freshness period
through ``notify``."""

from __future__ import annotations

import dataclasses

from foundation.config.repository import Collaborators
from graph.model import InboundEvent
from graph.monitors import (
    HEALTHY,
    REMINDER,
    SKEW,
    STALE,
    UNKNOWN,
    forget_reminders,
    monitor,
    reminder_due_at,
    status_of,
)
from graph.runtime import Runtime
from graph.state import WorkItemState
from integrations.slack import _SlackBase
from tests.graph.test_runtime import REF, REPO, REQUIREMENTS, setup

HOUR = 3600.0
SLACK_PEOPLE = ("version: 1\nroles:\n  approver:\n"
                "    - {name: Alice, github: alice, slack: U1}\n")


class Slack(_SlackBase):
    """The Slack port, recording what it posts."""

    transport = "test"

    def __init__(self):
        self.sent = []

    def post_message(self, *, channel, text, blocks=None):
        self.sent.append((channel, text))
        return {"ok": True, "ts": str(len(self.sent)), "channel": channel}


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def test_the_four_statuses():
    assert status_of(None, 100.0, 10.0) == UNKNOWN
    assert status_of(95.0, 100.0, 10.0) == HEALTHY
    assert status_of(90.0, 100.0, 10.0) == HEALTHY  # at most freshness old
    assert status_of(89.0, 100.0, 10.0) == STALE
    assert status_of(104.0, 100.0, 10.0) == HEALTHY  # within the skew tolerance
    assert status_of(106.0, 100.0, 10.0) == SKEW


def waiting_at_the_gate(clock):
    gh, config, item, rt = setup()
    slack = Slack()
    config = dataclasses.replace(config, integrations={**config.integrations, "slack": slack},
                                 collaborators=Collaborators.parse(SLACK_PEOPLE))
    rt = Runtime(rt.graph, rt.store, clock=clock)
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    state = rt.store.load(REF)
    assert (state.current_node, state.status) == ("requirements-approval", "waiting")
    return config, item, rt, slack


def test_a_stale_gate_is_reminded_exactly_once_per_period():
    clock = Clock(0.0)
    config, item, rt, slack = waiting_at_the_gate(clock)
    entered = rt.store.load(REF).visit_started
    clock.now = entered
    pending = len(slack.sent)  # the entry chain's own notification
    assert monitor(rt.store.load(REF), rt.graph, clock.now).status == HEALTHY
    assert rt.remind(item, config) is None
    clock.now = entered + 72 * HOUR + 1
    assert monitor(rt.store.load(REF), rt.graph, clock.now).status == STALE
    assert rt.remind(item, config) == 1
    for _ in range(3):  # the same period again: nothing more, however often it is asked
        assert rt.remind(item, config) is None
    clock.now = entered + 100 * HOUR
    assert rt.remind(item, config) is None
    clock.now = entered + 144 * HOUR + 1  # the second period
    event = InboundEvent(REMINDER, "monitor-1", actor="the-loop[bot]", actor_type="Bot")
    rt.advance(item, config, event)  # the sweep's delivery does the same
    rt.advance(item, config, event)
    reminders = slack.sent[pending:]
    assert [channel for channel, _ in reminders] == ["U1", "U1"]
    assert all("reminder" in text for _, text in reminders)
    state = rt.store.load(REF)
    assert state.reminders == {"requirements-approval/1": 2}
    assert [e.data["period"] for e in rt.store.events(REF) if e.type == "monitor.reminded"] \
        == [1, 2]
    assert state.status == "waiting"  # a reminder decides nothing


def test_a_signal_from_the_future_is_skew_and_never_reminded():
    clock = Clock(0.0)
    config, item, rt, slack = waiting_at_the_gate(clock)
    clock.now = rt.store.load(REF).visit_started - 60
    assert monitor(rt.store.load(REF), rt.graph, clock.now).status == SKEW
    assert rt.remind(item, config) is None


def test_no_signal_is_unknown_and_a_node_without_freshness_has_no_monitor():
    clock = Clock(0.0)
    config, item, rt, slack = waiting_at_the_gate(clock)
    state = rt.store.load(REF)
    state.visit_started = 0.0
    assert monitor(state, rt.graph, 1e12).status == UNKNOWN
    state.current_node = "design"
    assert monitor(state, rt.graph, 1e12) is None


def test_entering_a_gate_again_forgets_the_reminders_of_its_earlier_visits():
    state = WorkItemState(REF, "digest", "requirements-approval")
    state.reminders = {"requirements-approval/1": 2, "requirements-approval/2": 1,
                       "design-approval/1": 1, "requirements-approval-x/1": 1}
    forget_reminders(state, "requirements-approval")
    assert state.reminders == {"design-approval/1": 1, "requirements-approval-x/1": 1}


def test_the_next_reminder_falls_due_at_the_end_of_the_first_period_not_reminded():
    clock = Clock(0.0)
    config, item, rt, slack = waiting_at_the_gate(clock)
    state = rt.store.load(REF)
    entered = state.visit_started
    assert reminder_due_at(state, rt.graph) == entered + 72 * HOUR
    assert reminder_due_at(state, rt.graph, reminded=1) == entered + 144 * HOUR
    state.reminders = {f"requirements-approval/{state.visit}": 2}
    assert reminder_due_at(state, rt.graph) == entered + 216 * HOUR
    state.visit_started = 0.0  # no signal
    assert reminder_due_at(state, rt.graph) is None
    state.visit_started, state.status = entered, "done"  # not waiting: no monitor
    assert reminder_due_at(state, rt.graph) is None
