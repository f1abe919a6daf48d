"""The specification's promises about repair, escalation, sessions, hook timeouts and
forced moves, each observed on the default graph (or a small one) with the fake GitHub:

1. changes-requested means repair (with the harness: the next turn is told, no second
   review request until the artifact changed);
2. "the same block twice" counts repair attempts, not unrelated events;
3. ``session: inherit`` follows the graph, whatever path the item took;
4. hook timeouts per hook in the graph; a failing Slack records and continues;
7. the forced-move comment carries the operator's reason.
"""

from __future__ import annotations

import dataclasses
import http.server
import threading
import time
from pathlib import Path

import pytest

from foundation.config.repository import Collaborators
from foundation.hooks import REGISTRY
from graph.compile import GraphError, compile_graph
from graph.context import HookConfig
from graph.markers import find_effect
from graph.model import HookResult, WorkItem
from graph.registry import HookRegistry
from graph.runtime import Runtime
from graph.state import MemoryStateStore
from integrations.slack import SlackWebhook
from tests.graph.test_runtime import REF, REPO, REQUIREMENTS, comment, review_requests, setup
from tests.graph.test_work import COMPLETE, PROBLEM_ONLY, agent_setup, report
from the_loop.graphs import load_graph

# -- 1. changes-requested means repair -----------------------------------------------------


def test_a_changes_requested_outcome_returns_to_the_producing_node_in_the_same_harness_session():
    """Given requirements written in harness session S and a gate that requests changes
    When the agent's next turn (in S) leaves requirements.md unchanged
    Then the node does not pass: the next turn gets a block saying so, and no second review
    request is posted; a turn that changes the artifact reaches the gate again."""
    gh, config, item, rt, work = agent_setup()
    rt.enrol(item, config, None)
    gh.add_file(REPO, "specs/1/requirements.md", COMPLETE)
    rt.advance(item, config, report(work.orders[0], harness_session="claude-1"))
    assert len(review_requests(gh)) == 1
    r = rt.advance(item, config, comment("alice", "/request-changes", delivery="d-rc"))
    assert (r.status, r.node) == ("working", "requirements")
    repair = work.orders[-1]
    assert (repair.session_id, repair.resume) == (work.orders[0].session_id, "claude-1")
    assert repair.feedback["feedback"]["kind"] == "changes-requested"

    r = rt.advance(item, config, report(repair, harness_session="claude-2"))  # no change
    assert (r.status, r.node) == ("working", "requirements")
    again = work.orders[-1]
    assert again.number == repair.number + 1 and again.resume == "claude-2"
    assert again.feedback["block"]["messages"][0]["code"] == "unrepaired"
    assert again.feedback["feedback"]["kind"] == "changes-requested"  # kept until it passes
    assert len(review_requests(gh)) == 1

    gh.add_file(REPO, "specs/1/requirements.md", COMPLETE + "\nClarified as asked.\n")
    r = rt.advance(item, config, report(again, harness_session="claude-3"))
    assert (r.status, r.node) == ("waiting", "requirements-approval")
    assert len(review_requests(gh)) == 2
    assert "requirements" not in rt.store.load(REF).next_input


def test_a_rejected_pull_request_head_must_change_before_the_node_passes_again():
    """A node that produces none of the reviewed artifacts (implementation) repairs by a
    new pull request head."""
    reg = HookRegistry()
    reg.hook("ok")(lambda ctx: HookResult.passed("ok"))
    reg.hook("decide", outcomes={"changes-requested", "approved"}, forward=("approved",))(
        lambda ctx: HookResult.passed("decide", outcome="changes-requested")
        if ctx.event is not None else HookResult.waiting("decide"))
    graph = compile_graph("""
nodes:
  - {id: build, actor: agent, exit: [ok]}
  - {id: gate, actor: human, exit: [decide]}
  - {id: end, actor: system}
edges:
  - {from: build, to: gate, on: pass}
  - {from: gate, to: build, on: changes-requested}
  - {from: gate, to: end, on: approved}
""", source="t.yaml", registry=reg)
    rt = Runtime(graph, MemoryStateStore())
    item = WorkItem("local:1")
    head_a = HookConfig(head_sha="a" * 40)
    assert rt.enrol(item, head_a, None).node == "gate"
    r = rt.advance(item, head_a, comment("alice", "no"))
    assert (r.status, r.node) == ("waiting", "build")
    assert "pull request head aaaaaaaaaaaa" in r.messages[0].text
    r = rt.advance(item, HookConfig(head_sha="b" * 40), None)
    assert (r.status, r.node) == ("waiting", "gate")


# -- 2. escalation counts repair attempts ----------------------------------------------------


def test_the_same_block_twice_escalates_only_when_a_repair_attempt_came_between():
    """Given requirements.md missing a section
    When unrelated events re-evaluate the node, the same finding each time
    Then it stays blocked and counts one attempt; a push that changes the artifact but
    not the finding escalates."""
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", PROBLEM_ONLY)
    assert rt.enrol(item, config, None).status == "blocked"
    for n in range(3):
        r = rt.advance(item, config, comment("bob", "ping", delivery=f"d-{n}"))
        assert r.status == "blocked"
    r = rt.advance(item, config, None)  # a second `the-loop run`, nothing changed
    assert r.status == "blocked"
    state = rt.store.load(REF)
    assert state.attempts["requirements"] == 1 and state.escalated is None
    gh.add_file(REPO, "specs/1/requirements.md", PROBLEM_ONLY + "\nMore words.\n")
    r = rt.advance(item, config, None)
    assert r.status == "escalated"
    assert "twice with the same finding" in rt.store.load(REF).escalated["reason"]


def test_two_harness_turns_with_the_same_finding_escalate():
    gh, config, item, rt, work = agent_setup()
    rt.enrol(item, config, None)
    gh.add_file(REPO, "specs/1/requirements.md", PROBLEM_ONLY)
    assert rt.advance(item, config, report(work.orders[0])).status == "working"
    r = rt.advance(item, config, report(work.orders[1]))  # the turn fixed nothing
    assert r.status == "escalated"


# -- 3. session: inherit follows the graph -------------------------------------------------


def test_a_forced_move_to_a_gate_inherits_the_session_of_the_node_producing_its_artifacts():
    """Given requirements and design each bound to their own session
    When an operator forces requirements -> design-approval
    Then the gate inherits design's session (design produces design.md), not the
    requirements session the item came from; with none bound, a fresh one seeded with
    the artifacts."""
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    rt.advance(item, config, comment("alice", "/approve"))  # -> design (its session)
    state = rt.store.load(REF)
    design_session = state.sessions["design"]["id"]
    rt.force(item, config, "requirements", "redo requirements")
    state = rt.store.load(REF)
    assert state.session["id"] == state.sessions["requirements"]["id"] != design_session
    rt.force(item, config, "design-approval", "review the design now")
    state = rt.store.load(REF)
    assert state.session["id"] == design_session

    state.sessions.pop("design")
    state.sessions.pop("design-approval")
    rt.store.save(state)
    rt.force(item, config, "requirements", "again")
    rt.force(item, config, "design-approval", "fresh")
    state = rt.store.load(REF)
    assert state.session["id"] not in (design_session, state.sessions["requirements"]["id"])
    assert state.session["seeded_with"] == ["design.md"]


# -- 4. hook timeouts per hook -----------------------------------------------------------------


def test_a_hook_timeout_is_set_per_call_in_the_graph_and_validated_at_load():
    reg = HookRegistry()
    reg.hook("slow", timeout=30)(lambda ctx: (time.sleep(1), HookResult.passed("slow"))[1])
    graph = compile_graph("nodes:\n  - {id: n, exit: [{hook: slow, timeout: 0.1}]}\n"
                          "  - {id: end}\nedges:\n  - {from: n, to: end, on: pass}\n",
                          source="t.yaml", registry=reg)
    assert graph.node("n").exit[0].limit == 0.1
    rt = Runtime(graph, MemoryStateStore())
    started = time.monotonic()
    r = rt.enrol(WorkItem("local:1"), HookConfig(), None)
    assert time.monotonic() - started < 0.9
    # A validating hook past its timeout blocks (retriable).
    assert r.status == "blocked" and r.messages[0].code == "hook-timeout"
    assert "timeout of 0.1 s" in r.messages[0].text
    for bad, why in (("0", "must be more than 0"), ("-3", "must be more than 0"),
                     ("soon", "must be a number of seconds"), ("7200", "at most 3600")):
        with pytest.raises(GraphError, match=why) as err:
            compile_graph(f"nodes:\n  - {{id: n, exit: [{{hook: slow, timeout: {bad}}}]}}\n",
                          source="t.yaml", registry=reg)
        assert "t.yaml: node 'n'" in str(err.value) and "timeout" in str(err.value)
    # The call's timeout is part of the graph's digest.
    other = compile_graph("nodes:\n  - {id: n, exit: [{hook: slow, timeout: 5}]}\n",
                          source="t.yaml", registry=reg)
    assert other.digest != graph.digest


class SlowSlack(http.server.BaseHTTPRequestHandler):
    """An incoming-webhook endpoint that answers after ``delay`` seconds."""

    delay = 3.0
    hits: list[float] = []

    def do_POST(self):  # noqa: N802  (http.server's name)
        self.hits.append(time.monotonic())
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(self.delay)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_slack():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowSlack)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    SlowSlack.hits = []
    yield f"http://127.0.0.1:{server.server_address[1]}/services/T/B/x"
    server.shutdown()
    server.server_close()


def test_a_slack_webhook_failure_records_and_continues_without_wedging_the_graph(slow_slack):
    """Given a graph whose gate notifies with `{hook: notify, timeout: 0.5}` and a Slack
    webhook that answers after 3 s
    When the work item reaches the gate
    Then notify's timeout is recorded (event log `notification.failed`), the entry chain
    goes on (the review request is posted) and the gate waits for its decision."""
    graph_text = Path(load_graph().source).read_text(encoding="utf-8").replace(
        "      - notify\n", "      - {hook: notify, timeout: 0.5}\n")
    graph = compile_graph(graph_text, source="pdlc.yaml", registry=REGISTRY)
    gh, config, item, _ = setup()
    collaborators = Collaborators.parse(
        "version: 1\nroles:\n  approver:\n    - {name: Alice, github: alice, slack: U012AB3CD}\n")
    config = dataclasses.replace(config, collaborators=collaborators, integrations={
        "github": gh, "slack": SlackWebhook(slow_slack, timeout=10, max_retries=0)})
    rt = Runtime(graph, MemoryStateStore())
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    started = time.monotonic()
    r = rt.enrol(item, config, None)
    elapsed = time.monotonic() - started
    assert (r.status, r.node) == ("waiting", "requirements-approval")
    assert SlowSlack.hits, "notify reached the Slack endpoint"
    assert elapsed < 2.5, f"the entry chain waited {elapsed:.1f} s for Slack"
    assert len(review_requests(gh)) == 1
    failed = [e for e in rt.store.events(REF) if e.type == "notification.failed"]
    assert failed and failed[0].data["channel"] == "notify"
    assert failed[0].data["error"] == "timeout"
    state = rt.store.load(REF)
    notify = next(x for x in state.results["requirements-approval"]["entry"]
                  if x["hook"] == "notify")
    assert notify["status"] == "pass" and notify["data"]["integration_failed"] == "timeout"


# -- 7. the forced-move comment carries the reason ------------------------------------------


def test_the_forced_move_comment_carries_the_operators_reason():
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    reason = "hotfix: @bob approved on a call\n<!-- the-loop effect=x/y/1/z -->"
    rt.force(item, config, "design", reason)
    [forced] = [c for c in gh.comments(REPO, 1)
                if "/forced/" in (find_effect(c["body"]) or "")]
    body = forced["body"]
    assert "an operator forced this work item from `requirements-approval` to `design`" in body
    assert "The operator's reason:" in body
    assert "> hotfix: @\u200bbob approved on a call" in body  # quoted, no mention
    assert "effect=x/y/1/z" not in body
    assert find_effect(body).endswith("/forced/1")
