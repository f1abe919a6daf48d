"""The sandbox's GitHub: the one fake GitHub (:class:`the_loop.sandbox.fakegithub.http.
HttpFakeGitHub`, the REST subset the-loop uses and git over HTTP) that also sends signed
webhook deliveries to a receiver for everything that happens in it, as GitHub does.

What is delivered (headers ``X-GitHub-Event``, ``X-GitHub-Delivery``,
``X-Hub-Signature-256``, ``User-Agent: GitHub-Hookshot/...``; GitHub docs "Webhook events
and payloads", "Validating webhook deliveries"; payload shapes follow the recorded
deliveries in ``tests/fixtures/github-webhooks/``), whoever acts (a person through the
``the-loop sandbox`` commands, or the-loop itself through the REST API, then ``sender``
is the App's bot, ``type: Bot``):

=========================  ==========================================================
``issues``                 ``opened`` (:meth:`SandboxGitHub.open_issue`, with its
                           labels, then one ``labeled`` each), ``labeled``,
                           ``unlabeled`` (on an issue), ``closed`` (each issue a merged
                           pull request's body closes: ``Closes #N``)
``pull_request``           ``opened``, ``labeled``, ``unlabeled``, ``synchronize`` (a
                           push to its head), ``ready_for_review``, ``closed``
                           (``merged: true`` after a merge, then the ``push`` to its
                           base; ``merged: false`` when closed unmerged)
``issue_comment``          ``created``
``pull_request_review``    ``submitted``
``push``                   a branch moved: ``git push`` over smart HTTP (receive-pack), a
                           commit through the contents API, a merge, or a branch deleted
                           (``deleted: true``)
``check_run``              ``created``, ``completed`` (GitHub has no action for a move
                           to ``in_progress``: nothing is sent then)
``check_suite``            ``completed`` (once every run of the suite completed)
=========================  ==========================================================

Check runs are the App's (through the REST API) or the sandbox's CI's
(:mod:`the_loop.sandbox.ci`, GitHub Actions' suite and runs); a run's and a suite's
objects are :func:`~the_loop.sandbox.fakegithub.http.checks.check_run_doc`'s and
:func:`~the_loop.sandbox.fakegithub.http.checks.check_suite_doc`'s.

Deliveries are posted in order from one background thread (never under the fake's
lock); each outcome is kept in :attr:`SandboxGitHub.deliveries` and, as GitHub logs it,
in the App's delivery log (one attempt per delivery or redelivery, with the receiver's
status: ``GET /app/hook/deliveries``); ``POST /app/hook/deliveries/{id}/attempts`` posts
that delivery again with the same ``X-GitHub-Delivery`` and logs it with
``redelivery: true`` (GitHub docs "Redelivering webhooks").
"""

from __future__ import annotations

import base64
import contextlib
import json
import queue
import re
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import requests

from the_loop.sandbox.fakegithub.http import GIT_PATH, HttpFakeGitHub
from the_loop.sandbox.fakegithub.http.checks import check_run_doc, check_suite_doc
from the_loop.sandbox.fakegithub.http.records import HookAttempt
from the_loop.sandbox.fakegithub.state import Repo, closed_by, now, run_git
from webhook.signature import sign

__all__ = ["Delivery", "SandboxGitHub"]

#: The ``User-Agent`` GitHub's webhook deliveries carry.
HOOKSHOT = "GitHub-Hookshot/the-loop-sandbox"
#: Seconds one delivery POST may take.
DELIVERY_TIMEOUT = 10.0
#: Attempts of one delivery while the receiver is not answering (it may still start).
DELIVERY_ATTEMPTS = 20


@dataclass
class Delivery:
    """One webhook delivery: ``status`` is the receiver's HTTP status (0: not reached);
    ``redelivery``: sent again at the App's request."""

    id: str
    event: str
    action: str | None
    sender: str
    status: int = 0
    redelivery: bool = False


class SandboxGitHub(HttpFakeGitHub):
    """The fake GitHub that delivers webhooks (see the module docstring).

    Args:
        webhook_url: the receiver's ``POST /webhook`` URL, or ``None`` (nothing is sent;
            :attr:`deliveries` still records what would have been).
        secret: the webhook secret deliveries are signed with.
        base_url: the URL this fake is served at (``html_url``/``url`` fields).
        installation_id: the App installation every delivery names.
        delivery_attempts: posts of one delivery while the receiver is not answering or
            answers 5xx (the last one's status is what the delivery log records; GitHub
            itself makes one: a test of failed deliveries passes 1).
        kwargs: :class:`HttpFakeGitHub`'s.
    """

    def __init__(self, *, webhook_url: str | None = None, secret: str = "",
                 base_url: str = "http://127.0.0.1", installation_id: int = 1,
                 delivery_attempts: int = DELIVERY_ATTEMPTS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delivery_attempts = max(1, int(delivery_attempts))
        self.webhook_url = webhook_url
        self.secret = secret
        self.base_url = base_url.rstrip("/")
        self.installation_id = installation_id
        self.issues: dict[tuple[str, int], dict[str, Any]] = {}  # (lower repo, n) -> issue
        self._deliveries: list[Delivery] = []
        self._outbox: queue.Queue[tuple[Delivery, bytes] | None] = queue.Queue()
        self._sender: threading.Thread | None = None
        self._session = requests.Session()
        #: Called with ``(repo, branch, before, after, pusher)`` for each branch a push
        #: moved, after its deliveries are queued (the sandbox's CI is one).
        self.push_listeners: list[Callable[[Repo, str, str, str, str], None]] = []
        inner = self.app.wsgi_app
        self.app.wsgi_app = self._watch_pushes(inner)  # type: ignore[method-assign]

    # -- deliveries -----------------------------------------------------------------

    @property
    def deliveries(self) -> list[Delivery]:
        """Copy of the deliveries made (or queued), in order."""
        with self.lock:
            return list(self._deliveries)

    def start_delivering(self) -> None:
        """Start the thread that posts deliveries (idempotent)."""
        with self.lock:
            if self._sender is None:
                self._sender = threading.Thread(target=self._deliver_loop, daemon=True,
                                                name="sandbox-deliveries")
                self._sender.start()

    def stop_delivering(self, timeout: float = 5.0) -> None:
        """Post what is queued, then stop the thread."""
        with self.lock:
            sender, self._sender = self._sender, None
        if sender is not None:
            self._outbox.put(None)
            sender.join(timeout)

    def wait_delivered(self, timeout: float = 10.0) -> bool:
        """Whether every queued delivery was posted within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._outbox.unfinished_tasks == 0:
                return True
            time.sleep(0.02)
        return False

    def emit(self, event: str, payload: dict[str, Any]) -> Delivery:
        """Queue one delivery of ``event`` with ``payload`` (``installation`` is added)."""
        payload = {**payload, "installation": {"id": self.installation_id,
                                               "node_id": f"I_{self.installation_id}"}}
        body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        sender = (payload.get("sender") or {}).get("login", "")
        delivery = Delivery(str(uuid.uuid4()), event, payload.get("action"), sender)
        with self.lock:
            self._deliveries.append(delivery)
        self._outbox.put((delivery, body))
        return delivery

    def _deliver_loop(self) -> None:
        while True:
            item = self._outbox.get()
            try:
                if item is None:
                    return
                self._post(*item)
            finally:
                self._outbox.task_done()

    def _post(self, delivery: Delivery, body: bytes) -> None:
        if not self.webhook_url:
            return
        headers = {"Content-Type": "application/json", "User-Agent": HOOKSHOT,
                   "X-GitHub-Event": delivery.event, "X-GitHub-Delivery": delivery.id,
                   "X-GitHub-Hook-ID": "1", "X-GitHub-Hook-Installation-Target-Type":
                   "integration", "X-GitHub-Hook-Installation-Target-ID": "1",
                   "X-Hub-Signature-256": sign(body, self.secret)}
        started = time.monotonic()
        try:
            for attempt in range(self.delivery_attempts):
                if attempt:
                    time.sleep(min(0.25 * attempt, 2.0))
                try:
                    answer = self._session.post(self.webhook_url, data=body,
                                                headers=headers, timeout=DELIVERY_TIMEOUT)
                except requests.RequestException:
                    delivery.status = 0
                    continue
                delivery.status = answer.status_code
                if answer.status_code < 500:
                    return
        finally:
            payload = json.loads(body)
            self.log_delivery(
                delivery.id, delivery.event, delivery.action, delivery.status, body=body,
                redelivery=delivery.redelivery, duration=round(time.monotonic() - started, 3),
                installation_id=self.installation_id,
                repository_id=(payload.get("repository") or {}).get("id"))

    def redeliver(self, attempt: HookAttempt) -> None:
        """Queue ``attempt``'s delivery again: same ``guid`` (``X-GitHub-Delivery``) and
        body, logged with ``redelivery: true`` once posted."""
        super().redeliver(attempt)
        delivery = Delivery(attempt.guid, attempt.event, attempt.action,
                            (json.loads(attempt.body or b"{}").get("sender") or {}).get(
                                "login", ""), redelivery=True)
        with self.lock:
            self._deliveries.append(delivery)
        self._outbox.put((delivery, attempt.body))

    # -- JSON shapes of payloads ------------------------------------------------------

    def user_payload(self, login: str) -> dict[str, Any]:
        """A ``sender``/``user`` object (``type: Bot`` for a ``[bot]`` login)."""
        return {"login": login, "id": zlib.crc32(login.encode()) % 10**8,
                "node_id": f"U_{login}", "avatar_url": "", "gravatar_id": "",
                "url": f"{self.base_url}/users/{login}",
                "html_url": f"{self.base_url}/{login}",
                "type": "Bot" if login.endswith("[bot]") else "User", "site_admin": False}

    def repository_payload(self, r: Repo) -> dict[str, Any]:
        """A ``repository`` object."""
        owner, _, name = r.full_name.partition("/")
        return {"id": r.id, "node_id": f"R_{r.id}", "name": name, "full_name": r.full_name,
                "private": r.private, "owner": self.user_payload(owner),
                "html_url": f"{self.base_url}/{r.full_name}", "description": None,
                "fork": False, "url": f"{self.base_url}/repos/{r.full_name}",
                "clone_url": f"{self.base_url}/{r.full_name}.git",
                "default_branch": r.default_branch, "archived": False, "disabled": False,
                "visibility": "private" if r.private else "public"}

    def _label_payload(self, r: Repo, name: str) -> dict[str, Any]:
        label = r.labels.get(name.lower()) or {"id": 0, "name": name, "color": "ededed",
                                               "description": ""}
        return {"id": label["id"], "node_id": f"LA_{label['id']}", "name": label["name"],
                "url": f"{self.base_url}/repos/{r.full_name}/labels/{label['name']}",
                "color": label["color"], "default": False,
                "description": label["description"] or None}

    def _labels_payload(self, r: Repo, number: int) -> list[dict[str, Any]]:
        return [self._label_payload(r, n) for n in r.issue_labels.get(number, [])]

    def issue_payload(self, r: Repo, number: int) -> dict[str, Any]:
        """An ``issue`` object (with ``pull_request`` when ``number`` is one)."""
        issue = self.issues.get((r.full_name.lower(), number)) or {}
        pr = r.pulls.get(number)
        api = f"{self.base_url}/repos/{r.full_name}/issues/{number}"
        doc: dict[str, Any] = {
            "url": api, "repository_url": f"{self.base_url}/repos/{r.full_name}",
            "html_url": f"{self.base_url}/{r.full_name}/issues/{number}",
            "id": issue.get("id", number), "node_id": f"I_{number}", "number": number,
            "title": issue.get("title") or (pr or {}).get("title") or "",
            "user": self.user_payload(issue.get("user") or (pr or {}).get("user")
                                      or self.user_login),
            "labels": self._labels_payload(r, number), "state": issue.get("state", "open"),
            "locked": False, "assignee": None, "assignees": [], "milestone": None,
            "comments": len(self.comments_on(r.full_name, number)),
            "created_at": issue.get("created_at", now()), "updated_at": now(),
            "closed_at": issue.get("closed_at"), "author_association": "OWNER",
            "body": issue.get("body") or (pr or {}).get("body") or None}
        if pr is not None:
            doc["pull_request"] = {"url": f"{self.base_url}/repos/{r.full_name}/pulls/"
                                   f"{number}", "html_url": f"{self.base_url}/"
                                   f"{r.full_name}/pull/{number}"}
        return doc

    def pull_payload(self, r: Repo, number: int) -> dict[str, Any]:
        """A ``pull_request`` object."""
        pr = r.pulls[number]
        owner = r.full_name.split("/")[0]
        repo = self.repository_payload(r)

        def side(ref: str, sha: str) -> dict[str, Any]:
            return {"label": f"{owner}:{ref}", "ref": ref, "sha": sha,
                    "user": self.user_payload(owner), "repo": repo}

        return {
            "url": f"{self.base_url}/repos/{r.full_name}/pulls/{number}", "id": pr["id"],
            "node_id": f"PR_{pr['id']}", "number": number, "state": pr["state"],
            "html_url": f"{self.base_url}/{r.full_name}/pull/{number}",
            "title": pr["title"], "body": pr.get("body") or None, "locked": False,
            "user": self.user_payload(pr["user"]), "draft": bool(pr.get("draft")),
            "labels": self._labels_payload(r, number), "merged": bool(pr.get("merged")),
            "merged_by": (self.user_payload(pr["merged_by"]) if pr.get("merged_by")
                          else None),
            "merge_commit_sha": pr.get("merge_commit_sha"),
            "requested_reviewers": [self.user_payload(u) for u in pr["requested"]],
            "created_at": now(), "updated_at": now(), "closed_at": pr.get("closed_at"),
            "merged_at": pr.get("merged_at"),
            "head": side(pr["head_ref"], self.pull_head(r, pr)),
            "base": side(pr["base_ref"], self.branch_sha(r, pr["base_ref"]) or "0" * 40),
            "author_association": "OWNER"}

    def _base(self, r: Repo, action: str | None) -> dict[str, Any]:
        doc: dict[str, Any] = {} if action is None else {"action": action}
        doc.update(repository=self.repository_payload(r),
                   sender=self.user_payload(self.actor))
        return doc

    def _issue_event(self, r: Repo, number: int, action: str, **extra: Any) -> None:
        if number in r.pulls:
            self.emit("pull_request", {**self._base(r, action), "number": number,
                                       "pull_request": self.pull_payload(r, number), **extra})
        else:
            self.emit("issues", {**self._base(r, action),
                                 "issue": self.issue_payload(r, number), **extra})

    # -- what people do (the ``the-loop sandbox`` commands) ---------------------------

    def open_issue(self, repo: str, title: str, body: str = "",
                   labels: Iterable[str] = ()) -> int:
        """Open an issue as :attr:`actor` (``issues.opened``, then ``issues.labeled`` for
        each label, as GitHub sends them). Returns its number."""
        with self.lock:
            r = self.repo(repo)
            used = [*r.pulls, *r.issue_labels, *(n for (name, n) in self.issues
                                                 if name == r.full_name.lower()),
                    *(c["number"] for c in self.comment_store.values()
                      if c["repo"] == r.full_name)]
            number = max(used, default=0) + 1
            self.issues[(r.full_name.lower(), number)] = {
                "id": self.next_id(), "title": title, "body": body, "user": self.actor,
                "state": "open", "created_at": now()}
            names = list(dict.fromkeys(labels))
            r.issue_labels[number] = [self.add_repo_label(repo, n)["name"] for n in names]
            self.record(f"{r.full_name}#{number}:open-issue")
            # GitHub: ``opened`` carries the labels it was created with, then one
            # ``labeled`` per label follows.
            self._issue_event(r, number, "opened")
            for name in r.issue_labels[number]:
                self.record(f"{r.full_name}#{number}:add-label:{name}")
                self._issue_event(r, number, "labeled", label=self._label_payload(r, name))
            return number

    def submit_review(self, repo: str, number: int, state: str, body: str = "") -> int:
        """Submit a review as :attr:`actor` (``APPROVED``, ``CHANGES_REQUESTED`` or
        ``COMMENTED``; ``pull_request_review.submitted``). Returns its id.

        Raises:
            KeyError: ``number`` is not a pull request.
        """
        with self.lock:
            r = self.repo(repo)
            if number not in r.pulls:
                raise KeyError(f"#{number} of {r.full_name} is not a pull request")
            review_id = self.add_review(r.full_name, number, self.actor, state, body=body)
            review = next(v for v in r.pulls[number]["reviews"] if v["id"] == review_id)
            self.record(f"{r.full_name}#{number}:submit-review:{state}")
            self.emit("pull_request_review", {
                **self._base(r, "submitted"),
                "review": {"id": review_id, "node_id": f"PRR_{review_id}",
                           "user": self.user_payload(self.actor), "body": body or None,
                           "commit_id": review["commit_id"],
                           "submitted_at": review["submitted_at"],
                           "state": state.lower(), "author_association": "OWNER",
                           "html_url": f"{self.base_url}/{r.full_name}/pull/{number}"
                           f"#pullrequestreview-{review_id}"},
                "pull_request": self.pull_payload(r, number)})
            return review_id

    def mark_ready(self, repo: str, number: int) -> None:
        """Mark draft pull request ``number`` ready for review as :attr:`actor`
        (``pull_request.ready_for_review``, from :meth:`marked_ready`)."""
        with self.lock:
            if self.repo(repo).pulls.get(number) is not None:
                self.mark_pull_request_ready(repo, number)

    def marked_ready(self, r: Repo, number: int) -> None:
        """A draft was taken out of draft (by a person, or by GraphQL's
        ``markPullRequestReadyForReview``): ``pull_request.ready_for_review``."""
        self._issue_event(r, number, "ready_for_review")

    def close_issue(self, repo: str, number: int) -> bool:
        """Close open issue ``number`` as :attr:`actor` (``issues.closed``, ``state_reason``
        ``completed``). Returns whether it was open (a pull request, an unknown number or a
        closed issue: nothing happens)."""
        with self.lock:
            r = self.repo(repo)
            issue = self.issues.get((r.full_name.lower(), number))
            if issue is None or issue.get("state") == "closed":
                return False
            issue.update(state="closed", closed_at=now(), state_reason="completed")
            self.record(f"{r.full_name}#{number}:close-issue")
            self.emit("issues", {**self._base(r, "closed"),
                                 "issue": {**self.issue_payload(r, number),
                                           "state_reason": "completed"}})
            return True

    def merge_pull(self, repo: str, number: int, merge_method: str = "squash") -> Any:
        """Merge pull request ``number`` at its current head as :attr:`actor` (a person's
        merge button); as :meth:`merge_pull_request`."""
        with self.lock:
            r = self.repo(repo)
            if number not in r.pulls:
                raise KeyError(f"#{number} of {r.full_name} is not a pull request")
            head = self.pull_head(r, r.pulls[number])
            return self.merge_pull_request(repo, number, head, merge_method)

    # -- the operations, delivering what they did -------------------------------------

    def merge_pull_request(self, repo: str, number: int, sha: str,
                           merge_method: str = "squash") -> Any:
        """As the fake's, then delivered as GitHub does: ``pull_request.closed`` with
        ``merged: true``, the ``push`` to the base branch, and ``issues.closed`` for each
        issue the body closes (``Closes #N``) when the base is the default branch
        ("Linking a pull request to an issue")."""
        with self.lock:
            r = self.repo(repo)
            pr = r.pulls.get(number) or {}
            base = str(pr.get("base_ref") or r.default_branch)
            before = self.branch_sha(r, base)
            merged = super().merge_pull_request(repo, number, sha, merge_method)
            self._issue_event(r, number, "closed")
            after = self.branch_sha(r, base)
            if r.git_dir is not None and before and after and before != after:
                self._pushed(r, {base: (before, after)}, self.actor)
            if base == r.default_branch:
                for closes in closed_by(pr.get("body")):
                    self.close_issue(repo, closes)
            return merged

    def close_pull_request(self, repo: str, number: int) -> Any:
        """As the fake's; ``pull_request.closed`` with ``merged: false`` when it was open."""
        with self.lock:
            r = self.repo(repo)
            was = (r.pulls.get(number) or {}).get("state")
            closed = super().close_pull_request(repo, number)
            if was == "open":
                self._issue_event(r, number, "closed")
            return closed

    def delete_branch(self, repo: str, branch: str) -> Any:
        """As the fake's; a deleted branch is delivered as a ``push`` with ``deleted:
        true`` (GitHub also sends ``delete``, which the-loop does not subscribe to)."""
        with self.lock:
            r = self.repo(repo)
            before = self.branch_sha(r, branch)
            deleted = super().delete_branch(repo, branch)
            if deleted.get("deleted") and before:
                self._pushed(r, {branch: (before, "0" * 40)}, self.actor)
            return deleted

    def add_label(self, repo: str, number: int, label: str) -> Any:
        with self.lock:
            r = self.repo(repo)
            had = label.lower() in (n.lower() for n in r.issue_labels.get(number, []))
            result = super().add_label(repo, number, label)
            if not had:
                self._issue_event(r, number, "labeled",
                                  label=self._label_payload(r, label))
            return result

    def remove_label(self, repo: str, number: int, label: str) -> Any:
        with self.lock:
            r = self.repo(repo)
            result = super().remove_label(repo, number, label)
            if result.get("labels") is not None:
                self._issue_event(r, number, "unlabeled",
                                  label=self._label_payload(r, label))
            return result

    def comment(self, repo: str, number: int, body: str) -> Any:
        with self.lock:
            posted = super().comment(repo, number, body)
            c = self.comment_store[posted["id"]]
            r = self.repo(repo)
            api = f"{self.base_url}/repos/{r.full_name}/issues"
            self.emit("issue_comment", {
                **self._base(r, "created"), "issue": self.issue_payload(r, number),
                "comment": {"url": f"{api}/comments/{c['id']}",
                            "html_url": f"{self.base_url}{self.comment_url(c)}",
                            "issue_url": f"{api}/{number}", "id": c["id"],
                            "node_id": f"IC_{c['id']}", "user": self.user_payload(c["user"]),
                            "created_at": c["created_at"], "updated_at": c["updated_at"],
                            "author_association": "OWNER", "body": c["body"]}})
            return posted

    def create_pull_request(self, repo: str, head: str, base: str, title: str, body: str,
                            draft: bool = True) -> Any:
        with self.lock:
            created = super().create_pull_request(repo, head, base, title, body, draft)
            r = self.repo(repo)
            self._issue_event(r, created["number"], "opened")
            return created

    def put_file(self, repo: str, path: str, branch: str, text: str,
                 sha: str | None = None, message: str | None = None) -> Any:
        with self.lock:
            r = self.repo(repo)
            before = self.branch_sha(r, branch) if r.git_dir is not None else None
            put = super().put_file(repo, path, branch, text, sha=sha, message=message)
            if r.git_dir is not None:
                self._pushed(r, {branch: (before or "0" * 40, put["commit"])}, self.actor)
            return put

    def create_check_run(self, repo: str, head_sha: str, name: str, status: str,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None,
                         details_url: str | None = None, **more: Any) -> Any:
        with self.lock:
            created = super().create_check_run(repo, head_sha, name, status, conclusion,
                                               title, summary, details_url, **more)
            r = self.repo(repo)
            run = r.check_runs[created["id"]]
            self._check_run_event(r, run, "created")
            if run["status"] == "completed":
                self._check_run_event(r, run, "completed")
                self._suite_event(r, run)
            return created

    def update_check_run(self, repo: str, check_run_id: int, status: str | None = None,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None,
                         details_url: str | None = None, **more: Any) -> Any:
        with self.lock:
            r = self.repo(repo)
            was = (r.check_runs.get(check_run_id) or {}).get("status")
            suite = r.check_suites.get(
                (r.check_runs.get(check_run_id) or {}).get("check_suite_id") or 0)
            suite_was = suite["status"] if suite else None
            updated = super().update_check_run(repo, check_run_id, status, conclusion,
                                               title, summary, details_url, **more)
            run = r.check_runs[check_run_id]
            if run["status"] == "completed" and was != "completed":
                self._check_run_event(r, run, "completed")
                if suite is not None and suite_was != "completed":
                    self._suite_event(r, run)
            return updated

    def _check_run_event(self, r: Repo, run: dict[str, Any], action: str) -> None:
        """Deliver ``check_run.ACTION`` (GitHub's actions: ``created`` when a run is made,
        queued or not, and ``completed``; a move to ``in_progress`` sends nothing)."""
        self.emit("check_run", {**self._base(r, action), "check_run": check_run_doc(
            self, r, run, self.base_url, self.base_url, webhook=True)})

    def _suite_event(self, r: Repo, run: dict[str, Any]) -> None:
        """Deliver ``check_suite.completed`` once ``run``'s suite has completed (all its
        runs have)."""
        suite = r.check_suites.get(run.get("check_suite_id") or 0)
        if suite is not None and suite["status"] == "completed":
            self.emit("check_suite", {**self._base(r, "completed"), "check_suite":
                                      check_suite_doc(self, r, suite, self.base_url,
                                                      self.base_url, part="webhook")})

    # -- pushes -----------------------------------------------------------------------

    def branches(self, repo: str | Repo) -> dict[str, str]:
        """``{branch: sha}`` of a git-backed repository (``{}`` otherwise)."""
        r = repo if isinstance(repo, Repo) else self.lookup(repo)
        if r is None or r.git_dir is None:
            return {}
        out = run_git(r.git_dir, "for-each-ref", "--format=%(refname:strip=2) %(objectname)",
                      "refs/heads").stdout.decode()
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    def _pushed(self, r: Repo, moved: dict[str, tuple[str, str]], pusher: str) -> None:
        """Deliver ``push`` for each moved branch and ``pull_request.synchronize`` for
        each open pull request whose head it is, then tell :attr:`push_listeners` of
        each branch that still exists."""
        with self.lock, self.acting_as(pusher):
            for branch, (before, after) in sorted(moved.items()):
                self.emit("push", {**self._base(r, None), **self._push_payload(
                    r, branch, before, after, pusher)})
                if after == "0" * 40:
                    continue
                for number, pr in sorted(r.pulls.items()):
                    if pr["state"] == "open" and pr["head_ref"] == branch:
                        self.emit("pull_request", {
                            **self._base(r, "synchronize"), "number": number,
                            "before": before, "after": after,
                            "pull_request": self.pull_payload(r, number)})
                for listener in list(self.push_listeners):
                    listener(r, branch, before, after, pusher)

    def _push_payload(self, r: Repo, branch: str, before: str, after: str,
                      pusher: str) -> dict[str, Any]:
        zero = "0" * 40
        commits: list[dict[str, Any]] = []
        if after != zero and r.git_dir is not None:
            span = after if before == zero else f"{before}..{after}"
            listed = run_git(r.git_dir, "rev-list", "--reverse", "--max-count=20", span,
                             check=False).stdout.decode().split()
            commits = [self._commit_payload(r, sha) for sha in listed]
        return {"ref": f"refs/heads/{branch}", "before": before, "after": after,
                "created": before == zero, "deleted": after == zero, "forced": False,
                "base_ref": None, "compare": f"{self.base_url}/{r.full_name}/compare/"
                f"{before[:12]}...{after[:12]}", "commits": commits,
                "head_commit": commits[-1] if commits else None,
                "pusher": {"name": pusher, "email": f"{pusher}@users.noreply"}}

    def _commit_payload(self, r: Repo, sha: str) -> dict[str, Any]:
        assert r.git_dir is not None
        show = run_git(r.git_dir, "show", "-s", "--format=%T%n%an%n%ae%n%cI%n%B", sha,
                       check=False).stdout.decode("utf-8", "replace").split("\n", 4)
        tree, name, email, stamp, message = (show + [""] * 5)[:5]
        changed = run_git(r.git_dir, "diff-tree", "--root", "--no-commit-id", "-r",
                          "--name-status", sha, check=False).stdout.decode().splitlines()
        files: dict[str, list[str]] = {"A": [], "D": [], "M": []}
        for line in changed:
            status, _, path = line.partition("\t")
            files.setdefault(status[:1], []).append(path)
        author = {"name": name, "email": email, "username": name}
        return {"id": sha, "tree_id": tree, "distinct": True, "message": message.strip(),
                "timestamp": stamp, "url": f"{self.base_url}/{r.full_name}/commit/{sha}",
                "author": author, "committer": author, "added": files["A"],
                "removed": files["D"], "modified": files["M"]}

    def _pusher(self, authorization: str) -> str:
        """Who pushes with ``authorization`` (git's HTTP Basic header): the login its
        password, a token, acts as (:meth:`git_login`: the bot for an installation token,
        the person for theirs); ``""`` for none (git's request is refused, nothing
        moves)."""
        scheme, _, value = authorization.partition(" ")
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            if scheme.lower() == "basic":
                password = base64.b64decode(value).decode("utf-8").partition(":")[2]
                return self.git_login(password) or ""
        return ""

    def _watch_pushes(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        """WSGI middleware: around a ``git-receive-pack`` request (a push), the
        branches before and after; once the answer is streamed, what moved is
        delivered."""

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            path = environ.get("PATH_INFO", "")
            match = GIT_PATH.match(path)
            if (match is None or environ.get("REQUEST_METHOD") != "POST"
                    or not path.endswith("/git-receive-pack")):
                return inner(environ, start_response)
            r = self.lookup(f"{match[1]}/{match[2]}")
            if r is None:
                return inner(environ, start_response)
            before = self.branches(r)
            pusher = self._pusher(environ.get("HTTP_AUTHORIZATION", ""))
            return _Closing(inner(environ, start_response),
                            lambda: self._after_push(r, before, pusher))

        return app

    def _after_push(self, r: Repo, before: dict[str, str], pusher: str) -> None:
        after = self.branches(r)
        moved = {b: (before.get(b, "0" * 40), after.get(b, "0" * 40))
                 for b in set(before) | set(after) if before.get(b) != after.get(b)}
        if moved:
            self._pushed(r, moved, pusher)


class _Closing:
    """A WSGI body that calls ``then`` once it is closed (the answer fully sent)."""

    def __init__(self, body: Iterable[bytes], then: Callable[[], None]) -> None:
        self.body, self.then = body, then

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.then()


#: A GitHub login: alphanumerics and single hyphens, 39 characters at most.
LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$")
