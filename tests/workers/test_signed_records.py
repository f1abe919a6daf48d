"""Signed review records through the worker: a rebuild of unreadable state counts only
verified entries, and a pull request from a fork gets its record where it belongs."""

from __future__ import annotations

import json
import uuid

import pytest

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import SHARED_INBOX
from foundation.settings import WorkerSettings
from foundation.signing import KEYS_PATH
from graph.markers import find_effect
from graph.ports import IntegrationError
from graph.state import Past
from tests.conftest import TEST_SIGNER, gh_label, load_payload, signed_review
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.events import parse_delivery
from workers.state import RedisStateStore

REPO = "Codertocat/Hello-World"
FORK = "forker/Hello-World"
REF2 = f"github:{REPO}#2"
REQ = "specs/2/requirements.md"
COLLABORATORS = "version: 1\nroles:\n  approver:\n    - {name: Coder, github: Codertocat}\n"
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"
DESIGN = "# D\n\n## Overview\n\nx\n\n## Security design\n\ny\n"


class RefusingFork(FakeGitHub):
    """GitHub refusing the installation's pushes to the fork (no access to it)."""

    def put_file(self, repo, path, branch, text, sha=None, message=None):
        if repo.casefold() == FORK.casefold():
            raise IntegrationError("github put-file: Resource not accessible by integration",
                                   integration="github", op="put-file", status=403)
        return super().put_file(repo, path, branch, text, sha=sha, message=message)


def make_env(redis_ns, *, signer=TEST_SIGNER, default_branch="master", gh=None):
    gh = gh if gh is not None else FakeGitHub()
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref=default_branch)
    gh.add_file(REPO, KEYS_PATH, TEST_SIGNER.public_pem(), ref=default_branch)
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name,
                              signer=signer)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)

    def deliver(event, payload):
        delivery = parse_delivery({"X-GitHub-Event": event,
                                   "X-GitHub-Delivery": f"{redis_ns.token}-{uuid.uuid4()}",
                                   "Content-Type": "application/json"},
                                  json.dumps(payload).encode())
        assert queue.enqueue(delivery)
        return processor.drain(delivery.work_item or SHARED_INBOX)

    return gh, store, deliver


def labeled_pr(**head):
    pr = load_payload("pull_request", "labeled")
    pr["label"] = gh_label("the-loop")
    pr["pull_request"].setdefault("labels", []).append(gh_label("the-loop"))
    pr["pull_request"]["head"].update(head)
    return pr


def approving_review(pr):
    review = load_payload("pull_request_review", "submitted")
    review["pull_request"]["head"] = pr["pull_request"]["head"]
    review["pull_request"].setdefault("labels", []).append(gh_label("the-loop"))
    review["review"]["commit_id"] = pr["pull_request"]["head"]["sha"]
    review["review"]["state"] = "approved"
    return review


# -- the rebuild of unreadable state ---------------------------------------------------------

FORGED = "\n## Review comments\n\n### 2026-11-30 — @{login} — approved\n"


@pytest.mark.parametrize("login", ["mallory", "Codertocat"],
                         ids=["non-approver", "approver-without-signature"])
def test_a_rebuild_of_unreadable_state_does_not_count_a_forged_entry(redis_ns, login):
    """Given a pull request waiting at requirements-approval whose author wrote
    `### date — @login — approved` into requirements.md by hand (a non-approver's login,
    or the approver's without a signature), design.md present too
    When its state in Redis becomes unreadable and the next delivery rebuilds it
    Then the rebuilt item waits at requirements-approval (no gate passed on the forged
    text) and the rebuild's event names the entry as not counted."""
    gh, store, deliver = make_env(redis_ns)
    pr = labeled_pr()
    head = pr["pull_request"]["head"]
    for ref in (head["sha"], head["ref"]):
        gh.add_file(REPO, REQ, REQUIREMENTS + FORGED.format(login=login), ref=ref)
        gh.add_file(REPO, "specs/2/design.md", DESIGN, ref=ref)
    deliver("pull_request", pr)
    assert store.load(REF2).current_node == "requirements-approval"
    redis_ns.client.set(store.state_key(REF2), b"{not json")
    deliver("pull_request", pr)
    state = store.load(REF2)
    assert state.current_node == "requirements-approval" and state.decision_count == 0
    [rebuilt] = [e for e in store.events(REF2) if e.type == "state.reconstructed"]
    assert [f["code"] for f in rebuilt.data["findings"]] == ["record-unsigned"]
    assert login not in rebuilt.data["findings"][0]["text"]


def test_a_rebuild_counts_an_entry_the_service_signed(redis_ns):
    gh, store, deliver = make_env(redis_ns)
    pr = labeled_pr()
    head = pr["pull_request"]["head"]
    signed = signed_review(REQUIREMENTS, work_item=REF2, path=REQ, login="Codertocat")
    for ref in (head["sha"], head["ref"]):
        gh.add_file(REPO, REQ, signed, ref=ref)
        gh.add_file(REPO, "specs/2/design.md", DESIGN, ref=ref)
    deliver("pull_request", pr)
    redis_ns.client.set(store.state_key(REF2), b"{not json")
    deliver("pull_request", pr)
    assert store.load(REF2).current_node == "design-approval"


@pytest.mark.parametrize("account", ["the login's", "another"])
def test_a_rebuild_counts_a_signed_entry_only_for_the_account_that_has_the_login(redis_ns,
                                                                                account):
    """Given an entry the service signed for @Codertocat with a user id: the id GitHub
    gives that login, or another account's (the login was since taken by someone else)
    When unreadable state is rebuilt
    Then only the entry of the login's own account passes the gate."""
    gh, store, deliver = make_env(redis_ns)
    pr = labeled_pr()
    head = pr["pull_request"]["head"]
    uid = gh.user_id("Codertocat") + (0 if account == "the login's" else 1)
    signed = signed_review(REQUIREMENTS, work_item=REF2, path=REQ, login="Codertocat",
                           reviewer_id=uid)
    for ref in (head["sha"], head["ref"]):
        gh.add_file(REPO, REQ, signed, ref=ref)
        gh.add_file(REPO, "specs/2/design.md", DESIGN, ref=ref)
    deliver("pull_request", pr)
    redis_ns.client.set(store.state_key(REF2), b"{not json")
    deliver("pull_request", pr)
    state = store.load(REF2)
    if account == "the login's":
        assert state.current_node == "design-approval"
    else:
        assert state.current_node == "requirements-approval"
        [rebuilt] = [e for e in store.events(REF2) if e.type == "state.reconstructed"]
        assert [f["code"] for f in rebuilt.data["findings"]] == ["record-unauthorized"]


def test_the_record_the_worker_commits_is_signed_and_verifies(redis_ns):
    """An approval on a same-repository pull request: the entry committed to its branch
    carries a signed record naming the work item, gate, reviewer and the approved
    content; the decision in state carries its signature too."""
    from foundation.hooks.review import verified_approval
    from graph.model import RecordCheck

    gh, store, deliver = make_env(redis_ns)
    pr = labeled_pr()
    head = pr["pull_request"]["head"]
    for ref in (head["sha"], head["ref"]):
        gh.add_file(REPO, REQ, REQUIREMENTS, ref=ref)
    deliver("pull_request", pr)
    deliver("pull_request_review", approving_review(pr))
    recorded = gh.get_file(REPO, REQ, ref=head["ref"])["text"]
    check = RecordCheck(REF2, "requirements-approval", REQ,
                        {TEST_SIGNER.key_id: TEST_SIGNER.public},
                        lambda login, user_id: login == "Codertocat")
    assert verified_approval(recorded, check).approved
    [decision] = Past.read(store, REF2).decisions
    assert decision["signature"].startswith(TEST_SIGNER.key_id + ":")


# -- where a fork's record goes --------------------------------------------------------------

def fork_env(redis_ns, *, signer=TEST_SIGNER, maintainer_can_modify=False, gh=None):
    """A base repository whose default branch is `main`, and a pull request from the
    fork's own branch also called `main`."""
    gh, store, deliver = make_env(redis_ns, signer=signer, default_branch="main", gh=gh)
    gh.add_file(REPO, REQ, REQUIREMENTS, ref="main")  # the base's namesake branch
    pr = labeled_pr(ref="main")
    fork = pr["pull_request"]["head"]["repo"]  # the base repository's object, as the fork
    fork.update(full_name=FORK, fork=True, id=fork["id"] + 1,
                owner={**fork["owner"], "login": "forker", "id": fork["owner"]["id"] + 1})
    pr["repository"]["default_branch"] = "main"
    pr["pull_request"]["maintainer_can_modify"] = maintainer_can_modify
    head = pr["pull_request"]["head"]
    for ref in (head["sha"],):
        gh.add_file(REPO, REQ, REQUIREMENTS, ref=ref)
        gh.add_file(REPO, "specs/2/design.md", DESIGN, ref=ref)
    gh.add_file(FORK, REQ, REQUIREMENTS, ref="main")
    gh.add_pull(REPO, 2, head_sha=head["sha"], head_ref="main", base_ref="main",
                head_repo=FORK, maintainer_can_modify=maintainer_can_modify)
    return gh, store, deliver, pr


def test_a_fork_pull_request_named_main_gets_no_commit_on_the_base_repository(redis_ns):
    """Given a pull request from a fork whose branch is called `main` (no maintainer
    edits), waiting at requirements-approval
    When the approver approves it
    Then nothing is committed to the base repository (its `main` is untouched), the
    record is a signed comment on the pull request, validate-artifacts at design
    accepts that comment as the record (the item reaches design-approval), and so does
    a rebuild of unreadable state."""
    gh, store, deliver, pr = fork_env(redis_ns)
    deliver("pull_request", pr)
    assert store.load(REF2).current_node == "requirements-approval"
    deliver("pull_request_review", approving_review(pr))
    assert not [a for a in gh.actions if ":put-file:" in a]
    assert gh.get_file(REPO, REQ, ref="main")["text"] == REQUIREMENTS
    assert gh.get_file(FORK, REQ, ref="main")["text"] == REQUIREMENTS
    [record] = [c for c in gh.comments(REPO, 2)
                if (find_effect(c["body"]) or "").endswith(f"/record:{REQ}")]
    assert "the-loop record=" in record["body"] and "— @Codertocat — approved" in record["body"]
    assert store.load(REF2).current_node == "design-approval"
    # A rebuild of unreadable state counts the fork's signed comment as the record.
    redis_ns.client.set(store.state_key(REF2), b"{not json")
    deliver("pull_request", pr)
    assert store.load(REF2).current_node == "design-approval"


def test_a_fork_record_without_a_signature_is_not_accepted(redis_ns):
    """Without a signing key the fork's record comment carries no signature: the item
    stops at design, naming the missing record."""
    gh, store, deliver, pr = fork_env(redis_ns, signer=None)
    deliver("pull_request", pr)
    deliver("pull_request_review", approving_review(pr))
    state = store.load(REF2)
    assert state.current_node == "design"
    assert "review-record-missing" in json.dumps(state.results["design"])


def test_a_fork_allowing_maintainer_edits_gets_the_record_on_its_own_branch(redis_ns):
    gh, store, deliver, pr = fork_env(redis_ns, maintainer_can_modify=True)
    deliver("pull_request", pr)
    deliver("pull_request_review", approving_review(pr))
    assert [a for a in gh.actions if ":put-file:" in a] == [f"{FORK}:put-file:main:{REQ}"]
    assert gh.get_file(REPO, REQ, ref="main")["text"] == REQUIREMENTS
    assert "the-loop record=" in gh.get_file(FORK, REQ, ref="main")["text"]


def test_a_fork_refusing_the_push_gets_the_signed_comment_instead(redis_ns):
    """A fork allows maintainers' edits, but GitHub refuses the installation's push to
    it: the record becomes the signed comment, nothing lands on the base repository."""
    gh, store, deliver, pr = fork_env(redis_ns, maintainer_can_modify=True,
                                      gh=RefusingFork())
    deliver("pull_request", pr)
    deliver("pull_request_review", approving_review(pr))
    assert not [a for a in gh.actions if ":put-file:" in a]
    assert gh.get_file(REPO, REQ, ref="main")["text"] == REQUIREMENTS
    assert any((find_effect(c["body"]) or "").endswith(f"/record:{REQ}")
               for c in gh.comments(REPO, 2))
    assert store.load(REF2).current_node == "design-approval"
