"""The outbox: side effects recorded before they are performed, replayed at most once."""

from __future__ import annotations

import contextlib
import functools
import json
import time

import pytest

from foundation.config.repository import Collaborators
from graph.compile import compile_graph
from graph.context import HookConfig
from graph.effects import EffectProxy, HookEffects, hook_keys, is_side_effect
from graph.errors import LoopError
from graph.markers import find_effect
from graph.model import HookResult, InboundEvent, WorkItem
from graph.ports import OPERATIONS, IntegrationError, RetryLater
from graph.registry import HookRegistry
from graph.runtime import Runtime
from graph.state import MemoryStateStore, Past, WorkItemState
from graph.status import status_effect
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub

REPO = "Codertocat/Hello-World"
REF = f"github:{REPO}#1"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Alice, github: alice}\n"
REQUIREMENTS = "# Requirements\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"
DESIGN = "# Design\n\n## Overview\n\nx\n\n## Security design\n\ny\n"


class Flaky:
    """Wraps a provider; ``faults[op]`` is a list of ``"before"``/``"after"``: fail the next
    call of ``op`` with a retriable 502 before performing it, or after performing it (the
    write landed, the answer was lost)."""

    def __init__(self, inner: FakeGitHub) -> None:
        self.inner = inner
        self.name = "github"
        self.operations = inner.operations
        self.faults: dict[str, list[str]] = {}
        self.calls: list[str] = []

    def __getattr__(self, method):
        spec = OPERATIONS["github"].get(method.replace("_", "-"))
        if spec is None:
            raise AttributeError(method)
        return functools.partial(self.call, spec.name)

    def call(self, op, **params):
        self.calls.append(op)
        mode = self.faults.get(op, [None]).pop(0) if self.faults.get(op) else None
        if mode == "before":
            raise IntegrationError(f"github {op}: HTTP 502", integration="github", op=op,
                                   status=502, retriable=True)
        result = self.inner.call(op, **params)
        if mode == "after":
            raise IntegrationError(f"github {op}: HTTP 502", integration="github", op=op,
                                   status=502, retriable=True)
        return result


class Files:
    def __init__(self, gh: FakeGitHub) -> None:
        self.gh = gh
        self.revision = "main"

    def read_text(self, path):
        return self.gh.file(REPO, path, "main")


class SpyStore(MemoryStateStore):
    """Remembers the effects dict at every save."""

    def __init__(self) -> None:
        super().__init__()
        self.saved_effects: list[dict] = []

    def save(self, state):
        self.saved_effects.append(json.loads(json.dumps(state.effects)))
        super().save(state)


def setup(store=None):
    gh = FakeGitHub()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    flaky = Flaky(gh)
    config = HookConfig(collaborators=Collaborators.parse(COLLABORATORS),
                        integrations={"github": flaky}, files=Files(gh))
    item = WorkItem(ref=REF, id=1, repository=REPO, spec_dir="specs/1")
    return gh, flaky, config, item, Runtime(load_graph(), store or MemoryStateStore())


def approve(delivery="d-approve"):
    return InboundEvent("issue_comment.created", delivery, actor="alice", actor_type="User",
                        body="/approve")


def marked(gh):
    return [find_effect(c["body"]) for c in gh.comments(REPO, 1)]


def test_reads_pass_through_and_everything_else_is_a_side_effect():
    assert not is_side_effect("get-file") and not is_side_effect("list-comments")
    for op in ("add-label", "remove-label", "ensure-label", "comment", "update-comment",
               "add-reaction", "put-file", "create-check-run", "update-check-run",
               "post-message", "jira-transition"):
        assert is_side_effect(op)


def test_hook_keys_disambiguate_a_hook_called_twice_in_one_node():
    keys = hook_keys(("set-phase-label", "log-entry"), ("validate-artifacts", "log-entry"))
    assert keys[("entry", 0)] == "set-phase-label"
    assert keys[("entry", 1)] == "log-entry@entry1"
    assert keys[("exit", 1)] == "log-entry@exit1"


def test_each_effect_is_saved_pending_before_it_is_performed_and_done_after():
    """Given a fresh work item
    When it is enrolled (set-phase-label and the status comment run)
    Then every side effect was in saved state as pending before the call reached GitHub,
      and is done afterwards, with ids <ref>/<node>/<visit>/<hook>/<n>."""
    store = SpyStore()
    gh, flaky, config, item, runtime = setup(store)
    seen_pending: list[bool] = []
    original = flaky.inner.call

    def checking(op, **params):
        if op in ("ensure-label", "add-label"):
            latest = store.saved_effects[-1]
            seen_pending.append(any(e["op"] == op and e["status"] == "pending"
                                    for e in latest.values()))
        return original(op, **params)

    flaky.inner.call = checking
    runtime.enrol(item, config, None)
    assert seen_pending and all(seen_pending)
    # The entry chain of requirements-approval ran last: its effects are the ones kept,
    # with the status comment the runtime published when the gate began to wait.
    effects = store.load(REF).effects
    prefix = f"{REF}/requirements-approval/1/"
    assert effects.pop(status_effect(REF))["op"] == "comment"
    assert {k.rsplit("/", 1)[0] for k in effects} == {
        prefix + "set-phase-label", prefix + "request-review"}
    assert all(e["status"] == "done" for e in effects.values())
    assert effects[prefix + "set-phase-label/1"]["op"] == "add-label"


def test_state_never_holds_a_comment_body():
    gh, flaky, config, item, runtime = setup()
    runtime.enrol(item, config, None)
    raw = json.dumps(runtime.store.load(REF).to_dict())
    assert "Please review" not in raw and "Reviewers" not in raw


def test_a_transient_failure_is_retried_later_not_escalated():
    """Given GitHub answers 502 to the add-label of the phase label
    When the item is enrolled
    Then the runtime raises RetryLater (no block, no escalation, nothing decided), and
      a second attempt completes the label.

    The label is written once, for the node the delivery leaves the work item at
    (``requirements-approval``), after the walk stopped there: so the failure comes
    with the work item already waiting at the gate, its label effect pending."""
    gh, flaky, config, item, runtime = setup()
    flaky.faults["add-label"] = ["before"]
    with pytest.raises(RetryLater):
        runtime.enrol(item, config, None)
    state = runtime.store.load(REF)
    assert state.current_node == "requirements-approval"
    assert state.status == "waiting" and state.escalated is None
    pending = [e for e in state.effects.values() if e["status"] == "pending"]
    assert [e["op"] for e in pending] == ["add-label"]
    assert gh.labels(REPO, 1) == []
    result = runtime.enrol(item, config, None)
    assert (result.status, result.node) == ("waiting", "requirements-approval")
    assert gh.labels(REPO, 1) == ["phase:requirements-approval"]


def test_a_comment_whose_answer_was_lost_is_found_by_its_marker_not_posted_twice():
    """Given the review request's POST reaches GitHub but the answer is a 502
    When the job is retried
    Then the pending effect is reconciled through list-comments: one review request."""
    gh, flaky, config, item, runtime = setup()
    flaky.faults["comment"] = ["after"]
    with pytest.raises(RetryLater):
        runtime.enrol(item, config, None)
    runtime.enrol(item, config, None)
    requests = [m for m in marked(gh) if m and m.endswith("/request-review")]
    assert requests == [f"{REF}/requirements-approval/1/request-review"]
    assert runtime.store.load(REF).status == "waiting"


def test_a_done_effect_is_not_performed_again_and_returns_its_recorded_result():
    store = MemoryStateStore()
    state = WorkItemState(REF, "g", "n")
    gh = FakeGitHub()
    effects = HookEffects(state, store, f"{REF}/n/1/h")
    first = effects.perform("github", gh, "add-label", {"repo": REPO, "number": 1,
                                                        "label": "x"})
    again = HookEffects(store.load(REF) or state, store, f"{REF}/n/1/h")
    second = again.perform("github", gh, "add-label", {"repo": REPO, "number": 1,
                                                       "label": "x"})
    assert first == second == {"labels": ["x"]}
    assert gh.actions.count(f"{REPO}#1:add-label:x") == 1


def test_a_comment_without_a_marker_gets_the_effect_id_as_its_marker():
    state, store, gh = WorkItemState(REF, "g", "n"), MemoryStateStore(), FakeGitHub()
    proxy = EffectProxy("github", gh, HookEffects(state, store, f"{REF}/n/2/notify"))
    proxy.call("comment", repo=REPO, number=1, body="hello")
    assert marked(gh) == [f"{REF}/n/2/notify/0"]
    assert "hello" not in json.dumps(state.effects)


def test_a_file_commit_is_compared_by_content_before_it_is_made_again():
    """Given a put-file that landed but whose answer was lost
    When the hook runs again and re-derives the text from the (already updated) file
    Then the content an earlier attempt wrote is recognised: one commit, not two."""
    store, gh = MemoryStateStore(), FakeGitHub()
    flaky = Flaky(gh)
    gh.add_file(REPO, "specs/1/requirements.md", "base\n", ref="feature")
    state = WorkItemState(REF, "g", "n")

    def hook_run(current_state):
        proxy = EffectProxy("github", flaky, HookEffects(current_state, store,
                                                         f"{REF}/gate/1/record-feedback"))
        got = proxy.call("get-file", repo=REPO, path="specs/1/requirements.md", ref="feature")
        return proxy.call("put-file", repo=REPO, path="specs/1/requirements.md",
                          branch="feature", text=got["text"] + "entry\n", sha=got["sha"])

    flaky.faults["put-file"] = ["after"]
    with pytest.raises(RetryLater):
        hook_run(state)
    result = hook_run(store.load(REF))
    assert result["unchanged"] is True
    assert gh.file(REPO, "specs/1/requirements.md", "feature") == "base\nentry\n"
    assert gh.actions.count(f"{REPO}:put-file:feature:specs/1/requirements.md") == 1


def test_a_check_run_is_found_by_name_and_head_sha_before_creating_another():
    store, gh = MemoryStateStore(), FakeGitHub()
    flaky = Flaky(gh)
    state = WorkItemState(REF, "g", "n")

    def hook_run(current_state):
        proxy = EffectProxy("github", flaky, HookEffects(current_state, store,
                                                         f"{REF}/n/1/report"))
        return proxy.call("create-check-run", repo=REPO, head_sha="abc", name="the-loop",
                          status="completed", conclusion="success")

    flaky.faults["create-check-run"] = ["after"]
    with pytest.raises(RetryLater):
        hook_run(state)
    hook_run(store.load(REF))
    assert [r["name"] for r in gh.check_runs(REPO)] == ["the-loop"]


def test_the_same_delivery_again_is_a_tick_one_approve_never_approves_two_gates():
    """Given an approval that moved the item to design-approval (design.md present)
    When the same delivery is processed again (a retried job)
    Then it is evaluated as a tick: design-approval keeps waiting."""
    gh, flaky, config, item, runtime = setup()
    gh.add_file(REPO, "specs/1/design.md", DESIGN)
    runtime.enrol(item, config, None)
    event = approve()
    first = runtime.advance(item, config, event)
    assert (first.node, first.status) == ("design-approval", "waiting")
    again = runtime.advance(item, config, event)
    assert (again.node, again.status) == ("design-approval", "waiting")
    assert [d["node"] for d in Past.read(runtime.store, REF).decisions] == ["requirements-approval"]


def test_a_crash_after_the_decision_replays_only_what_was_left():
    """Given the phase label of the node the approval moved to fails transiently after
      it reached GitHub (the label is written once the delivery's walk stopped there,
      after the edge was taken and the entry chain ran)
    When the delivery is retried
    Then the decision is recorded once and the label swap finishes."""
    gh, flaky, config, item, runtime = setup()
    runtime.enrol(item, config, None)
    flaky.faults["add-label"] = ["after"]
    with pytest.raises(RetryLater):
        runtime.advance(item, config, approve())
    state = runtime.store.load(REF)
    assert state.current_node == "design"
    assert [e["op"] for e in state.effects.values() if e["status"] == "pending"] == [
        "add-label"]
    runtime.advance(item, config, approve())
    state = runtime.store.load(REF)
    assert [d["node"] for d in Past.read(runtime.store, REF).decisions] == ["requirements-approval"]
    assert state.current_node == "design" and not state.entry_pending
    assert gh.labels(REPO, 1) == ["phase:design"]


def test_an_abandoned_hook_run_performs_no_further_effect():
    reg = HookRegistry()
    gh = FakeGitHub()

    @reg.hook("slow", timeout=0.2)
    def slow(ctx):
        time.sleep(0.5)
        github = ctx.config.integrations["github"]
        with contextlib.suppress(RetryLater):
            github.call("add-label", repo=REPO, number=1, label="late")
        return HookResult.passed("slow")

    graph = compile_graph("start: n\nnodes:\n  - {id: n, entry: [slow]}\n  - {id: m}\n"
                          "edges:\n  - {from: n, to: m, on: pass}\n",
                          source="t.yaml", registry=reg)
    runtime = Runtime(graph, MemoryStateStore())
    result = runtime.enrol(WorkItem(REF, id=1, repository=REPO),
                           HookConfig(integrations={"github": gh}), None)
    assert result.status == "blocked"
    time.sleep(0.5)
    assert not [a for a in gh.actions if "late" in a]


# -- phase labels: once per delivery, for the node it leaves the work item at -------------


def label_writes(gh):
    return [a.split(":", 1)[1] for a in gh.actions if "-label:" in a and "#1:" in a]


def test_a_delivery_labels_only_the_node_it_leaves_the_work_item_at():
    """Given the default graph
    When the enrolment passes through requirements to the gate, and /approve moves the
      work item to design (where it blocks: no design.md)
    Then each delivery makes one label swap, for the node it stops at: requirements,
      passed through, never gets a label; a later delivery at the same node visit and a
      replay of the approval write no label."""
    gh, flaky, config, item, runtime = setup()
    runtime.enrol(item, config, None)
    assert label_writes(gh) == ["add-label:phase:requirements-approval"]
    runtime.advance(item, config, approve())
    assert runtime.store.load(REF).current_node == "design"
    assert label_writes(gh)[1:] == ["add-label:phase:design",
                                    "remove-label:phase:requirements-approval"]
    assert gh.labels(REPO, 1) == ["phase:design"]
    runtime.advance(item, config, approve())  # the same delivery again
    runtime.advance(item, config, approve("d-later"))
    assert len(label_writes(gh)) == 3
    assert gh.labels(REPO, 1) == ["phase:design"]


def test_a_crash_between_the_label_add_and_the_remove_converges_on_the_retry():
    """Given the stale label's removal fails transiently (the new label is added)
    When the delivery is retried
    Then the retry removes the stale label, and the add it made is not made again."""
    gh, flaky, config, item, runtime = setup()
    runtime.enrol(item, config, None)
    flaky.faults["remove-label"] = ["before"]
    with pytest.raises(RetryLater):
        runtime.advance(item, config, approve())
    assert set(gh.labels(REPO, 1)) == {"phase:requirements-approval", "phase:design"}
    runtime.advance(item, config, approve())
    assert gh.labels(REPO, 1) == ["phase:design"]
    assert label_writes(gh).count("add-label:phase:design") == 1


def test_a_forced_move_labels_its_target():
    gh, flaky, config, item, runtime = setup()
    runtime.enrol(item, config, None)
    runtime.force(item, config, "tasks", "the design was agreed elsewhere")
    assert gh.labels(REPO, 1) == ["phase:tasks"]


# -- the runtime's own effects go through the outbox too ---------------------------------


def status_comments(gh):
    return [m for m in marked(gh) if m == status_effect(REF)]


def test_a_status_comment_whose_answer_was_lost_is_edited_in_place_not_posted_twice():
    """Given the status comment's POST reaches GitHub but the answer is a 502
    When the work item is evaluated again (a tick, a replayed delivery)
    Then the pending status effect is reconciled by its marker: one status comment."""
    gh, flaky, config, item, runtime = setup()
    flaky.faults["comment"] = [None, "after"]  # the review request lands; the status: lost
    runtime.enrol(item, config, None)
    state = runtime.store.load(REF)
    assert state.effects[status_effect(REF)]["status"] == "pending"
    assert state.status_digest is None
    runtime.advance(item, config, None)
    runtime.advance(item, config, None)
    assert status_comments(gh) == [status_effect(REF)]
    state = runtime.store.load(REF)
    assert state.effects[status_effect(REF)]["status"] == "done"
    assert state.status_digest is not None


def test_a_replayed_status_publication_with_a_lost_digest_posts_no_second_comment():
    gh, flaky, config, item, runtime = setup()
    runtime.enrol(item, config, None)
    state = runtime.store.load(REF)
    state.status_digest = None  # the save after the post was lost
    runtime.store.save(state)
    runtime.advance(item, config, None)
    assert status_comments(gh) == [status_effect(REF)]
    assert flaky.calls.count("comment") == 2  # the review request and one status comment


def test_the_check_run_is_created_once_and_updated_through_replays():
    """Given a pull request head: the check run published with the status
    (HookDef.on_status) through the outbox
    When the check run's POST lands but its answer is lost (recorded, the work item goes
      on), and the status is published again
    Then one the-loop check run exists for the head, kept current."""
    gh, flaky, _, item, runtime = setup()
    config = HookConfig(collaborators=Collaborators.parse(COLLABORATORS),
                        integrations={"github": flaky}, files=Files(gh), head_sha="abc123")
    flaky.faults["create-check-run"] = ["after"]
    runtime.enrol(item, config, None)
    assert any(e.type == "notification.failed" for e in runtime.store.events(REF))
    state = runtime.store.load(REF)
    state.status_digest = None
    runtime.store.save(state)
    runtime.advance(item, config, None)
    runs = [r for r in gh.check_runs(REPO) if r["head_sha"] == "abc123"]
    assert [r["name"] for r in runs] == ["the-loop"]
    assert runs[0]["output"]["title"] == "phase requirements-approval: waiting"
    assert flaky.calls.count("create-check-run") == 1


def test_a_forced_move_comment_is_posted_once_even_when_its_answer_was_lost():
    """Given `graph force` whose comment lands but whose answer is a 502
    When the work item is next evaluated
    Then the pending forced-move effect is reconciled by its marker: one comment."""
    gh, flaky, config, item, runtime = setup()
    runtime.enrol(item, config, None)
    flaky.faults["comment"] = ["after"]
    runtime.force(item, config, "design", "unblock the demo")
    assert runtime.store.load(REF).effects[f"{REF}/forced/1"]["status"] == "pending"
    runtime.advance(item, config, None)
    runtime.advance(item, config, None)
    assert [m for m in marked(gh) if "/forced/" in (m or "")] == [f"{REF}/forced/1"]
    assert runtime.store.load(REF).effects[f"{REF}/forced/1"]["status"] == "done"


def test_a_forced_move_comment_that_failed_before_posting_is_posted_on_the_next_evaluation():
    gh, flaky, config, item, runtime = setup()
    runtime.enrol(item, config, None)
    flaky.faults["comment"] = ["before"]
    runtime.force(item, config, "design", "unblock the demo")
    assert [m for m in marked(gh) if "/forced/" in (m or "")] == []
    runtime.advance(item, config, None)
    assert [m for m in marked(gh) if "/forced/" in (m or "")] == [f"{REF}/forced/1"]


def test_a_notice_outside_a_hook_chain_is_posted_once_per_effect_id():
    state, store, gh = WorkItemState(REF, "g", "n"), MemoryStateStore(), FakeGitHub()
    flaky = Flaky(gh)
    flaky.faults["comment"] = ["after"]
    notice = {"repo": REPO, "number": 1, "body": "an alarm"}
    with pytest.raises(RetryLater):
        HookEffects(state, store, f"{REF}/notice").perform(
            "github", flaky, "comment", dict(notice), effect=f"{REF}/alarm/1")
    for _ in range(2):
        HookEffects(store.load(REF), store, f"{REF}/notice").perform(
            "github", flaky, "comment", dict(notice), effect=f"{REF}/alarm/1")
    assert marked(gh) == [f"{REF}/alarm/1"]


def test_a_comment_that_names_itself_stays_single_when_the_state_lost_its_effects():
    """Given the review request was posted, and the state was rebuilt without its outbox
    When the node's entry chain runs again in the same visit
    Then the request is found by its own marker: one comment, reused."""
    gh, flaky, config, item, runtime = setup()
    runtime.enrol(item, config, None)
    state = runtime.store.load(REF)
    state.effects, state.entry_pending = {}, True
    runtime.store.save(state)
    runtime.advance(item, config, None)
    requests = [m for m in marked(gh) if m and m.endswith("/request-review")]
    assert requests == [f"{REF}/requirements-approval/1/request-review"]
    results = runtime.store.load(REF).results["requirements-approval"]["entry"]
    assert next(r for r in results if r["hook"] == "request-review")["data"]["reused"]


class UnreachableStore(MemoryStateStore):
    """A store whose client fails its effect writes, as Redis does when its connection is
    dropped or times out."""

    def save_effect(self, state, effect):
        raise ConnectionError("connection to the store timed out")


def test_a_store_that_cannot_record_an_effect_retries_the_delivery_not_a_verdict():
    state, gh = WorkItemState(REF, "g", "n"), FakeGitHub()
    effects = HookEffects(state, UnreachableStore(), f"{REF}/n/1/h")
    with pytest.raises(RetryLater) as raised:
        effects.perform("github", gh, "add-label", {"repo": REPO, "number": 1, "label": "x"})
    assert raised.value.retriable and raised.value.integration == "state"
    assert "ConnectionError" in str(raised.value)
    assert gh.actions == []  # recorded before performed: nothing was made


def test_a_refusal_of_the_loop_from_the_store_passes_through():
    class Refusing(MemoryStateStore):
        def save_effect(self, state, effect):
            raise LoopErrorForTest("the work item's lock was taken over")

    effects = HookEffects(WorkItemState(REF, "g", "n"), Refusing(), f"{REF}/n/1/h")
    with pytest.raises(LoopErrorForTest):
        effects.perform("github", FakeGitHub(), "add-label",
                        {"repo": REPO, "number": 1, "label": "x"})


class LoopErrorForTest(LoopError):
    """Stands for a store's own refusal (``workers.state.LockLost``)."""
