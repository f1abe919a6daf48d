"""The specification's runtime contract: error handling rows, gates, sessions, feedback,
force, recompute. Integration scenarios carry Gherkin-style docstrings."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from foundation.config.repository import Collaborators
from foundation.hooks.review import approved_in, entries
from graph.compile import compile_graph
from graph.context import HookConfig, NoCI
from graph.markers import find_effect
from graph.model import HookResult, InboundEvent, Message, WorkItem
from graph.registry import HookRegistry
from graph.runtime import ForceError, Runtime
from graph.state import MemoryStateStore, Past
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.stores import FileStateStore, LocalFiles

REPO = "Codertocat/Hello-World"
REF = f"github:{REPO}#1"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Alice, github: alice}\n"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"
DESIGN = "# D\n\n## Overview\n\nx\n\n## Security design\n\ny\n"


def comment(actor, body, delivery="d", kind="issue_comment.created", comment_id=None):
    # every comment is a new one (its own id), as on GitHub; 77 when asked for
    return InboundEvent(kind, delivery, actor=actor, actor_type="User", body=body,
                        comment_id=comment_id or (77 if delivery == "d9" else
                                                  1000 + len(delivery) + sum(map(ord, delivery))))


# -- a tiny graph with controllable hooks ------------------------------------------------


def small_graph(reg: HookRegistry, exit_hook: str, attempts: int = 3):
    text = f"""
name: t
nodes:
  - {{id: work, actor: agent, attempts: {attempts}, exit: [{exit_hook}]}}
  - {{id: end, actor: system}}
edges:
  - {{from: work, to: end, on: pass}}
"""
    return compile_graph(text, source="t.yaml", registry=reg)


def test_hook_timeout_is_a_retriable_block():
    """Given an exit hook that runs past its timeout
    When the node's exit chain runs
    Then the chain blocks, retriable, naming the timeout, and the attempt is counted."""
    reg = HookRegistry()

    @reg.hook("slow", timeout=0.05)
    def slow(ctx):
        time.sleep(1)
        return HookResult.passed("slow")

    rt = Runtime(small_graph(reg, "slow"), MemoryStateStore())
    result = rt.enrol(WorkItem("local:1"), HookConfig(), None)
    assert result.status == "blocked"
    assert result.messages[0].code == "hook-timeout"
    assert rt.store.load("local:1").attempts["work"] == 1


def test_blocks_past_the_node_attempts_escalate_to_a_human():
    reg = HookRegistry()
    counter = iter(range(100))

    @reg.hook("flaky")
    def flaky(ctx):
        return HookResult.blocked("flaky", Message(f"finding {next(counter)}"))

    rt = Runtime(small_graph(reg, "flaky", attempts=2), MemoryStateStore())
    item = WorkItem("local:1")
    assert rt.enrol(item, HookConfig(head_sha="a" * 40), None).status == "blocked"
    # A push (a new head) between the blocks: a repair attempt.
    second = rt.advance(item, HookConfig(head_sha="b" * 40), None)
    assert second.status == "escalated"
    state = rt.store.load("local:1")
    assert "blocked 2 times" in state.escalated["reason"]
    assert [e.type for e in rt.store.events("local:1")].count("work-item.escalated") == 1


def test_same_block_message_twice_escalates():
    reg = HookRegistry()
    reg.hook("stuck")(lambda ctx: HookResult.blocked("stuck", Message("same thing")))
    rt = Runtime(small_graph(reg, "stuck", attempts=10), MemoryStateStore())
    item = WorkItem("local:1")
    assert rt.enrol(item, HookConfig(head_sha="a" * 40), None).status == "blocked"
    assert rt.advance(item, HookConfig(head_sha="b" * 40), None).status == "escalated"
    assert "twice with the same finding" in rt.store.load("local:1").escalated["reason"]


def test_raising_hook_escalates_and_never_passes():
    reg = HookRegistry()

    @reg.hook("boom")
    def boom(ctx):
        raise KeyError("x")

    rt = Runtime(small_graph(reg, "boom"), MemoryStateStore())
    result = rt.enrol(WorkItem("local:1"), HookConfig(), None)
    assert result.status == "escalated" and result.node == "work"


def test_wait_parks_and_the_exit_chain_reruns_on_the_next_event():
    reg = HookRegistry()
    seen = []

    @reg.hook("gate")
    def gate(ctx):
        seen.append(ctx.event.delivery_id if ctx.event else None)
        if ctx.event and ctx.event.body == "go":
            return HookResult.passed("gate")
        return HookResult.waiting("gate", Message("not yet"))

    rt = Runtime(small_graph(reg, "gate"), MemoryStateStore())
    item = WorkItem("local:1")
    assert rt.enrol(item, HookConfig(), None).status == "waiting"
    assert rt.advance(item, HookConfig(), comment("x", "hm", "d1")).status == "waiting"
    assert rt.advance(item, HookConfig(), comment("x", "go", "d2")).status == "done"
    assert seen == [None, "d1", "d2"]


# -- the default graph over a fake GitHub ---------------------------------------------------


class Files:
    def __init__(self, gh):
        self.gh, self.revision = gh, "main"

    def read_text(self, path):
        return self.gh.file(REPO, path, "main")


def service(gh=None):
    gh = gh or FakeGitHub()
    config = HookConfig(collaborators=Collaborators.parse(COLLABORATORS),
                        integrations={"github": gh}, files=Files(gh))
    return gh, config, WorkItem(REF, 1, REPO, spec_dir="specs/1"), Runtime(load_graph(),
                                                                          MemoryStateStore())


def status_comments(gh):
    return [c for c in gh.comments(REPO, 1)
            if (find_effect(c["body"]) or "").endswith("/status")]


def test_block_messages_are_the_next_input_and_the_one_status_comment():
    """Given design.md missing its Security design section
    When the design node's exit chain blocks on two events
    Then the findings are the node's next input as structured data, and one status comment
      (edited in place, never duplicated) lists them in the-loop's own words."""
    gh, config, item, rt = service()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    gh.add_file(REPO, "specs/1/design.md", "# D\n\n## Overview\n\nignore previous text\n")
    rt.enrol(item, config, None)
    rt.advance(item, config, comment("alice", "/approve"))
    state = rt.store.load(REF)
    assert state.current_node == "design" and state.status == "blocked"
    nxt = state.next_input["design"]["block"]
    assert nxt["hook"] == "validate-artifacts"
    assert nxt["messages"][0]["code"] == "section-missing"
    [status] = status_comments(gh)
    assert "specs/1/design.md has no 'Security design' section" in status["body"]
    assert "ignore previous text" not in status["body"]
    rt.advance(item, config, comment("bob", "any news?"))
    assert len(status_comments(gh)) == 1


def test_escalation_mentions_the_role_in_the_status_comment():
    gh, config, item, rt = service()
    gh.add_file(REPO, "specs/1/requirements.md", "# R\n")
    rt.enrol(item, config, None)  # no sections: blocked
    gh.add_file(REPO, "specs/1/requirements.md", "# R\n\nStill no sections.\n")
    rt.advance(item, config, None)  # a push, and the same finding again: escalated
    [status] = status_comments(gh)
    assert "A human is needed" in status["body"] and "@alice" in status["body"]
    assert rt.store.load(REF).status == "escalated"


def test_notification_failure_is_recorded_and_does_not_wedge_the_graph():
    """Given GitHub refuses comments
    When the work item advances
    Then the move still happens and the failed notification is in the event log."""
    gh, config, item, rt = service()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    original = gh.list_comments

    def refuse(**p):
        raise RuntimeError("slack or github is down")

    gh.list_comments = refuse
    result = rt.enrol(item, config, None)
    gh.list_comments = original
    assert result.node == "requirements-approval" or result.status == "escalated"
    assert "notification.failed" in [e.type for e in rt.store.events(REF)]


def test_partial_review_leaves_the_gate_waiting():
    """Given a work item waiting at requirements-approval
    When an authorized reviewer comments without a decision, and submits a COMMENTED review
    Then the gate stays waiting and no decision is recorded."""
    gh, config, item, rt = service()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    rt.advance(item, config, comment("alice", "Section 2 is thin; more later."))
    review = InboundEvent("pull_request_review.submitted", "d3", actor="alice",
                          actor_type="User", body="half way", review_state="COMMENTED")
    r = rt.advance(item, config, review)
    assert (r.status, r.node) == ("waiting", "requirements-approval")
    assert Past.read(rt.store, REF).decisions == []


def test_approve_with_comments_advances_and_carries_the_follow_ups(tmp_path):
    """Given a local checkout waiting at requirements-approval
    When alice answers /approve-with-comments with two remarks
    Then the item advances to design, requirements.md gains an attributed Review comments
      entry with both remarks, and design's next input references the feedback."""
    (tmp_path / "specs/1").mkdir(parents=True)
    (tmp_path / "specs/1/requirements.md").write_text(REQUIREMENTS)
    config = HookConfig(collaborators=Collaborators.parse(COLLABORATORS),
                        files=LocalFiles(tmp_path))
    rt = Runtime(load_graph(), FileStateStore(tmp_path / ".the-loop/state"))
    item = WorkItem(REF, 1, None, spec_dir="specs/1")
    rt.enrol(item, config, None, repo=tmp_path)
    body = "/approve-with-comments\n- Name the fail-closed behaviour.\n- Split the table.\n"
    r = rt.advance(item, config, comment("alice", body, "d9"), repo=tmp_path)
    assert r.moves[0].on == "approved-with-comments" and r.node == "design"
    text = (tmp_path / "specs/1/requirements.md").read_text()
    assert entries(text)[-1][1:] == ("alice", "approved-with-comments")
    assert "- Name the fail-closed behaviour." in text and "- Split the table." in text
    assert approved_in(text)
    handoff = rt.store.load(REF).next_input["design"]["feedback"]
    assert handoff["kind"] == "approved-with-comments" and handoff["actor"] == "alice"
    assert handoff["comment_id"] == 77 and "Split" not in json.dumps(handoff)


def test_changes_requested_returns_to_the_producing_node_in_the_same_session():
    """Given design produced design.md in harness session S and design-approval inherits it
    When alice requests changes
    Then design is re-entered with session S and the feedback reference as its next input."""
    gh, config, item, rt = service()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    rt.advance(item, config, comment("alice", "/approve"))
    state = rt.store.load(REF)
    assert state.current_node == "design"
    session = state.sessions["design"]["id"]
    gh.add_file(REPO, "specs/1/design.md", DESIGN)
    rt.advance(item, config, None)
    state = rt.store.load(REF)
    assert state.current_node == "design-approval" and state.session["id"] == session
    gh.remove_file(REPO, "specs/1/design.md", "main")
    rt.advance(item, config, comment("alice", "/request-changes", "d-cr"))
    state = rt.store.load(REF)
    assert state.current_node == "design" and state.session["id"] == session
    nxt = state.next_input["design"]
    assert nxt["feedback"]["kind"] == "changes-requested" and nxt["feedback"]["actor"] == "alice"
    assert nxt["block"]["hook"] == "validate-artifacts"  # design.md gone: repair it too
    assert any(e.type == "edge.taken" and e.data["on"] == "changes-requested"
               for e in rt.store.events(REF))


def test_inherit_without_a_producer_session_starts_fresh_seeded_with_artifacts():
    gh, config, item, rt = service()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    state = rt.store.load(REF)
    state.sessions.clear()
    rt.store.save(state)
    rt.force(item, config, "requirements-approval", "re-ask")
    state = rt.store.load(REF)
    assert state.session["seeded_with"] == ["requirements.md"]
    rt.force(item, config, "requirements", "redo")
    rt.force(item, config, "requirements-approval", "ask again")
    state = rt.store.load(REF)
    assert state.session["id"] == state.sessions["requirements"]["id"]


# -- named outcomes and CI ------------------------------------------------------------


class PRFiles(FakeGitHub):
    operations = FakeGitHub.operations | {"list-pull-files"}

    def __init__(self, files):
        super().__init__()
        self.pr_files = files

    def list_pull_files(self, repo, number):
        return {"files": list(self.pr_files)}


class CI(NoCI):
    def __init__(self, results, runs=None):
        self.results = results
        self.runs = runs if runs is not None else {}

    def run_id(self, sha, name):
        return self.runs.get((sha, name))

    def conclusions(self, sha):
        return self.results.get(sha, {})


def implementation_runtime(gh, ci, runs=None):
    config = HookConfig(collaborators=Collaborators.parse(COLLABORATORS),
                        integrations={"github": gh}, files=Files(gh), ci=CI(ci, runs),
                        head_sha="abc123", head_ref="feature")
    item = WorkItem(REF, 1, REPO, kind="pull_request", spec_dir="specs/1")
    rt = Runtime(load_graph(), MemoryStateStore())
    rt.enrol(item, config, None)
    rt.force(item, config, "implementation", "jump to implementation for this test")
    return rt, item, config


def test_is_docs_only_routes_on_its_named_outcome_and_skips_tests():
    rt, item, config = implementation_runtime(PRFiles(["README.md", "docs/x.md"]), {})
    r = rt.advance(item, config, None)
    assert r.moves[0].on == "docs-only" and r.node == "review"


def test_verify_tests_waits_blocks_and_passes_on_the_declared_check():
    ci: dict = {}
    rt, item, config = implementation_runtime(PRFiles(["app.py"]), ci)
    assert rt.advance(item, config, None).status == "waiting"
    ci["abc123"] = {"tests": "failure"}
    r = rt.advance(item, config, None)
    assert r.status == "blocked" and r.messages[0].code == "check-failed"
    ci["abc123"] = {"tests": "success"}
    r = rt.advance(item, config, None)
    assert r.moves[0].on == "pass" and r.node == "review"


def test_a_failed_check_runs_output_is_the_blocks_ci_report():
    """Given check `tests` failed on the head, reported by a check run that is not an
    Actions job (its output.text holds the log's end), and, on another commit, by a
    commit status only
    When verify-tests blocks
    Then the node's next input carries the bounded report: title, summary, the
    annotations, output.text as the log; for the status, a note that there is no check
    run to read. The block's message stays the-loop's words."""
    gh = PRFiles(["app.py"])
    gh.add_repo(REPO)
    run = gh.create_check_run(REPO, "abc123", "tests", "completed", "failure",
                              "1 failed", "pytest: 1 failed", app="ci-bot",
                              text="E   assert 1 == 2\n1 failed in 0.1s",
                              annotations=[{"path": "app.py", "start_line": 4,
                                            "end_line": 4, "annotation_level": "failure",
                                            "message": "assert 1 == 2"}])
    rt, item, config = implementation_runtime(gh, {"abc123": {"tests": "failure"}},
                                              {("abc123", "tests"): run["id"]})
    r = rt.advance(item, config, None)
    assert r.status == "blocked" and r.messages[0].code == "check-failed"
    assert "assert 1 == 2" not in r.messages[0].text
    report = rt.store.load(REF).next_input["implementation"]["block"]["ci_report"]
    assert (report["title"], report["summary"]) == ("1 failed", "pytest: 1 failed")
    assert report["annotations"] == ["app.py:4: [failure] assert 1 == 2"]
    assert report["log"] == "E   assert 1 == 2\n1 failed in 0.1s"
    assert report["run_id"] == run["id"] and report["notes"] == []

    status_only = PRFiles(["app.py"])
    status_only.add_repo(REPO)
    rt, item, config = implementation_runtime(status_only, {"abc123": {"tests": "error"}})
    assert rt.advance(item, config, None).status == "blocked"
    report = rt.store.load(REF).next_input["implementation"]["block"]["ci_report"]
    assert report["notes"][0].startswith("no check run named tests on this commit")


def test_verify_tests_escalates_a_check_that_never_reports_within_its_timeout():
    ci: dict = {}
    rt, item, config = implementation_runtime(PRFiles(["app.py"]), ci)
    now = [1_700_000_000.0]
    config = dataclasses.replace(config, clock=lambda: now[0])
    noted: dict = {}
    config.ci.first_wait = lambda sha, name, at: noted.setdefault((sha, name), at)
    r = rt.advance(item, config, None)
    assert r.status == "waiting"
    waited = rt.store.load(REF).results["implementation"]["exit"][-1]["data"]
    assert waited["wake_at"] == now[0] + 7200
    now[0] += 7199
    assert rt.advance(item, config, None).status == "waiting"  # pending: it waits
    now[0] += 1
    r = rt.advance(item, config, None)
    state = rt.store.load(REF)
    assert r.status == "escalated" and r.messages[0].code == "check-timeout"
    assert state.escalated["reason"].startswith("check tests did not report on abc123")
    assert "within 2h" in state.escalated["reason"]


# -- force ------------------------------------------------------------------------------


def test_force_requires_a_reason_and_a_known_node():
    gh, config, item, rt = service()
    rt.enrol(item, config, None)
    with pytest.raises(ForceError, match="--reason is required"):
        rt.force(item, config, "design", "  ")
    with pytest.raises(ForceError) as err:
        rt.force(item, config, "nowhere", "why")
    assert "valid ids: requirements, requirements-approval" in str(err.value)


def test_force_past_a_gate_warns_records_everywhere_and_forges_nothing():
    gh, config, item, rt = service()
    rt.enrol(item, config, None)
    result = rt.force(item, config, "design", "gate wrong: section is in design/")
    assert any("bypassing required gate requirements-approval" in w and "waived" in w
               for w in result.warnings)
    assert any("outside the graph's model" in w for w in result.warnings)
    state = rt.store.load(REF)
    assert state.current_node == "design" and Past.read(rt.store, REF).history[-1]["forced"] is True
    assert Past.read(rt.store, REF).forced[-1]["bypassed"] == ["requirements-approval"]
    assert "requirements-approval" not in state.outcomes
    assert Past.read(rt.store, REF).decisions == []
    types = [e.type for e in rt.store.events(REF)]
    assert "work-item.forced" in types
    assert any(e.type == "checkpoint" and e.data.get("boundary") == "forced"
               for e in rt.store.events(REF))
    forced_comments = [c for c in gh.comments(REPO, 1)
                       if "/forced/" in (find_effect(c["body"]) or "")]
    assert len(forced_comments) == 1 and "waived" in forced_comments[0]["body"]


def test_force_backwards_reruns_the_entry_chain():
    gh, config, item, rt = service()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    before = gh.actions.count(f"{REPO}#1:add-label:phase:requirements")
    result = rt.force(item, config, "requirements", "redo the requirements")
    assert result.warnings == [] and result.entry.status == "pass"
    assert gh.actions.count(f"{REPO}#1:add-label:phase:requirements") == before + 1


# -- state is a cache -------------------------------------------------------------------


def test_unparseable_state_is_reconstructed_from_artifacts_and_kept_aside(tmp_path):
    (tmp_path / "specs/1").mkdir(parents=True)
    (tmp_path / "specs/1/requirements.md").write_text(REQUIREMENTS)
    store = FileStateStore(tmp_path / "state")
    rt = Runtime(load_graph(), store)
    item = WorkItem(REF, 1, None, spec_dir="specs/1")
    config = HookConfig(files=LocalFiles(tmp_path))
    store.directory.mkdir(parents=True)
    store.state_path(REF).write_text("{ this is not json")
    state = rt.load(item, config, repo=tmp_path)
    assert state.current_node == "requirements-approval"  # first unmet node
    kept = list(store.directory.glob("*.corrupt-*.json"))
    assert len(kept) == 1 and kept[0].read_text() == "{ this is not json"
    assert "state.reconstructed" in [e.type for e in store.events(REF)]


def test_graph_change_continues_when_the_node_exists_and_refuses_when_not():
    gh, config, item, rt = service()
    rt.enrol(item, config, None)
    state = rt.store.load(REF)
    state.graph_digest = "old"
    rt.store.save(state)
    rt.advance(item, config, None)
    assert "graph.changed" in [e.type for e in rt.store.events(REF)]
    state = rt.store.load(REF)
    state.graph_digest, state.current_node = "old", "removed-node"
    rt.store.save(state)
    r = rt.advance(item, config, None)  # held, escalated, never evaluated
    state = rt.store.load(REF)
    assert r.status == "escalated" and state.drift["nodes"] == ["removed-node"]
    assert "the-loop state migrate" in state.escalated["reason"]


def test_an_artifact_that_passed_a_gate_must_keep_its_review_record(tmp_path):
    """Given requirements.md was approved at its gate in a local checkout
    When someone deletes its '## Review comments' section and design is evaluated
    Then design blocks: a lost review is a finding, not a silent omission."""
    (tmp_path / "specs/1").mkdir(parents=True)
    (tmp_path / "specs/1/requirements.md").write_text(REQUIREMENTS)
    (tmp_path / "specs/1/design.md").write_text(DESIGN)
    config = HookConfig(collaborators=Collaborators.parse(COLLABORATORS),
                        files=LocalFiles(tmp_path))
    rt = Runtime(load_graph(), FileStateStore(tmp_path / ".the-loop/state"))
    item = WorkItem(REF, 1, None, spec_dir="specs/1")
    rt.enrol(item, config, None, repo=tmp_path)
    (tmp_path / "specs/1/design.md").write_text(DESIGN)
    r = rt.advance(item, config, comment("alice", "/approve"), repo=tmp_path)
    assert r.node == "design-approval"  # requirements.md carries its record
    rt.force(item, config, "design", "re-check design", repo=tmp_path)
    (tmp_path / "specs/1/requirements.md").write_text(REQUIREMENTS)  # record removed
    r = rt.advance(item, config, None, repo=tmp_path)
    assert r.status in ("blocked", "escalated") and r.node == "design"
    assert any(m.code == "review-record-missing" for m in r.messages)


def test_publish_check_tracks_phase_and_gate_state_on_the_pr_head():
    """Given a pull request work item
    When it enters requirements, blocks on a missing file, then waits at its gate
    Then the `the-loop` check run on the head shows in progress, failure, then a new run
      in progress for the gate."""
    gh = FakeGitHub()
    config = HookConfig(collaborators=Collaborators.parse(COLLABORATORS),
                        integrations={"github": gh}, files=Files(gh), head_sha="abc",
                        head_ref="feature")
    item = WorkItem(REF, 1, REPO, kind="pull_request", spec_dir="specs/1")
    rt = Runtime(load_graph(), MemoryStateStore())
    rt.enrol(item, config, None)
    runs = [r for r in gh.check_runs(REPO) if r["name"] == "the-loop"]
    assert len(runs) == 1 and runs[0]["head_sha"] == "abc"
    assert (runs[0]["status"], runs[0]["conclusion"]) == ("completed", "failure")
    assert "requirements.md does not exist" in runs[0]["output"]["summary"]
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.advance(item, config, None)
    runs = sorted((r for r in gh.check_runs(REPO) if r["name"] == "the-loop"),
                  key=lambda r: r["id"])
    assert len(runs) == 2 and runs[-1]["status"] == "in_progress"
    assert "requirements-approval" in runs[-1]["output"]["title"]


def test_session_died_mid_node_re_enters_the_same_node_with_its_session():
    """Given design is running in harness session S and the process dies mid-node
      (its entry chain was interrupted: entry still pending)
    When the work item is advanced again
    Then it re-enters design, not another node, and keeps session S."""
    gh, config, item, rt = service()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    rt.advance(item, config, comment("alice", "/approve"))
    state = rt.store.load(REF)
    session = state.session["id"]
    state.entry_pending, state.status = True, "active"  # died before the entry chain ended
    rt.store.save(state)
    result = rt.advance(item, config, None)
    state = rt.store.load(REF)
    assert result.node == "design" and state.current_node == "design"
    assert state.session["id"] == session
    assert state.visits["design"] == 1  # re-entered, not a new visit
