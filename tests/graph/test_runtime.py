"""Chain semantics and advance over the default graph, with an in-memory fake GitHub."""

import dataclasses

import pytest

from foundation.config.repository import Collaborators
from graph.compile import compile_graph
from graph.context import HookConfig
from graph.markers import OwnAccounts, find_effect
from graph.model import HookContext, HookResult, InboundEvent, Message, WorkItem
from graph.registry import HookRegistry
from graph.runtime import Runtime, run_chain
from graph.state import MemoryStateStore, Past
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.stores import FileStateStore

REPO = "Codertocat/Hello-World"
REF = f"github:{REPO}#1"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Alice, github: alice}\n"
REQUIREMENTS = "# Requirements\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"
DESIGN = "# Design\n\n## Overview\n\nx\n\n## Security design\n\ny\n"


class Files:
    def __init__(self, gh: FakeGitHub) -> None:
        self.gh = gh
        self.revision = "main"

    def read_text(self, path):
        return self.gh.file(REPO, path, "main")


def setup():
    gh = FakeGitHub()
    config = HookConfig(
        collaborators=Collaborators.parse(COLLABORATORS),
        integrations={"github": gh},
        files=Files(gh),
    )
    item = WorkItem(ref=REF, id=1, repository=REPO, spec_dir="specs/1")
    return gh, config, item, Runtime(load_graph(), MemoryStateStore())


def review_requests(gh):
    return [c for c in gh.comments(REPO, 1)
            if (find_effect(c["body"]) or "").endswith("/request-review")]


def comment(actor, body, delivery="d"):
    return InboundEvent("issue_comment.created", delivery, actor=actor, actor_type="User",
                        body=body)


# -- run_chain ---------------------------------------------------------------------------


def chain_graph(*hooks):
    reg = HookRegistry()
    calls = []
    for name, fn in hooks:
        reg.hook(name)(fn)
        calls.append(name)
    text = f"nodes:\n  - {{id: n, exit: [{', '.join(calls)}]}}\n"
    return compile_graph(text, source="t.yaml", registry=reg).node("n")


def run(node, event=None):
    ctx = HookContext(WorkItem("local:1"), node, "exit", None, {}, None, event, (),
                      HookConfig())
    return run_chain(node.exit, ctx)


def test_a_blocking_exit_hook_stops_the_chain_and_its_messages_are_the_next_input():
    """Given an exit chain [a, b, c] where b blocks with a finding
    When the chain runs
    Then c never runs, the chain is blocked, and b's messages are the feedback."""
    ran = []

    def mk(name, status):
        def fn(ctx):
            ran.append(name)
            return HookResult(status, name, (Message(f"{name} says so"),))
        return fn

    node = chain_graph(("a", mk("a", "pass")), ("b", mk("b", "block")), ("c", mk("c", "pass")))
    result = run(node)
    assert ran == ["a", "b"]
    assert result.status == "block"
    assert [m.text for m in result.messages] == ["b says so"]


def test_skip_is_recorded_and_the_chain_continues():
    node = chain_graph(("a", lambda c: HookResult.skipped("a", "n/a")),
                       ("b", lambda c: HookResult.passed("b")))
    result = run(node)
    assert result.status == "pass"
    assert [r.status for r in result.results] == ["skip", "pass"]


def test_raising_hook_blocks():
    def boom(ctx):
        raise RuntimeError("secret-ish detail from somewhere")

    node = chain_graph(("boom", boom), ("after", lambda c: HookResult.passed("after")))
    result = run(node)
    assert result.status == "block"
    assert result.stopper.retriable is False
    assert len(result.results) == 1
    assert "secret-ish" not in result.messages[0].text


def test_hooks_see_earlier_results_and_the_first_named_outcome_routes():
    seen = []

    def second(ctx):
        seen.append([r.hook for r in ctx.results])
        return HookResult.passed("second")

    node = chain_graph(("first", lambda c: HookResult.passed("first", outcome="docs-only")),
                       ("second", second))
    result = run(node)
    assert seen == [["first"]]
    assert result.outcome == "docs-only"


def test_hook_result_rejects_unknown_status():
    with pytest.raises(ValueError):
        HookResult("maybe", "x")  # type: ignore[arg-type]


# -- advance over the default graph --------------------------------------------------------


def test_missing_artifacts_block_with_every_finding_in_one_result():
    """Given a work item enrolled with no requirements.md
    When it advances
    Then it is blocked at requirements with the missing file named, and labelled."""
    gh, config, item, rt = setup()
    result = rt.enrol(item, config, None)
    assert result.status == "blocked" and result.node == "requirements"
    assert any(m.code == "artifact-missing" and m.path == "specs/1/requirements.md"
               for m in result.messages)
    assert f"{REPO}#1:add-label:phase:requirements" in gh.actions


def test_validate_artifacts_aggregates_all_missing_sections():
    """Given a requirements.md with neither required section
    When validate-artifacts runs
    Then one result lists both missing sections."""
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", "# Login page\n\nnothing here\n")
    result = rt.enrol(item, config, None)
    codes = [(m.code, m.text) for m in result.messages]
    assert [c for c, _ in codes] == ["section-missing", "section-missing"]
    assert "Problem" in codes[0][1] and "Requirements" in codes[1][1]


def test_gate_waits_for_an_authorized_approval_and_ignores_others():
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS)
    first = rt.enrol(item, config, None)
    assert (first.status, first.node) == ("waiting", "requirements-approval")
    assert gh.labels(REPO, 1) == ["phase:requirements-approval"]
    posted = review_requests(gh)
    assert len(posted) == 1 and "@alice" in posted[0]["body"]
    assert find_effect(posted[0]["body"]) == f"{REF}/requirements-approval/1/request-review"

    # An unauthorized /approve changes nothing.
    r = rt.advance(item, config, comment("mallory", "/approve"))
    assert (r.status, r.node) == ("waiting", "requirements-approval")
    # An authorized but non-decisive comment keeps waiting.
    r = rt.advance(item, config, comment("alice", "looks fine, but I will /approve later"))
    assert (r.status, r.node) == ("waiting", "requirements-approval")
    # An authorized /approve moves on; design.md is missing, so design blocks.
    r = rt.advance(item, config, comment("alice", "Thanks!\n/approve\n", delivery="d-ok"))
    assert [(m.source, m.target, m.on) for m in r.moves] == [
        ("requirements-approval", "design", "approved")]
    assert (r.status, r.node) == ("blocked", "design")
    assert Past.read(rt.store, REF).decisions[-1]["actor"] == "alice"
    assert Past.read(rt.store, REF).decisions[-1]["delivery"] == "d-ok"
    assert gh.labels(REPO, 1) == ["phase:design"]


def test_one_event_never_approves_two_gates():
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    gh.add_file(REPO, "specs/1/design.md", DESIGN)
    rt.enrol(item, config, None)
    r = rt.advance(item, config, comment("alice", "/approve"))
    assert (r.status, r.node) == ("waiting", "design-approval")


def test_changes_requested_means_repair_the_node_waits_until_the_rejected_artifact_changes():
    """Given a gate's /request-changes on requirements.md
    When the work item returns to requirements and nothing (or only the-loop's review
    record) changes in the artifact
    Then requirements waits with the review as its next input and no second review request
    is posted; once the artifact's content changes it passes and the gate asks again."""
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    r = rt.advance(item, config, comment("alice", "/request-changes"))
    assert r.moves[0].target == "requirements"
    assert (r.status, r.node) == ("waiting", "requirements")
    assert "waiting for the changes the review asked for" in r.messages[0].text
    state = rt.store.load(REF)
    nxt = state.next_input["requirements"]
    assert nxt["feedback"]["kind"] == "changes-requested"
    assert list(nxt["rejected"]["blobs"]) == ["specs/1/requirements.md"]
    assert len(review_requests(gh)) == 1
    # Unrelated events, and an edit of the-loop's review record only: still unrepaired.
    r = rt.advance(item, config, comment("bob", "any news?", delivery="d2"))
    assert (r.status, r.node) == ("waiting", "requirements")
    recorded = (REQUIREMENTS + "\n## Review comments\n\n"
                "### 2026-01-01 — @alice — changes requested\n")
    gh.add_file(REPO, "specs/1/requirements.md", recorded)
    r = rt.advance(item, config, None)
    assert (r.status, r.node) == ("waiting", "requirements")
    assert len(review_requests(gh)) == 1
    assert "requirements" in rt.store.load(REF).next_input
    # The repair: the content changed. It passes, and the gate asks again (visit 2).
    gh.add_file(REPO, "specs/1/requirements.md", recorded.replace("y\n", "y, clarified\n"))
    r = rt.advance(item, config, None)
    assert (r.status, r.node) == ("waiting", "requirements-approval")
    effects = [find_effect(c["body"]) for c in review_requests(gh)]
    assert len(effects) == 2 and effects[-1].endswith("/requirements-approval/2/request-review")
    assert "requirements" not in rt.store.load(REF).next_input


def test_a_retried_entry_chain_does_not_post_the_review_request_twice():
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    state = rt.store.load(REF)
    state.entry_pending = True  # as if the worker died after posting
    rt.store.save(state)
    rt.advance(item, config, None)
    assert len(review_requests(gh)) == 1


def test_bot_and_own_comments_never_drive_a_gate():
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    bot = InboundEvent("issue_comment.created", "d1", actor="alice", actor_type="Bot",
                       body="/approve")
    # Marked and written by an account the-loop writes as: its own, never a decision.
    as_own = dataclasses.replace(config, own=OwnAccounts.of({"alice": None}))
    own = comment("alice", "/approve\n<!-- the-loop effect=x/y/1/z -->")
    assert rt.advance(item, config, bot).status == "waiting"
    assert rt.advance(item, as_own, own).status == "waiting"


def test_review_states_classify():
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    review = InboundEvent("pull_request_review.submitted", "d2", actor="alice",
                          actor_type="User", body="", review_state="APPROVED")
    r = rt.advance(item, config, review)
    assert r.moves[0].on == "approved"


def test_state_persists_before_the_next_entry_side_effects():
    """The edge is saved before the next node's entry hooks run."""
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    seen = []
    original = gh.comment

    def spy(**p):
        seen.append(rt.store.load(REF).current_node)
        return original(**p)

    gh.comment = spy
    rt.enrol(item, config, None)
    # The review request, then the status comment: both after the move was saved.
    assert seen == ["requirements-approval", "requirements-approval"]


def test_event_log_keeps_digests_not_bodies(tmp_path):
    gh, config, item, _ = setup()
    rt = Runtime(load_graph(), FileStateStore(tmp_path))
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    rt.advance(item, config, comment("alice", "/approve\nwith a private remark"))
    raw = "".join(p.read_text() for p in tmp_path.iterdir())
    assert "private remark" not in raw
    events = rt.store.events(REF)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {"seq", "id", "type", "data", "caused_by"} <= set(events[0].to_dict())
    decision = Past.read(rt.store, REF).decisions[-1]
    assert len(decision["body_sha256"]) == 64
