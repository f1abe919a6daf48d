"""The worker against GitHub as it really behaves: renames (same repository id),
installations deleted, suspended and resumed, failures that cannot succeed, secondary
limits with Retry-After, CI from forks and reruns, labels of any case, notifications and
Jira -- real Redis, the in-memory fake GitHub, the real processor."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest

from foundation.config.repository import Collaborators
from foundation.events import CIResult, GitHubEvent
from foundation.hooks.notify import notify
from foundation.hooks.set_phase_label import settle_phase_label
from foundation.inbox.enqueue import DeliveryQueue
from foundation.settings import WorkerSettings
from graph.context import HEAD_MOVED, HookConfig
from graph.model import HookContext, HookResult, WorkItem
from graph.ports import IntegrationError, RateLimited
from graph.refs import WorkItemRef
from graph.runtime import Runtime, with_moved_head
from graph.state import MemoryStateStore, WorkItemState
from integrations.github import GitHubClients, GitHubSettings
from integrations.slack import SlackSdk
from tests.conftest import gh_label, load_payload
from tests.graph.test_effects import Files
from tests.support import slack_fake
from tests.workers.test_processing import deliver
from tests.workers.test_routes import (
    COLLABORATORS,
    REF1,
    REPO,
    REQUIREMENTS,
    comment,
    enrolment,
    record,
)
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from workers.files import GitHubFiles

NEW = "Codertocat/Renamed"
INSTALLATION = 42
GRAPH = load_graph()


class Factory:
    """installation id -> the fake; remembers which installations' tokens were dropped."""

    def __init__(self, gh: FakeGitHub) -> None:
        self.gh = gh
        self.forgotten: list[int | None] = []

    def __call__(self, _installation: int | None) -> FakeGitHub:
        return self.gh

    def forget(self, installation_id: int | None) -> None:
        self.forgotten.append(installation_id)


class Refusing(FakeGitHub):
    """The fake, answering the next ``refuse`` file reads with ``error``."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = 0
        self.error: IntegrationError | None = None

    def get_file(self, repo: str, path: str, ref: str | None = None) -> Any:
        if self.refuse > 0 and self.error is not None:
            self.refuse -= 1
            raise self.error
        return super().get_file(repo=repo, path=path, ref=ref)


@pytest.fixture
def env(redis_ns):
    gh = Refusing()
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name,
                              delivery_attempts=3)
    factory = Factory(gh)
    processor = build_processor(settings, redis_ns.client, GRAPH, factory)
    return gh, processor, factory


def installed(payload: dict[str, Any]) -> dict[str, Any]:
    payload["installation"] = {"id": INSTALLATION, "node_id": "MDIzOkludGVncmF0aW9uNDI="}
    return payload


def renamed(payload: dict[str, Any]) -> dict[str, Any]:
    payload["repository"]["full_name"] = NEW
    payload["repository"]["name"] = NEW.partition("/")[2]
    return payload


def lifecycle(event: str, action: str, **extra: Any) -> dict[str, Any]:
    """GitHub's ``event.action`` example payload, of installation 42."""
    payload = load_payload(event, action)
    payload["installation"]["id"] = INSTALLATION
    return {**payload, **extra}


# -- 1: identity ------------------------------------------------------------------------


def test_a_rename_reaches_the_existing_work_item_and_old_refs_still_resolve(env, caplog):
    """Given an enrolled issue of Codertocat/Hello-World
    When the repository is renamed and the next comment names the new full_name with the
    same repository.id
    Then it is forwarded to the existing work item, which advances calling GitHub with
    the new name; no second work item exists; refs of either name resolve to it."""
    gh, processor, _ = env
    assert processor.handle(record("issues", installed(enrolment()))).outcome == "advanced"
    gh.rename_repo(REPO, NEW)
    approve = record("issue_comment", installed(renamed(comment("/approve"))))
    assert approve.work_item == f"github:{NEW}#1"
    with caplog.at_level(logging.INFO, "the_loop.worker"):
        first = processor.handle(approve)
        handled = processor.drain(REF1)
    assert first.outcome == "ignored" and f"forwarded to {REF1}" in first.detail
    assert "is now Codertocat/Renamed (was Codertocat/Hello-World)" in caplog.text
    assert [h.outcome for h in handled] == ["advanced"]
    state = processor.store.load(REF1)
    assert state.current_node == "design" and state.repository == NEW
    assert processor.store.load(f"github:{NEW}#1") is None
    repositories = processor.agent.repositories
    assert repositories.resolve(WorkItemRef(NEW, 1)).format() == REF1
    assert repositories.resolve(WorkItemRef.parse(REF1)).format() == REF1
    assert repositories.name_of(REPO) == NEW
    # GitHub was called with the new name only after the rename.
    after = gh.actions[gh.actions.index(f"rename-repo {REPO} {NEW}"):]
    assert after and not any(a.startswith(f"{REPO}:") for a in after)


def test_a_new_repository_under_a_former_name_gets_its_own_key(env):
    _, processor, _ = env
    repositories = processor.agent.repositories
    assert repositories.note(1, "o/a").key == "o/a"
    assert repositories.note(1, "o/b").previous == "o/a"
    assert repositories.note(2, "o/a").key == "o/a.2"  # never the renamed one's work items


# -- 2: installations ---------------------------------------------------------------------


def test_a_suspended_installation_is_a_no_op_and_resumes_on_unsuspend(env):
    """Given an enrolled work item of installation 42
    When the installation is suspended, a comment arrives, then it is unsuspended
    Then the comment ends as a logged no-op (not retried, not parked), the cached token
    is dropped each time, and unsuspend re-drives the work item through its inbox."""
    gh, processor, factory = env
    processor.handle(record("issues", installed(enrolment())))
    suspend = processor.handle(record("installation", lifecycle("installation", "suspend")))
    assert "recorded" in suspend.detail and factory.forgotten == [INSTALLATION]
    blocked = processor.handle(record("issue_comment", installed(comment("/approve"))))
    assert (blocked.outcome, blocked.detail) == ("ignored", "installation 42 is suspended")
    assert processor.store.load(REF1).current_node == "requirements-approval"
    assert not processor.redis.zcard(processor.keys.retry)
    assert not processor.redis.hlen(processor.keys.failed)
    resumed = processor.handle(record("installation", lifecycle("installation", "unsuspend")))
    assert resumed.detail.endswith("re-driving 1 work item(s)")
    assert [h.outcome for h in processor.drain(REF1)] == ["advanced"]
    assert factory.forgotten == [INSTALLATION, INSTALLATION]


def test_a_deleted_installation_and_a_removed_repository_end_as_no_ops(env):
    gh, processor, factory = env
    processor.handle(record("issues", installed(enrolment())))
    repository_id = json.loads(record("issues", enrolment()).body)["repository"]["id"]
    removed = processor.handle(record("installation_repositories", lifecycle(
        "installation_repositories", "removed",
        repositories_removed=[{"id": repository_id, "node_id": "R_1", "name": "Hello-World",
                               "full_name": REPO, "private": False}])))
    assert "1 repositories removed" in removed.detail
    later = processor.handle(record("issue_comment", installed(comment("/approve"))))
    assert later.detail == f"repository {REPO} was removed from the installation"
    processor.handle(record("installation", lifecycle("installation", "deleted")))
    gone = processor.handle(record("issue_comment", installed(comment("/approve"))))
    assert gone.detail == "installation 42 is deleted"
    assert factory.forgotten == [INSTALLATION, INSTALLATION]


# -- 3: failures classified before they are retried ---------------------------------------


def test_a_failure_that_cannot_succeed_escalates_and_never_blocks_the_next(env, caplog):
    """Given an enrolled work item and two comments queued behind each other
    When the first one's handling meets GitHub's 403 "Resource not accessible by
    integration" (outside any hook)
    Then it is not retried: the work item is escalated with the reason, and the second
    delivery is handled right after it."""
    gh, processor, _ = env
    processor.handle(record("issues", installed(enrolment())))
    processor.repos._fresh.clear()
    gh.error = IntegrationError(
        "github get-file on x failed: HTTP 403 (resource not accessible by integration: "
        "the App needs the contents=read permission)", integration="github",
        op="get-file", status=403)
    gh.refuse = 1
    inbox = DeliveryQueue(processor.redis, queue_name=processor.settings.queue,
                          prefix=processor.settings.prefix)
    first = deliver(inbox, "issue_comment", json.dumps(installed(comment("hello"))).encode())
    second = deliver(inbox, "issue_comment",
                     json.dumps(installed(comment("/approve"))).encode())
    with caplog.at_level(logging.ERROR, "the_loop.worker"):
        handled = processor.drain(REF1)
    assert [(h.delivery_id, h.outcome) for h in handled] == [(first, "escalated"),
                                                            (second, "advanced")]
    assert "escalated, not retried" in caplog.text and "contents=read" in caplog.text
    events = [e for e in processor.store.events(REF1) if e.type == "work-item.escalated"]
    assert events and "contents=read" in events[0].data["reason"]
    assert not processor.redis.zcard(processor.keys.retry)
    assert not processor.redis.exists(processor.keys.parked(REF1))


def test_a_secondary_limit_retries_the_delivery_no_sooner_than_retry_after(env):
    gh, processor, _ = env
    processor.handle(record("issues", installed(enrolment())))
    processor.repos._fresh.clear()
    gh.error = RateLimited("github get-file: secondary rate limit", integration="github",
                           op="get-file", status=403, retry_after=120.0)
    gh.refuse = 1
    inbox = DeliveryQueue(processor.redis, queue_name=processor.settings.queue,
                          prefix=processor.settings.prefix)
    delivery = deliver(inbox, "issue_comment", json.dumps(installed(comment("hi"))).encode())
    before = time.time()
    handled = processor.drain(REF1)
    assert [h.outcome for h in handled] == ["retrying"]
    due = processor.redis.zscore(processor.keys.retry, delivery)
    assert due >= before + 120  # GitHub's Retry-After, not the 1 s backoff


# -- 5: CI results ------------------------------------------------------------------------


def test_a_ci_result_replaces_the_stored_one_only_if_newer(env):
    _, processor, _ = env
    ci = processor.repos.ci(REPO)
    sha = "a" * 40
    rerun = CIResult(REPO, sha, "tests", "success", 2, "2024-05-01T10:05:00Z")
    first = CIResult(REPO, sha, "tests", "failure", 1, "2024-05-01T10:09:00Z")
    assert ci.record(rerun)
    assert not ci.record(first)  # the first attempt's result, delivered late
    assert ci.conclusions(sha) == {"tests": "success"}
    assert ci.record(CIResult(REPO, sha, "tests", "failure", 2, "2024-05-01T10:07:00Z"))
    assert ci.conclusions(sha) == {"tests": "failure"}
    payload = {"action": "completed", "repository": {"full_name": REPO},
               "workflow_run": {"name": "ci", "head_sha": sha, "status": "completed",
                                "conclusion": "success", "run_attempt": 3,
                                "updated_at": "2024-05-01T11:00:00Z", "pull_requests": []}}
    parsed = GitHubEvent.parse("workflow_run", payload).ci
    assert (parsed.attempt, parsed.at) == (3, "2024-05-01T11:00:00Z")


def test_a_check_suite_from_a_fork_reaches_the_work_item_whose_head_it_is(env, monkeypatch):
    """Given a pull request work item whose head is SHA
    When a check_suite for SHA arrives with an empty pull_requests list (a fork's)
    Then it is fanned out to that work item, which is advanced as a pull request (so
    is-docs-only reads its files)."""
    _, processor, _ = env
    sha = "b" * 40
    processor.store.save(WorkItemState.new(REF1, GRAPH.digest, "implementation"))
    processor.repos.ci(REPO).remember(sha, REF1)
    suite = installed(load_payload("check_suite", "completed"))
    suite["check_suite"].update(head_sha=sha, status="completed", conclusion="success",
                                pull_requests=[], updated_at="2024-05-01T11:00:00Z")
    suite["check_suite"]["app"]["slug"] = "ci"
    fanned = processor.handle(record("check_suite", suite))
    assert fanned.detail.endswith("re-driving 1 work item(s)")
    seen: list[WorkItem] = []
    runtime = processor.agent.runtime
    monkeypatch.setattr(runtime, "advance", lambda item, *_a, **_k: seen.append(item))
    processor.drain(REF1)
    assert seen and seen[0].kind == "pull_request" and seen[0].ref == REF1
    assert processor.repos.ci(REPO).conclusions(sha) == {"ci": "success"}


# -- 6: the work item's own commits ---------------------------------------------------------


def test_a_commit_the_loop_made_is_the_head_the_rest_of_the_delivery_uses():
    gh = FakeGitHub()
    gh.add_file(REPO, "a.md", "old text", ref="old")
    gh.add_file(REPO, "a.md", "new text", ref="new")
    config = HookConfig(head_sha="old", files=GitHubFiles(gh, REPO, lambda: "old"))
    assert config.files.read_text("a.md") == "old text"
    committed = HookResult.passed("record-feedback", **{HEAD_MOVED: "new"})
    moved = with_moved_head(config, (committed,))
    assert moved.head_sha == "new" and moved.files.revision == "new"
    assert moved.files.read_text("a.md") == "new text"  # not the old reader's cache
    assert with_moved_head(config, (HookResult.passed("x"),)) is config


# -- 7: labels ------------------------------------------------------------------------------


def hook_ctx(node_id: str, gh: Any = None, slack: Any = None, jira: Any = None,
             tags: tuple[str, ...] = (), tickets: tuple[str, ...] = (),
             harness: dict[str, Any] | None = None, collaborators: Any = None) -> HookContext:
    integrations = {k: v for k, v in (("github", gh), ("slack", slack), ("jira", jira)) if v}
    config = HookConfig(harness=harness or {}, integrations=integrations,
                        collaborators=collaborators or Collaborators())
    item = WorkItem(REF1, 1, REPO, tags=tags, tickets=tickets)
    return HookContext(item, GRAPH.node(node_id), "entry", None, {}, None, None, (), config)


def test_phase_labels_of_any_case_are_removed_on_the_next_move():
    gh = FakeGitHub()
    gh.add_repo(REPO)
    gh.set_issue_labels(REPO, 1, ["Phase:Requirements", "the-loop"])
    result = settle_phase_label(hook_ctx("design", gh))
    assert result.data["removed"] == ["Phase:Requirements"]
    assert gh.labels(REPO, 1) == ["the-loop", "phase:design"]


def test_the_enrolment_label_matches_without_regard_to_case(env):
    _, processor, _ = env
    payload = installed(enrolment())
    payload["label"] = gh_label("The-Loop")
    payload["issue"]["labels"] = [gh_label("THE-LOOP")]
    assert processor.handle(record("issues", payload)).outcome == "advanced"


# -- 8: notifications ------------------------------------------------------------------------


class Slack:
    name, transport = "slack", "webhook"
    operations = frozenset({"post-message"})

    def __init__(self, fail: IntegrationError | None = None) -> None:
        self.posts: list[tuple[str, str]] = []
        self.fail = fail

    def post_message(self, channel: str, text: str, blocks: Any = None) -> dict[str, Any]:
        if self.fail is not None:
            raise self.fail
        self.posts.append((channel, text))
        return {"ok": True, "ts": None}


PEOPLE = Collaborators.parse(
    "version: 1\nroles:\n  approver:\n    - {name: A, github: a, slack: U1}\n"
    "    - {name: B, github: b, slack: U2}\n")


def test_the_webhook_posts_one_message_mentioning_every_person():
    slack = Slack()
    result = notify(hook_ctx("requirements-approval", slack=slack, collaborators=PEOPLE))
    assert result.data["sent"] == 1 and len(slack.posts) == 1
    assert slack.posts[0][1].startswith("<@U1> <@U2> the-loop:")


def test_a_failed_notification_is_said_in_messages_and_one_log_line(caplog):
    slack = Slack(IntegrationError("slack post-message failed: HTTP 404 (channel_not_found)",
                                   integration="slack", op="post-message", status=404,
                                   codes=("channel_not_found",)))
    with caplog.at_level(logging.ERROR, "foundation.hooks.notify"):
        result = notify(hook_ctx("requirements-approval", slack=slack, collaborators=PEOPLE))
    assert result.status == "pass" and result.data["notification_failed"]
    assert "channel_not_found" in result.messages[0].text
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "codes=channel_not_found" in lines[0]


class DyingStore(MemoryStateStore):
    """A state store whose process dies when ``die()`` is called: later saves never land."""

    def __init__(self) -> None:
        super().__init__()
        self.dead = False

    def die(self) -> None:
        self.dead = True

    def save(self, state: WorkItemState) -> None:
        if not self.dead:
            super().save(state)


class Died(BaseException):
    """The worker process ended (nothing after it runs in that process)."""


class DiesAfterPosting(SlackSdk):
    """The real sdk transport; its worker dies the moment Slack has kept the first post."""

    def __init__(self, store: DyingStore, **kw: Any) -> None:
        super().__init__("xoxb-x", **kw)
        self.store = store

    def post_message(self, *args: Any, **kw: Any) -> Any:
        super().post_message(*args, **kw)
        self.store.die()
        raise Died


def test_a_worker_dying_during_a_slack_post_does_not_post_twice_on_the_re_run():
    """Given the runtime enrols a work item whose approval gate notifies U1 and U2 by
    direct message, and the worker dies as soon as Slack has kept the first message
    When the delivery is run again by a fresh runtime on the state the dead one saved
    Then each person has exactly one message, the first found by its metadata."""
    gh = FakeGitHub()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    store = DyingStore()
    item = WorkItem(ref=REF1, id=1, repository=REPO, spec_dir="specs/1")
    with slack_fake.serve() as fake:
        def config(slack: Any) -> HookConfig:
            return HookConfig(collaborators=PEOPLE, integrations={"github": gh, "slack": slack},
                              files=Files(gh))
        Runtime(GRAPH, store).enrol(item, config(DiesAfterPosting(store,
                                                                  base_url=fake.url + "/api/")),
                                    None)
        assert fake.calls == ["chat.postMessage"] and store.dead
        saved = store.load(REF1)
        assert saved is not None
        assert [e["status"] for e in saved.effects.values() if e["op"] == "post-message"] == [
            "pending"]
        store.dead = False  # the re-run: a fresh worker, the state the dead one left
        result = Runtime(GRAPH, store).enrol(
            item, config(SlackSdk("xoxb-x", base_url=fake.url + "/api/")), None)
    assert (result.status, result.node) == ("waiting", "requirements-approval")
    assert [len(fake.posts(user)) for user in ("U1", "U2")] == [1, 1]
    assert fake.calls.count("chat.postMessage") == 2  # U1 once (first run), U2 once
    effects = store.load(REF1).effects  # type: ignore[union-attr]
    posted = [e for e in effects.values() if e["op"] == "post-message"]
    assert [e["status"] for e in posted] == ["done", "done"]
    assert sum(1 for e in posted if e["result"].get("reused")) == 1


# -- 9: Jira ---------------------------------------------------------------------------------


class Jira:
    name, transport = "jira", "api"
    operations = frozenset({"add-label", "add-comment", "transition-issue"})

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def add_label(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(("add-label", kw))
        return {"issue": kw["issue"], "label": kw["label"]}

    def transition_issue(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(("transition-issue", kw))
        return {"issue": kw["issue"], "transition": "Start design"}

    def add_comment(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(("add-comment", kw))
        return {"issue": kw["issue"], "id": "1"}


def test_a_phase_change_labels_and_moves_the_linked_jira_issue():
    gh, jira = FakeGitHub(), Jira()
    gh.add_repo(REPO)
    harness = {"ticketing": {"system": "jira",
                             "jira": {"transitions": {"design": "In Design"}}}}
    result = settle_phase_label(hook_ctx("design", gh, jira=jira, tickets=("ABC-7",),
                                      harness=harness))
    assert jira.calls == [
        ("add-label", {"issue": "ABC-7", "label": "phase:design", "replace_prefix": "phase:"}),
        ("transition-issue", {"issue": "ABC-7", "name": "In Design"})]
    assert result.data["jira_transition"] == "Start design" and not result.data["jira_failed"]


JIRA_HARNESS = ("version: 1\nticketing:\n  system: jira\n  jira:\n"
                "    transitions: {design: In Design}\n")


def _jira_worker(redis_ns, env: dict[str, str]) -> tuple[Any, Any, dict, Any]:
    """A worker whose Jira is built from the settings ``env`` names, the fake GitHub it
    reads (requirements written, ``ticketing.jira.transitions: {design: In Design}``),
    the enrolment payload of an issue titled with ABC-7, and a builder of its ``/approve``
    payload: call it once the gate is entered, as the comment's ``created_at`` is the
    time it is built (a comment stamped before the gate's visit does not count)."""
    from foundation.settings import Settings
    from the_loop.wiring import build_providers

    jira = build_providers(Settings.from_env(env, process="worker"))["jira"]
    gh = FakeGitHub()
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    gh.add_file(REPO, ".the-loop/harness-config.yaml", JIRA_HARNESS, ref="master")
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    processor = build_processor(settings, redis_ns.client, GRAPH, lambda _i: gh,
                                integrations={"jira": jira})
    def titled(payload: dict[str, Any]) -> dict[str, Any]:
        payload["issue"]["title"] = "ABC-7: spelling error in the README"
        return installed(payload)

    return gh, processor, titled(enrolment()), lambda: titled(comment("/approve"))


@pytest.mark.parametrize(("deployment", "url", "variable", "version"), [
    ("DataCenter", "https://jira.acme.example", "2", 2),
    ("Cloud", "https://acme.atlassian.net", "3", 3),
    ("DataCenter", "https://jira.acme.example", None, 2),  # asked: serverInfo
    ("Cloud", "https://jira.acme.example", None, 3),  # asked; the host rule would say 2
])
def test_an_approval_comments_labels_and_moves_the_jira_issue_on_either_rest_version(
        redis_ns, caplog, deployment: str, url: str, variable: str | None,
        version: int) -> None:
    """Given an enrolled issue naming ABC-7, Jira Cloud (basic: e-mail + API token) or Data
    Center (a personal access token as bearer) configured through the settings, and
    ``ticketing.jira.transitions: {design: In Design}``
    When the approver comments /approve at requirements-approval
    Then the decision reaches ABC-7 as a comment in the body form its REST version
    takes (plain text on v2, ADF on v3; the fake refuses the other with Jira's 400), ABC-7
    carries only the current phase label and has moved to In Design, every request on
    /rest/api/<version>, and no Jira failure is logged."""
    import responses

    from tests.support.jira_fake import FakeJira

    cloud = deployment == "Cloud"
    site = FakeJira(base_url=url, deployment=deployment, token="jira-secret",
                    user="bot@acme.example" if cloud else None)
    site.add_issue("ABC-7", labels=["triage"])
    env = {"GH_TOKEN": "ghp_unused", "THE_LOOP_JIRA_URL": url,
           "THE_LOOP_JIRA_TOKEN": "jira-secret",
           **({"THE_LOOP_JIRA_USER": "bot@acme.example"} if cloud
              else {"THE_LOOP_JIRA_AUTH": "bearer"}),
           **({"THE_LOOP_JIRA_API_VERSION": variable} if variable else {})}
    gh, processor, enrol, approval = _jira_worker(redis_ns, env)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        site.install(mock)
        assert processor.handle(record("issues", enrol)).outcome == "advanced"
        assert processor.handle(record("issue_comment", approval())).outcome == "advanced"
    issue = site.issues["ABC-7"]
    assert issue.comments == [f"the-loop: Codertocat approved at gate requirements-approval "
                              f"(phase requirements-approval) of {REF1}."]
    assert issue.comment_versions == [version]
    [posted] = [body for method, path, body in site.seen if path.endswith("/comment")]
    assert isinstance(posted["body"], dict if version == 3 else str)
    state = processor.store.load(REF1)
    assert issue.labels == ["triage", f"phase:{GRAPH.node(state.current_node).phase}"]
    assert issue.status == "In Design"
    asked = [p for p in site.paths() if p.endswith("/serverInfo")]
    assert asked == ([] if variable else ["GET /rest/api/2/serverInfo"])
    issue_paths = [p for p in site.paths() if not p.endswith("/serverInfo")]
    assert issue_paths and all(f" /rest/api/{version}/issue/ABC-7" in p for p in issue_paths)
    assert not [r.getMessage() for r in caplog.records if r.name == "foundation.hooks.jira"]


def test_a_refused_decision_comment_is_logged_noted_and_failed_not_retried(
        redis_ns, caplog) -> None:
    """Given an enrolled issue naming ABC-7 and a Jira Cloud site that refuses the
    decision comment (its 400: the text is longer than the issue takes)
    When the approver comments /approve at requirements-approval
    Then the gate still advances; the worker's log names Jira's reason and no secret;
    the event log keeps a ``hook.notes`` event with the reason (the dashboard's
    timeline), and a redelivery of the approval does not ask Jira again."""
    import responses

    from tests.support.jira_fake import FakeJira

    url = "https://acme.atlassian.net"
    site = FakeJira(base_url=url, deployment="Cloud", token="jira-secret",
                    user="bot@acme.example")
    site.add_issue("ABC-7", max_comment=10)
    env = {"GH_TOKEN": "ghp_unused", "THE_LOOP_JIRA_URL": url,
           "THE_LOOP_JIRA_TOKEN": "jira-secret", "THE_LOOP_JIRA_USER": "bot@acme.example",
           "THE_LOOP_JIRA_API_VERSION": "3"}
    gh, processor, enrol, approval = _jira_worker(redis_ns, env)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        site.install(mock)
        assert processor.handle(record("issues", enrol)).outcome == "advanced"
        approve = approval()
        with caplog.at_level(logging.ERROR, logger="foundation.hooks.jira"):
            assert processor.handle(record("issue_comment", approve)).outcome == "advanced"
        asked = [p for p in site.paths() if p.endswith("/comment")]
        processor.handle(record("issue_comment", approve))  # GitHub's redelivery
        assert [p for p in site.paths() if p.endswith("/comment")] == asked
    assert len(asked) == 1 and site.issues["ABC-7"].comments == []
    logged = [r.getMessage() for r in caplog.records if r.name == "foundation.hooks.jira"]
    assert any("add-comment" in m and "status=400" in m and "too long" in m
               for m in logged), logged
    assert not any("jira-secret" in m for m in logged)
    notes = [e.data for e in processor.store.events(REF1) if e.type == "hook.notes"]
    assert any("too long" in n["note"] for n in notes), notes


def test_jira_issue_keys_are_read_from_the_title_and_body():
    payload = {"action": "opened", "repository": {"full_name": REPO},
               "issue": {"number": 1, "title": "ABC-123: login", "body": "see OPS-9, x-1"}}
    assert GitHubEvent.parse("issues", payload).tickets == ("ABC-123", "OPS-9")


#: GitHub's own answer to an outage: a web page, not the REST API's JSON.
UNICORN = "<!DOCTYPE html><html><body><h1>Unicorn!</h1>502 Server Error</body></html>"


def test_githubs_html_502_page_retries_the_delivery_and_never_escalates(redis_ns):
    """Given an enrolled work item whose worker reaches the loopback fake GitHub over HTTP
    through the real transport
    When GitHub answers the next read with its HTML 502 page
    Then the delivery is retried like any 502 (a retry is scheduled); the work item is
    not escalated, and the retried delivery advances it."""
    fake = HttpFakeGitHub(tokens=["ghp_worker"])
    fake.add_repo(REPO, default_branch="master")
    fake.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS)
    fake.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    url, stop = serve(fake)
    clients = GitHubClients(GitHubSettings(api_url=f"{url}/api/v3", token="ghp_worker",
                                           write_interval=0.0, read_interval=0.0,
                                           retries=0))
    try:
        settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name,
                                  delivery_attempts=3, delivery_backoff=(0.0,))
        processor = build_processor(settings, redis_ns.client, GRAPH,
                                    lambda _installation: clients.for_installation(None))
        assert processor.handle(record("issues", installed(enrolment()))).outcome == \
            "advanced"
        processor.repos._fresh.clear()  # the next delivery reads the files again
        fake.fail_next(r"/contents/", 502, {"Content-Type": "text/html; charset=utf-8"},
                       body=UNICORN)
        inbox = DeliveryQueue(processor.redis, queue_name=settings.queue,
                              prefix=settings.prefix)
        delivery = deliver(inbox, "issue_comment",
                           json.dumps(installed(comment("/approve"))).encode())
        handled = processor.drain(REF1)
        assert [h.outcome for h in handled] == ["retrying"], [h.detail for h in handled]
        faulted = [r.path for r in fake.requests if r.status == 502]
        assert len(faulted) == 1 and "/contents/" in faulted[0], faulted
        assert processor.redis.zscore(processor.keys.retry, delivery) is not None
        assert processor.store.load(REF1).status != "escalated"
        assert not [e for e in processor.store.events(REF1)
                    if e.type == "work-item.escalated"]
        assert processor.deliveries.release_due(time.time() + 3600) == 1
        assert [h.outcome for h in processor.drain(REF1)] == ["advanced"]
        assert processor.store.load(REF1).current_node == "design"
    finally:
        clients.close()
        stop()
