"""``done`` means merged, through the worker (real Redis, the in-process fake GitHub):
with ``merge.auto`` the-loop merges the head the review approved once ``tests`` passed on
it; a push after the approval is never merged (GitHub's 409 is shown, the work item
waits); without it the work item waits at ``done`` until a person merges, and records who
did; a pull request closed unmerged ends ``abandoned``; the merged work item of an issue
has its branches deleted and its workspace's removal queued."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from rq import Queue

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import SHARED_INBOX
from foundation.settings import WorkerSettings
from foundation.turns import CLEANUP_FUNC, TurnKeys, TurnRecords
from graph.markers import find_effect
from tests.conftest import act_as, gh_label, load_payload
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub, run_git
from the_loop.wiring import build_processor
from webhook.events import parse_delivery
from workers.state import RedisStateStore

REPO = "Codertocat/Hello-World"
PR = f"github:{REPO}#2"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"  # the fixtures' pull request head
COLLABORATORS = ("version: 1\nroles:\n  approver:\n"
                 "    - {name: Coder, github: Codertocat}\n")
GRAPH = """\
version: 1
name: merge-test
start: review
nodes:
  - id: review
    phase: review
    actor: human
    role: approver
    entry: [set-phase-label, publish-check]
    exit:
      - {hook: classify-feedback, with: {outcomes: [approved, changes-requested]}}
      - record-decision
  - id: done
    phase: done
    actor: system
    entry:
      - {hook: merge-pull-request, with: {gate: review, checks: [tests]}}
      - set-phase-label
      - publish-check
      - log-entry
edges:
  - {from: review, to: done, on: approved}
"""


@pytest.fixture
def make(redis_ns, tmp_path):
    built = []

    def build(merge: str | None, *, turns: bool = False, git: bool = False):
        built.append(1)
        prefix = f"{redis_ns.prefix}-{len(built)}"
        gh = FakeGitHub()
        if git:
            gh.add_git_repo(REPO, tmp_path / f"git-{len(built)}", {"README.md": "hi\n"},
                            default_branch="master")
        gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
        harness = "version: 1\n" + (f"merge: {merge}\n" if merge else "")
        gh.add_file(REPO, ".the-loop/harness-config.yaml", harness, ref="master")
        graph = tmp_path / f"graph-{len(built)}.yaml"
        graph.write_text(GRAPH)
        settings = WorkerSettings(prefix=prefix, queue=redis_ns.queue_name)
        records = (TurnRecords(redis_ns.client, TurnKeys(prefix), f"{prefix}-turns")
                   if turns else None)
        processor = build_processor(settings, redis_ns.client, load_graph(graph),
                                    lambda _i: gh, turns=records)
        queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                              prefix=prefix)

        def deliver(event: str, payload: dict[str, Any], drain: str | None = None) -> None:
            body = json.dumps(payload).encode()
            parsed = parse_delivery({
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": f"{redis_ns.token}-{uuid.uuid4()}",
                "Content-Type": "application/json"}, body)
            assert queue.enqueue(parsed)
            processor.drain(parsed.work_item or SHARED_INBOX)
            if drain:  # a delivery forwarded to another work item's inbox
                processor.drain(drain)

        return gh, RedisStateStore(redis_ns.client, prefix), deliver, records

    return build


def labelled(p: dict[str, Any]) -> dict[str, Any]:
    item = p.get("issue") or p.get("pull_request")
    if item is not None:
        item.setdefault("labels", []).append(gh_label("the-loop"))
    return p


def enrol_pull(gh: FakeGitHub, deliver) -> None:
    gh.add_pull(REPO, 2, head_sha=HEAD, head_ref="changes", base_ref="master",
                title="Update the README", body="Closes #1")
    p = labelled(load_payload("pull_request", "labeled"))
    p["label"] = gh_label("the-loop")
    deliver("pull_request", p)


def approve(deliver, *, commit: str = HEAD, drain: str | None = None) -> None:
    p = labelled(load_payload("pull_request_review", "submitted"))
    act_as(p, "Codertocat")
    p["review"].update(state="approved", commit_id=commit)
    p["pull_request"]["head"]["sha"] = commit
    deliver("pull_request_review", p, drain)


def ci_passed(deliver, sha: str = HEAD, conclusion: str = "success") -> None:
    p = load_payload("check_run", "completed")
    p["check_run"].update(name="tests", head_sha=sha, conclusion=conclusion)
    p["check_run"]["check_suite"]["head_sha"] = sha
    deliver("check_run", p)


def closed(gh: FakeGitHub, *, merged: bool, by: str = "octocat",
           drain: str | None = None) -> dict[str, Any]:
    p = labelled(load_payload("pull_request", "closed"))
    act_as(p, by, sender_only=True)
    p["pull_request"]["merged"] = merged
    p["pull_request"]["merged_by"] = ({**p["sender"], "login": by} if merged else None)
    return p


def status_of(gh: FakeGitHub, number: int = 2) -> str:
    [body] = [c["body"] for c in gh.comments(REPO, number)
              if (find_effect(c["body"]) or "").endswith("/status")]
    return body


def merges(gh: FakeGitHub) -> list[str]:
    return [a for a in gh.actions if ":merge-pull-request:" in a]


def events(store: RedisStateStore, ref: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in store.events(ref) if e.type == kind]


def test_auto_merges_the_approved_head_once_ci_passed(make):
    gh, store, deliver, _ = make("{method: rebase, auto: true}")
    enrol_pull(gh, deliver)
    approve(deliver)  # the review passes; tests have not reported yet
    state = store.load(PR)
    assert (state.current_node, state.status) == ("done", "waiting")
    assert merges(gh) == []
    assert "waiting for check tests to pass on ec26c3e57ca3 before merging" in status_of(gh)
    assert "phase:done" not in gh.labels(REPO, 2)  # not done before it is merged
    ci_passed(deliver)
    state = store.load(PR)
    assert state.status == "done"
    [merge] = merges(gh)
    assert merge.startswith(f"{REPO}#2:merge-pull-request:rebase:")
    pull = gh.get_pull_request(REPO, 2)
    assert (pull["state"], pull["merged"], pull["head_sha"]) == ("closed", True, HEAD)
    assert "phase:done" in gh.labels(REPO, 2)
    assert events(store, PR, "pull-request.merged") == [
        {"pull": 2, "by": None, "by_the_loop": True}]
    [run] = [r for r in gh.check_runs(REPO) if r["name"] == "the-loop"]
    assert (run["status"], run["conclusion"]) == ("completed", "success")
    before = list(gh.actions)
    deliver("pull_request", closed(gh, merged=True, by="the-loop[bot]"))
    assert gh.actions == before  # GitHub's closed delivery of its own merge: nothing more
    assert store.load(PR).status == "done"


def test_a_push_after_the_approval_is_never_merged(make):
    gh, store, deliver, _ = make("{auto: true}")
    enrol_pull(gh, deliver)
    approve(deliver)
    gh.repo(REPO).pulls[2]["head_sha"] = "f" * 40  # pushed after the review approved
    ci_passed(deliver, sha="f" * 40)
    ci_passed(deliver)  # the approved head's check: the merge is tried, at that head
    state = store.load(PR)
    assert (state.current_node, state.status) == ("done", "waiting")
    assert merges(gh) == [] and gh.get_pull_request(REPO, 2)["state"] == "open"
    assert ("GitHub refused to merge pull request #2 at ec26c3e57ca3 (HTTP 409): Head branch "
            "was modified. Review and try the merge again.") in status_of(gh)
    assert "phase:done" not in gh.labels(REPO, 2)
    ci_passed(deliver)  # a redelivery asks GitHub nothing again: the refusal stands
    assert merges(gh) == [] and store.load(PR).status == "waiting"


def test_without_auto_it_waits_for_a_person_and_records_who_merged(make):
    gh, store, deliver, _ = make(None)  # the default: {method: squash, auto: false}
    enrol_pull(gh, deliver)
    ci_passed(deliver)
    approve(deliver)
    state = store.load(PR)
    assert (state.current_node, state.status) == ("done", "waiting")
    assert merges(gh) == []
    assert ("waiting for a person to merge pull request #2 (merge.auto is false in "
            ".the-loop/harness-config.yaml)") in status_of(gh)
    # every gate passed: the-loop's check lets a protected branch merge it
    [run] = [r for r in gh.check_runs(REPO) if r["name"] == "the-loop"]
    assert (run["status"], run["conclusion"]) == ("completed", "success")
    with gh.acting_as("octocat"):
        gh.merge_pull_request(REPO, 2, HEAD, "squash")
    deliver("pull_request", closed(gh, merged=True, by="octocat"))
    state = store.load(PR)
    assert state.status == "done"
    assert events(store, PR, "pull-request.merged") == [
        {"pull": 2, "by": "octocat", "by_the_loop": False}]
    [merge] = merges(gh)
    assert merge.startswith(f"{REPO}#2:merge-pull-request:squash:")  # the person's only
    assert "phase:done" in gh.labels(REPO, 2)


def test_merged_before_its_gates_passed_it_is_done_with_a_note(make):
    gh, store, deliver, _ = make(None)
    enrol_pull(gh, deliver)
    with gh.acting_as("octocat"):
        gh.merge_pull_request(REPO, 2, HEAD, "merge")
    deliver("pull_request", closed(gh, merged=True, by="octocat"))
    state = store.load(PR)
    assert (state.current_node, state.status) == ("done", "done")
    assert events(store, PR, "work-item.merged-early") == [{"from": "review", "by": "octocat"}]
    assert "merged by @\u200boctocat at node `review`" in status_of(gh)


def test_closed_unmerged_is_abandoned_never_done(make):
    gh, store, deliver, _ = make("{auto: true}")
    enrol_pull(gh, deliver)
    deliver("pull_request", closed(gh, merged=False, by="octocat"))
    state = store.load(PR)
    assert state.status == "abandoned" and state.current_node == "review"
    status = status_of(gh)
    assert "**abandoned**" in status
    assert "pull request #2 was closed without being merged by @\u200boctocat" in status
    [abandoned] = events(store, PR, "work-item.abandoned")
    assert abandoned["node"] == "review"
    [run] = [r for r in gh.check_runs(REPO) if r["name"] == "the-loop"]
    assert (run["status"], run["conclusion"]) == ("completed", "cancelled")
    before = list(gh.actions)
    approve(deliver)  # nothing moves an abandoned work item
    ci_passed(deliver)
    assert gh.actions == before and merges(gh) == []
    assert store.load(PR).status == "abandoned"


def test_an_issue_merged_has_its_branches_deleted_and_its_workspace_removed(make):
    gh, store, deliver, records = make("{auto: true}", turns=True, git=True)
    issue = f"github:{REPO}#1"
    git_dir = gh.repo(REPO).git_dir
    branch = "the-loop/1-spelling-error-in-the-readme-file"
    for name in (branch, f"{branch}--a", f"{branch}--b"):
        run_git(git_dir, "update-ref", f"refs/heads/{name}", "master")
    gh.add_file(REPO, "fix.txt", "fixed\n", ref=branch)
    head = gh.branch_sha(REPO, branch)
    p = labelled(load_payload("issues", "labeled"))
    p["label"] = gh_label("the-loop")
    gh.add_pull(REPO, 2, head_sha=head, head_ref=branch, base_ref="master",
                title="Spelling", body="Closes #1")
    records.remember_workspace(issue, REPO, branch, 2)
    # An issue work item at the review gate of a plan that ran two tasks side by side.
    deliver("issues", p)
    state = store.load(issue)
    assert state.current_node == "review"
    state.plan = {"node": "implementation", "max_parallel": 2,
                  "status": {"a": "passed", "b": "passed"}}
    store.save(state)
    ci_passed(deliver, sha=head)
    approve(deliver, commit=head, drain=issue)
    state = store.load(issue)
    assert state.status == "done", state.parked_reason
    assert fake_branches(gh) == {"master"}
    assert [e["branches"] for e in events(store, issue, "branches.deleted")] == [
        [f"{branch}--a", f"{branch}--b", branch]]
    assert gh.git_text(gh.repo(REPO), "master", "fix.txt") == "fixed\n"
    jobs = Queue(f"{records.keys.prefix}-turns", connection=records.redis).jobs
    assert [(j.func_name, j.args) for j in jobs] == [(CLEANUP_FUNC, (issue, REPO, 1))]
    before = list(gh.actions)
    deliver("pull_request", closed(gh, merged=True, by="the-loop[bot]"), drain=issue)
    assert gh.actions == before  # nothing deleted twice, nothing asked again


def fake_branches(gh: FakeGitHub) -> set[str]:
    git_dir = gh.repo(REPO).git_dir
    assert git_dir is not None
    out = run_git(git_dir, "for-each-ref", "--format=%(refname:strip=2)", "refs/heads")
    return set(out.stdout.decode().split())


def test_the_merge_setting_is_validated_naming_the_file_key_and_fix():
    from foundation.config.loader import InvalidConfigError
    from foundation.config.repository import load_harness_config

    assert load_harness_config("version: 1\n").merge.method == "squash"
    assert load_harness_config("version: 1\n").merge.auto is False
    for text, said in (
        ("version: 1\nmerge: {method: fast-forward}\n",
         ".the-loop/harness-config.yaml:2: merge.method: must be one of squash, merge, rebase"),
        ("version: 1\nmerge: {auto: sometimes}\n",
         ".the-loop/harness-config.yaml:2: merge.auto: must be true or false"),
        ("version: 1\nmerge: {strategy: squash}\n",
         ".the-loop/harness-config.yaml:2: merge.strategy: unknown key"),
    ):
        with pytest.raises(InvalidConfigError) as bad:
            load_harness_config(text)
        assert str(bad.value).startswith(said), str(bad.value)




def test_an_issue_whose_pull_request_is_closed_unmerged_is_abandoned_and_keeps_its_branch(
        make):
    gh, store, deliver, records = make("{auto: true}", turns=True, git=True)
    issue = f"github:{REPO}#1"
    branch = "the-loop/1-spelling-error-in-the-readme-file"
    gh.add_file(REPO, "fix.txt", "fixed\n", ref=branch)
    gh.add_pull(REPO, 2, head_sha=gh.branch_sha(REPO, branch) or "", head_ref=branch,
                base_ref="master", title="Spelling", body="Closes #1")
    records.remember_workspace(issue, REPO, branch, 2)
    p = labelled(load_payload("issues", "labeled"))
    p["label"] = gh_label("the-loop")
    deliver("issues", p)
    assert store.load(issue).current_node == "review"
    deliver("pull_request", closed(gh, merged=False, by="octocat"), drain=issue)
    state = store.load(issue)
    assert (state.status, state.turn) == ("abandoned", None)
    assert "pull request #2 was closed without being merged" in status_of(gh, 1)
    assert branch in fake_branches(gh)  # a person may take the work over
    jobs = Queue(f"{records.keys.prefix}-turns", connection=records.redis).jobs
    assert [(j.func_name, j.args) for j in jobs] == [(CLEANUP_FUNC, (issue, REPO, 1))]
    before = list(gh.actions)
    approve(deliver, drain=issue)  # no decision, no turn, no write
    assert gh.actions == before and store.load(issue).status == "abandoned"
    assert Queue(f"{records.keys.prefix}-turns", connection=records.redis).count == 1
