"""An integration's refusal is visible where a person looks: the worker's log (with the
provider's reason), the event log (``hook.notes``), the status comment's notes, and the
outbox (``failed``, not asked again on a redelivery)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import responses

from graph.context import HookConfig
from graph.model import WorkItem
from graph.ports import IntegrationError
from graph.runtime import Runtime
from graph.state import MemoryStateStore
from graph.status import status_effect
from integrations.jira import JiraApi
from integrations.slack import SlackSdk
from tests.graph.test_effects import Files
from tests.integrations import loopback
from tests.workers.test_realities import GRAPH, PEOPLE, REF1, REPO, REQUIREMENTS
from the_loop.sandbox.fakegithub.state import FakeGitHub

JIRA = "https://jira.example.com"
ISSUE = f"{JIRA}/rest/api/3/issue/ABC-125"
TOKEN = "jira-secret-789"


@pytest.fixture
def rs():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


def enrol(rs: responses.RequestsMock) -> tuple[Runtime, MemoryStateStore, FakeGitHub, WorkItem,
                                               HookConfig]:
    gh = FakeGitHub()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    store = MemoryStateStore()
    jira = JiraApi(JIRA, TOKEN, user="bot@example.com", api_version=3)
    harness = {"ticketing": {"system": "jira",
                             "jira": {"transitions": {"requirements-approval": "In Review"}}}}
    config = HookConfig(collaborators=PEOPLE, integrations={"github": gh, "jira": jira},
                        files=Files(gh), harness=harness)
    item = WorkItem(ref=REF1, id=1, repository=REPO, spec_dir="specs/1", tickets=("ABC-125",))
    runtime = Runtime(GRAPH, store)
    runtime.enrol(item, config, None)
    return runtime, store, gh, item, config


def refusing(rs: responses.RequestsMock) -> None:
    rs.get(f"{ISSUE}?fields=labels", json={"fields": {"labels": []}})
    rs.put(ISSUE, status=400, json={
        "errorMessages": ["Field 'labels'\x1b[31m cannot be set."],
        "errors": {"labels": "Field 'labels' cannot be set. It is not on the screen."}})
    rs.get(f"{ISSUE}/transitions", json={"transitions": [
        {"id": "11", "name": "Start work", "to": {"name": "In Progress"}}]})


def test_a_refused_jira_call_is_logged_with_its_reason_noted_and_failed_in_the_outbox(
        rs: responses.RequestsMock, caplog: pytest.LogCaptureFixture) -> None:
    """Given a work item linked to ABC-125 and a Jira that refuses the label (400 with its
    ``errors``) and has no transition to the configured status
    When the runtime enrols it (set-phase-label runs)
    Then the log, the event log and the status comment carry Jira's reason and the
    available transition, and both effects are ``failed`` in the outbox."""
    refusing(rs)
    with caplog.at_level(logging.ERROR, logger="foundation.hooks.jira"):
        _, store, gh, _, _ = enrol(rs)
    assert "reason=Field 'labels' [31m cannot be set." in caplog.text
    assert "It is not on the screen" in caplog.text
    assert "status=400" in caplog.text and "\x1b" not in caplog.text
    assert "available: 'Start work'" in caplog.text and TOKEN not in caplog.text
    notes = [e.data for e in store.events(REF1) if e.type == "hook.notes"]
    assert any("It is not on the screen" in n["note"] for n in notes), notes
    assert any("available: 'Start work'" in n["note"] for n in notes), notes
    state = store.load(REF1)
    assert state is not None
    status = [c["body"] for c in gh.comments(REPO, 1) if "available: 'Start work'" in c["body"]]
    assert status and "It is not on the screen" in status[0]
    jira_effects = [e for e in state.effects.values() if e["integration"] == "jira"]
    assert sorted(e["op"] for e in jira_effects) == ["add-label", "transition-issue"]
    assert {e["status"] for e in jira_effects} == {"failed"}
    assert all(e["refused"] for e in jira_effects)
    assert state.effects[status_effect(REF1)]["status"] == "done"


def test_a_redelivery_does_not_retry_a_refused_effect(rs: responses.RequestsMock) -> None:
    """Given an enrolment whose Jira calls were refused
    When the node is settled again (a redelivery of the same visit)
    Then Jira is not asked again and the effects stay ``failed``."""
    refusing(rs)
    runtime, store, _, item, config = enrol(rs)
    asked = len(rs.calls)
    state = store.load(REF1)
    assert state is not None
    assert runtime.settle(state, item, config) is None  # what a redelivery settles again
    assert len(rs.calls) == asked
    assert {e["status"] for e in state.effects.values()
            if e["integration"] == "jira"} == {"failed"}


def test_a_jira_400_comment_and_a_slack_refusal_carry_the_providers_reason(
        rs: responses.RequestsMock) -> None:
    rs.post(f"{ISSUE}/comment", status=400, json={
        "errorMessages": ["Comment body can not be empty!"], "errors": {}})
    with pytest.raises(IntegrationError) as info:
        JiraApi(JIRA, TOKEN, user="bot@example.com", api_version=3).call(
            "add-comment", issue="ABC-125", body="x")
    assert info.value.reason == "Comment body can not be empty!"
    assert "status=400" in info.value.summary("ABC-125")
    with loopback.serve() as server:
        server.answer(200, {"ok": False, "error": "channel_not_found"})
        with pytest.raises(IntegrationError) as slack:
            SlackSdk("xoxb-x", base_url=server.url + "/api/", max_retries=0).call(
                "post-message", channel="C1", text="hi")
    assert slack.value.reason == "channel_not_found"
    line: Any = slack.value.summary("C1")
    assert "reason=channel_not_found" in line and "xoxb" not in line


def test_githubs_message_is_the_reason_bounded_and_free_of_control_characters() -> None:
    from integrations.github_ops.errors import error_reason, http_error

    body = {"message": "Validation Failed\r\n\x1b[2J" + "x" * 500}
    exc = http_error("add-label", "acme/widgets#1", 422, {"Authorization": "token ghs_x"},
                     reason=error_reason(body))
    assert exc.reason.startswith("Validation Failed [2J") and len(exc.reason) <= 300
    assert "\r" not in exc.reason and "\x1b" not in exc.reason
    assert "ghs_x" not in exc.summary("acme/widgets#1")
