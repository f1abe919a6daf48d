"""The worker's composition root and delivery processing.

``DeliveryProcessor`` owns the Redis connection, the compiled graph, the runtime and the
GitHub clients; nothing else constructs them. Deliveries of one work item are processed
one at a time, in arrival order, even with several workers: the receiver appends each
delivery id to the work item's inbox list in the same atomic step that enqueues its RQ
job, and whichever job holds the work item's lock drains the inbox head-first.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from graph.compile import Graph
from graph.context import COLLABORATORS_PATH, Collaborators, ConfigFileError, HookConfig
from graph.ports import Integration, IntegrationError, NotFound
from graph.runtime import Runtime
from graph.state import StateStore
from workers import translate
from workers.ci import RedisCI
from workers.files import GitHubFiles
from workers.router import CI_ONLY, CONFIG, DRIVE, IGNORE, route
from workers.settings import WorkerSettings
from workers.state import RedisStateStore

log = logging.getLogger("the_loop.worker")

GitHubFactory = Callable[[int | None], Integration]


class DeliveryFailed(RuntimeError):
    """Processing one delivery raised; the delivery was recorded as failed."""


@dataclass(frozen=True)
class Handled:
    """What happened to one delivery: ``outcome`` is ``advanced``, ``ignored`` or
    ``failed``; ``detail`` is the-loop's own reason or the work item's status."""

    delivery_id: str
    outcome: str
    detail: str = ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class DeliveryProcessor:
    """Process queued deliveries.

    Args:
        settings: worker settings.
        connection: Redis client (the RQ connection).
        graph: the compiled graph.
        github: installation id -> GitHub provider; ``None`` when no credentials are
            configured (enrolled work items then fail with a clear reason).
        store: state store (default: Redis under ``settings.prefix``).
    """

    def __init__(
        self,
        settings: WorkerSettings,
        connection: redis.Redis,
        graph: Graph,
        github: GitHubFactory | None,
        store: StateStore | None = None,
    ) -> None:
        self.settings = settings
        self.redis = connection
        self.graph = graph
        self.github = github
        self.store = store or RedisStateStore(connection, settings.prefix)
        self.runtime = Runtime(graph, self.store)
        self._collaborators: dict[str, tuple[float, Collaborators]] = {}

    # -- keys (the receiver writes them; see webhook.enqueue) --------------------------

    def delivery_key(self, delivery_id: str) -> str:
        return f"{self.settings.prefix}:delivery:{delivery_id}"

    def inbox_key(self, ref: str) -> str:
        return f"{self.settings.prefix}:inbox:{ref}"

    def lock_key(self, ref: str) -> str:
        return f"{self.settings.prefix}:lock:{ref}"

    @property
    def failed_key(self) -> str:
        return f"{self.settings.prefix}:deliveries:failed"

    # -- job entry ---------------------------------------------------------------------

    def process(self, delivery_id: str, event: str, work_item: str | None) -> list[Handled]:
        """Process ``delivery_id`` (and, for a work item, every delivery queued before it).

        Returns what was handled. Raises :class:`DeliveryFailed` when ``delivery_id``
        itself failed, so RQ records the job as failed.
        """
        handled = self.drain(work_item) if work_item else [self._handle_one(delivery_id)]
        for h in handled:
            if h.delivery_id == delivery_id and h.outcome == "failed":
                raise DeliveryFailed(f"delivery {delivery_id} failed: {h.detail}")
        return handled

    def drain(self, ref: str) -> list[Handled]:
        """Handle ``ref``'s inbox in order while holding its lock.

        A job that finds the lock held returns at once: the holder re-checks the inbox
        after releasing, so a delivery queued meanwhile is never stranded.
        """
        inbox = self.inbox_key(ref)
        handled: list[Handled] = []
        while True:
            lock = self.redis.lock(self.lock_key(ref), timeout=self.settings.lock_timeout)
            if not lock.acquire(blocking=False):
                return handled
            try:
                while True:
                    head = self.redis.lindex(inbox, 0)
                    if head is None:
                        break
                    handled.append(self._handle_one(_text(head)))
                    # Pop only after handling: a crash leaves the delivery at the head.
                    self.redis.lpop(inbox)
            finally:
                try:
                    lock.release()
                except redis.exceptions.LockError:
                    log.warning("work item lock for %s expired while draining", ref)
            if not self.redis.llen(inbox):
                return handled

    # -- one delivery ------------------------------------------------------------------

    def _handle_one(self, delivery_id: str) -> Handled:
        key = self.delivery_key(delivery_id)
        record = {_text(k): v for k, v in self.redis.hgetall(key).items()}
        if not record:
            return Handled(delivery_id, "ignored", "delivery record expired or already handled")
        event = _text(record.get("event", b""))
        try:
            handled = self.handle(delivery_id, event, record)
        except IntegrationError as exc:
            # Our own message (operation, status, the fix); never a response body.
            reason = f"{exc.integration} {exc.op}: {exc}"
            log.error("delivery=%s event=%s failed: %s", delivery_id, event, reason)
            handled = self._failed(delivery_id, event, record, reason)
        except Exception as exc:
            log.exception("delivery=%s event=%s failed", delivery_id, event)
            handled = self._failed(delivery_id, event, record, type(exc).__name__)
        else:
            self.redis.delete(key)
        log.info("delivery=%s event=%s work_item=%s outcome=%s detail=%s", delivery_id, event,
                 _text(record.get("work_item", b"")) or "-", handled.outcome, handled.detail)
        return handled

    def _failed(
        self, delivery_id: str, event: str, record: Mapping[str, Any], reason: str
    ) -> Handled:
        """Record ``delivery_id`` in the failed-deliveries hash with ``reason``."""
        self.redis.hset(self.failed_key, delivery_id, json.dumps({
            "event": event,
            "work_item": _text(record.get("work_item", b"")) or None,
            "reason": reason,
            "at": time.time(),
        }))
        return Handled(delivery_id, "failed", reason)

    def handle(self, delivery_id: str, event: str, record: Mapping[str, Any]) -> Handled:
        """Route and process one delivery record (the hash the receiver wrote).

        Raises whatever processing raises (the caller records the failure).
        """
        action = _text(record.get("action", b"")) or None
        ref = _text(record.get("work_item", b"")) or None
        chosen = route(event, action)
        if chosen.kind == IGNORE:
            return Handled(delivery_id, "ignored", chosen.reason)
        payload = json.loads(record["body"])
        ci = translate.ci_result(event, payload)
        if ci is not None:
            store = RedisCI(self.redis, self.settings.prefix, ci.repository)
            store.record(ci)
            if chosen.kind == CI_ONLY and ref is None:
                # A commit status names no pull request: re-drive the work items whose
                # head is that commit, each through its own inbox (order is kept).
                fanned = self._fan_out(delivery_id, event, record, store.work_items(ci.sha))
                return Handled(delivery_id, "ignored",
                               f"recorded {ci.name}={ci.conclusion} for {ci.sha[:12]}; "
                               f"re-driving {fanned} work item(s)")
        if chosen.kind == CONFIG:
            return self._on_push(delivery_id, payload)
        if ref is None:
            return Handled(delivery_id, "ignored", "no issue or pull request in this delivery")
        enrolled = self._carries_enrolment_label(payload)
        if chosen.kind == DRIVE and not enrolled:
            return Handled(delivery_id, "ignored",
                           f"not a work item (no {self.settings.enrolment_label!r} label)")
        if chosen.kind != DRIVE and self.store.load(ref) is None:  # drive-if-enrolled, CI
            return Handled(delivery_id, "ignored", "not a work item")
        installation = record.get("installation_id")
        installation_id = int(_text(installation)) if installation not in (None, b"", "") else None
        github = self._github(installation_id)
        config = self._hook_config(github, payload, ref)
        item = translate.work_item(ref, payload, self.settings.spec_dir)
        inbound = translate.inbound_event(event, delivery_id, payload)
        self.store.append_event(ref, "delivery.received", {
            "event": event,
            "action": action,
            "delivery": delivery_id,
            "actor": inbound.actor,
            "body_sha256": inbound.body_sha256,
        }, delivery_id)
        if chosen.kind == DRIVE:
            result = self.runtime.enrol(item, config, inbound)
        else:
            maybe = self.runtime.advance(item, config, inbound)
            if maybe is None:
                return Handled(delivery_id, "ignored", "not a work item")
            result = maybe
        if installation_id is not None:
            state = self.store.load(ref)
            if state is not None and state.installation_id != installation_id:
                # `the-loop graph force` needs it to comment as the App.
                state.installation_id = installation_id
                self.store.save(state)
        return Handled(delivery_id, "advanced", f"{result.status} at {result.node}")

    # -- helpers -----------------------------------------------------------------------

    def _carries_enrolment_label(self, payload: Mapping[str, Any]) -> bool:
        label = self.settings.enrolment_label
        if label in translate.labels_of(payload):
            return True
        added = payload.get("label") or {}
        return payload.get("action") == "labeled" and added.get("name") == label

    def _github(self, installation_id: int | None) -> Integration:
        if self.github is None:
            raise IntegrationError(
                "no GitHub credentials: set THE_LOOP_GITHUB_APP_ID and "
                "THE_LOOP_GITHUB_PRIVATE_KEY (or _PATH), or GH_TOKEN",
                integration="github", op="connect")
        return self.github(installation_id)

    def _hook_config(
        self, github: Integration, payload: Mapping[str, Any], ref: str
    ) -> HookConfig:
        repository = payload.get("repository") or {}
        repo = str(repository.get("full_name"))
        default_branch = str(repository.get("default_branch") or "main")
        head, head_ref = translate.head_sha(payload), translate.head_ref(payload)
        subject = translate.subject(payload)
        number = int(ref.rpartition("#")[2])
        is_pr = "pull_request" in payload or bool((subject or {}).get("pull_request"))
        if (is_pr or subject is None) and not (head and head_ref):
            # An issue_comment on a PR, or a CI event, does not carry the head: ask once.
            try:
                pull = github.call("get-pull-request", repo=repo, number=number)
            except NotFound:
                pull = None  # an issue, not a pull request
            if pull is not None:
                is_pr = True
                head, head_ref = str(pull["head_sha"]), str(pull["head_ref"])

        def resolve_ref() -> str:
            # Artifacts are read at the PR head for a pull request, else the default branch.
            return head or default_branch

        ci = RedisCI(self.redis, self.settings.prefix, repo)
        if head and is_pr:
            ci.remember(head, ref)
        return HookConfig(
            collaborators=self._load_collaborators(github, repo, default_branch),
            integrations={"github": github},
            files=GitHubFiles(github, repo, resolve_ref),
            enrolment_label=self.settings.enrolment_label,
            bot_logins=self.settings.bot_logins,
            ci=ci,
            head_sha=head,
            head_ref=head_ref,
        )

    def _load_collaborators(self, github: Integration, repo: str, branch: str) -> Collaborators:
        """``.the-loop/collaborators.yaml`` from the default branch only (never from a PR
        branch under review), cached for ``config_ttl`` seconds."""
        cached = self._collaborators.get(repo)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        try:
            text = github.call("get-file", repo=repo, path=COLLABORATORS_PATH, ref=branch)["text"]
        except NotFound:
            text = None
        try:
            collaborators = Collaborators.parse(text, f"{repo}:{COLLABORATORS_PATH}")
        except ConfigFileError as exc:
            # Fail closed: nobody is authorized until the file is fixed.
            log.error("%s", exc)
            collaborators = Collaborators()
        self._collaborators[repo] = (time.monotonic() + self.settings.config_ttl, collaborators)
        return collaborators

    def _fan_out(self, delivery_id: str, event: str, record: Mapping[str, Any],
                 refs: list[str]) -> int:
        """Queue ``delivery_id``'s payload again for each work item in ``refs``."""
        from webhook.enqueue import DeliveryQueue
        from webhook.events import Delivery

        queue = DeliveryQueue(self.redis, queue_name=self.settings.queue,
                              prefix=self.settings.prefix)
        body = record["body"] if isinstance(record["body"], bytes) else str(
            record["body"]).encode()
        payload = json.loads(body)
        installation = _text(record.get("installation_id", b"")) or None
        count = 0
        for i, ref in enumerate(sorted(refs)):
            count += queue.enqueue(Delivery(
                delivery_id=f"{delivery_id}-w{i}",
                event=event,
                action=None,
                body=body,
                payload=payload,
                installation_id=int(installation) if installation else None,
                repository=_text(record.get("repository", b"")) or None,
                work_item=ref,
            ))
        return count

    def _on_push(self, delivery_id: str, payload: Mapping[str, Any]) -> Handled:
        repository = payload.get("repository") or {}
        repo = str(repository.get("full_name"))
        default = f"refs/heads/{repository.get('default_branch')}"
        if payload.get("ref") == default and self._collaborators.pop(repo, None):
            return Handled(delivery_id, "ignored", "default branch changed; config refreshed")
        return Handled(delivery_id, "ignored", "push does not move a work item")
