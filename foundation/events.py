"""One GitHub webhook delivery as a typed value, parsed once.

:class:`GitHubEvent` is built once from the ``X-GitHub-Event`` name and the parsed
payload (:meth:`GitHubEvent.parse`); every fact the-loop uses from a delivery is read
off it: repository, installation, the work item it is about, sender, labels, pull
request head, the comment or review, a CI result, a push. Nothing here performs I/O.

Field names follow GitHub's "Webhook events and payloads" documentation. Untrusted text
(a comment's body) is carried, never logged (it is left out of ``repr``).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from foundation.config.repository import DEFAULT_SPEC_DIR
from graph.model import InboundEvent, WorkItem
from graph.refs import RefError, WorkItemRef
from graph.work import TURN_COMPLETED

__all__ = [
    "CIResult",
    "Comment",
    "CommentKind",
    "GitHubEvent",
    "Sender",
    "envelope",
    "loads",
    "work_item_ref",
]

# --- JSON ---------------------------------------------------------------------------

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency; stay correct without it
    _orjson = None  # type: ignore[assignment]


def loads(document: bytes | str) -> Any:
    """Parse a JSON document: with orjson when it is installed (about twice as fast as
    the standard library on a 15 KB payload), falling back to :func:`json.loads` for
    whatever orjson refuses, so exactly the documents ``json.loads`` accepts are accepted
    (NaN and Infinity, UTF-16/32, lone surrogates), with the same values -- except that
    orjson reads an integer beyond 64 bits as a float (GitHub's ids stay below 2**53).

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``, ``UnicodeDecodeError``).
        RecursionError: nested too deep.
    """
    if _orjson is not None:
        try:
            return _orjson.loads(document)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(document)


# --- small readers ------------------------------------------------------------------


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else None


def _mapping(obj: Any, key: str) -> Mapping[str, Any]:
    value = _get(obj, key)
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    # bool is an int subclass; a JSON true is never an id.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> int | None:
    number = _int(value)
    return number if number is not None and number > 0 else None


def _time(value: Any) -> float | None:
    """GitHub's ISO 8601 timestamp (``2019-05-15T15:20:21Z``) as Unix seconds, or
    ``None`` when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# --- work items ---------------------------------------------------------------------

#: The event of the runner's report that an agent turn ended (:mod:`foundation.turns`):
#: written into the inbox by the-loop itself, never accepted from a webhook (GitHub's
#: event names have no ``-`` or ``.``; the receiver refuses it all the same).
TURN_EVENT: Final = "the-loop.turn"
#: The worker's monitor sweep: a waiting gate's reminder is due (action ``stale``).
MONITOR_EVENT: Final = "the-loop.monitor"
#: Event names only the-loop itself may queue.
INTERNAL_EVENTS: Final = frozenset({TURN_EVENT, MONITOR_EVENT})

_ISSUE_EVENTS = frozenset({"issues", "issue_comment", TURN_EVENT, MONITOR_EVENT})
_PULL_REQUEST_EVENTS = frozenset(
    {"pull_request", "pull_request_review", "pull_request_review_comment"}
)
# Events whose object (under the key named like the event) carries a "pull_requests"
# list: the pull requests whose head matches.
_CHECK_EVENTS = frozenset({"check_run", "check_suite", "workflow_run"})
_REPOS_PATH = re.compile(r"/repos/([^/]+/[^/]+?)/?$")


def _ref(full_name: Any, number: int | None) -> WorkItemRef | None:
    if number is None or not isinstance(full_name, str):
        return None
    try:
        return WorkItemRef(full_name, number)
    except RefError:
        return None


def work_item_ref(event: str, payload: Mapping[str, Any]) -> WorkItemRef | None:
    """The work item (issue or pull request) a delivery is about, or None.

    Args:
        event: the ``X-GitHub-Event`` value.
        payload: the parsed payload.

    Returns:
        ``github:OWNER/REPO#N`` where OWNER/REPO is ``repository.full_name`` and N is:

        - ``issues``, ``issue_comment``: ``issue.number`` (an issue comment on a pull
          request has ``issue.pull_request`` set and ``issue.number`` is the PR number:
          issues and PRs share one number space, so the ref form is the same);
        - ``pull_request``, ``pull_request_review``, ``pull_request_review_comment``:
          ``pull_request.number``;
        - ``check_run``, ``check_suite``, ``workflow_run``: the first entry of the
          object's ``pull_requests`` list; its repository is taken from that entry's
          ``base.repo`` (GitHub may list pull requests of another repository whose head
          matches), using ``repository.full_name`` when it is the same repository or
          the entry names no base repository;
        - every other event (push, status, installation, label, ping, ...): None.

        None as well when the fields are missing or malformed.
    """
    repository = _get(payload, "repository")
    full_name = _get(repository, "full_name")
    if event in _ISSUE_EVENTS:
        return _ref(full_name, _number(_get(_get(payload, "issue"), "number")))
    if event in _PULL_REQUEST_EVENTS:
        return _ref(full_name, _number(_get(_get(payload, "pull_request"), "number")))
    if event not in _CHECK_EVENTS:
        return None
    pulls = _get(_get(payload, event), "pull_requests")
    if not isinstance(pulls, list) or not pulls:
        return None
    first = pulls[0]
    number = _number(_get(first, "number"))
    base_repo = _get(_get(first, "base"), "repo")
    base_id = _get(base_repo, "id")
    if base_id is not None and base_id == _get(repository, "id"):
        return _ref(full_name, number)
    url = _get(base_repo, "url")
    match = _REPOS_PATH.search(url) if isinstance(url, str) else None
    if match:
        return _ref(match.group(1), number)
    # No usable base repo: only trust the event's repository if nothing says otherwise.
    return _ref(full_name, number) if base_id is None else None


# --- CI results ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CIResult:
    """One CI result for a commit: ``name`` (check run, app slug of a check suite,
    workflow name, or status context) and its ``conclusion`` (GitHub's word; a commit
    status's ``state``; ``pending`` while not completed); ``attempt`` (a workflow run's
    ``run_attempt``, 0 when the event has none) and ``at`` (``completed_at``, else
    ``updated_at``/``started_at``, ISO 8601 as GitHub sends it; ``""`` when absent) order
    results of one name: a rerun's result replaces the first, a late older one does not;
    ``run_id``: a check run's ``id`` (for a GitHub Actions job, also its job's id), which
    ``verify-tests`` reads the failure's output, annotations and log by; ``None`` for the
    other events."""

    repository: str
    sha: str
    name: str
    conclusion: str
    attempt: int = 0
    at: str = ""
    run_id: int | None = None

    @property
    def order(self) -> str:
        """A text that sorts as the results do by recency: attempt, then time."""
        return f"{self.attempt:08d}|{self.at}"


def _ci_result(event: str, repository: str | None,
               payload: Mapping[str, Any]) -> CIResult | None:
    """The CI result a ``check_run``, ``check_suite``, ``workflow_run`` or ``status``
    payload reports, else ``None``."""
    if not repository:
        return None
    if event in _CHECK_EVENTS:
        obj = _mapping(payload, event)
        if event == "check_suite":
            name = _get(_get(obj, "app"), "slug") or "check_suite"
        else:
            name = obj.get("name")
        sha = obj.get("head_sha")
        conclusion = obj.get("conclusion") if obj.get("status") == "completed" else "pending"
    elif event == "status":
        name, sha, conclusion = payload.get("context"), payload.get("sha"), payload.get("state")
    else:
        return None
    if not (name and sha and conclusion):
        return None
    source = _mapping(payload, event) if event in _CHECK_EVENTS else payload
    attempt = _int(source.get("run_attempt")) or 0
    at = next((str(source[k]) for k in ("completed_at", "updated_at", "started_at")
               if isinstance(source.get(k), str)), "")
    run_id = _int(source.get("id")) if event == "check_run" else None
    return CIResult(repository, str(sha), str(name), str(conclusion), attempt, at,
                    run_id or None)


# --- linked tickets -----------------------------------------------------------------

#: A Jira issue key ("What is an issue key?": the project key, upper-case letters,
#: digits or ``_`` starting with a letter, a dash, the issue number).
JIRA_KEY = re.compile(r"(?<![A-Za-z0-9_-])([A-Z][A-Z0-9_]+-[1-9][0-9]{0,8})(?![A-Za-z0-9_-])")
#: Keys read from one title and body at most.
MAX_TICKETS = 5


def ticket_keys(*texts: str | None) -> tuple[str, ...]:
    """The Jira issue keys (``ABC-123``) named in ``texts``, first seen first, at most
    :data:`MAX_TICKETS` (only the keys are kept, never the text around them)."""
    found: dict[str, None] = {}
    for text in texts:
        for match in JIRA_KEY.finditer(text or ""):
            found.setdefault(match.group(1), None)
            if len(found) >= MAX_TICKETS:
                return tuple(found)
    return tuple(found)


# --- people and comments ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sender:
    """Who caused the event: ``sender.login``, ``sender.type`` (``User``, ``Bot``,
    ``Organization``) and ``sender.id`` (the account's user id, which a login does not
    keep across a rename), ``None`` when the payload has no sender."""

    login: str | None = None
    type: str | None = None
    id: int | None = None

    @property
    def is_bot(self) -> bool:
        """Whether GitHub says the sender is a bot (``sender.type == "Bot"``)."""
        return self.type == "Bot"


#: ``issue_comment`` (on an issue or a pull request's conversation), ``review_comment``
#: (on a pull request's diff) or ``review`` (a pull request review).
CommentKind = Literal["issue_comment", "review_comment", "review"]


@dataclass(frozen=True, slots=True)
class Comment:
    """The comment or review a delivery carries (``payload.comment``, else
    ``payload.review``).

    Attributes:
        kind: see :data:`CommentKind`.
        id: the comment's or review's id.
        body: its text, untrusted (never logged; hooks read it only for authorized
            people).
        author: ``user.login`` of the comment or review (differs from the sender when
            someone else edited it).
        author_id: ``user.id`` of the comment or review, or ``None``.
        review_state: ``review.state`` upper-cased (``APPROVED``...), for a review.
        review_commit: ``review.commit_id``, the commit a review was submitted on.
        created_at, updated_at: its ``created_at`` and ``updated_at`` (a review's
            ``submitted_at`` for both), Unix seconds, or ``None``.
        previous_body: an edit's earlier text (``changes.body.from``), untrusted, or
            ``None``.
    """

    kind: CommentKind
    id: int | None = None
    body: str | None = field(default=None, repr=False)
    author: str | None = None
    review_state: str | None = None
    review_commit: str | None = None
    created_at: float | None = None
    updated_at: float | None = None
    previous_body: str | None = field(default=None, repr=False)
    author_id: int | None = None


def _comment(event: str, payload: Mapping[str, Any]) -> Comment | None:
    review = _mapping(payload, "review")
    source = payload.get("comment") or review
    if not isinstance(source, Mapping) or not source:
        return None
    kind: CommentKind
    if source is review:
        kind = "review"
    elif event == "pull_request_review_comment":
        kind = "review_comment"
    else:
        kind = "issue_comment"
    state = review.get("state")
    created = _time(source.get("created_at") or source.get("submitted_at"))
    return Comment(
        kind=kind,
        id=_int(source.get("id")),
        body=_str(source.get("body")),
        author=_str(_get(source.get("user"), "login")),
        author_id=_int(_get(source.get("user"), "id")),
        review_state=str(state).upper() if state else None,
        review_commit=_str(review.get("commit_id")),
        created_at=created,
        updated_at=_time(source.get("updated_at")) or created,
        previous_body=_str(_get(_get(payload.get("changes"), "body"), "from")),
    )


def envelope(payload: Mapping[str, Any]) -> tuple[str | None, int | None, str | None]:
    """The facts every delivery's record carries, read off ``payload`` without the rest
    of :meth:`GitHubEvent.parse` (the receiver's hot path needs only these and
    :func:`work_item_ref`).

    Returns:
        ``(action, installation_id, repository)``: the payload's ``action``,
        ``installation.id`` and ``repository.full_name``, each ``None`` when absent or
        not of its JSON type. Never raises.
    """
    return (_str(payload.get("action")), _int(_get(payload.get("installation"), "id")),
            _str(_mapping(payload, "repository").get("full_name")))


# --- the event ----------------------------------------------------------------------

class Derive(enum.Enum):
    """The type of :data:`DERIVE`."""

    DERIVE = "derive"


#: :meth:`GitHubEvent.parse` derives the work item from the payload.
DERIVE: Final = Derive.DERIVE

#: What a delivery is about: ``issue``, ``pull_request``, or ``None`` (push, status...).
SubjectKind = Literal["issue", "pull_request"]


@dataclass(frozen=True, slots=True)
class GitHubEvent:
    """One delivery, read once (build it with :meth:`parse`).

    Attributes:
        name: the ``X-GitHub-Event`` value, e.g. ``"pull_request"``.
        action: the payload's ``action``, or ``None`` (push, status... have none).
        repository: ``repository.full_name`` (``OWNER/REPO``), or ``None``.
        repository_id: ``repository.id``, or ``None``.
        default_branch: ``repository.default_branch``, or ``None``.
        installation_id: ``installation.id`` (GitHub Apps), or ``None``.
        ref: the work item the payload names (see :func:`work_item_ref`), or ``None``.
        kind: ``pull_request`` when the payload carries a pull request (or an issue
            that is one), ``issue`` for an issue, ``None`` when it names neither.
        sender: who caused the event.
        labels: names of the labels on the issue or pull request, as GitHub sent them.
        label: the label added or removed (``labeled``/``unlabeled``), or ``None``.
        head_sha: ``pull_request.head.sha``, or ``None``.
        head_ref: ``pull_request.head.ref`` (the head branch), or ``None``.
        head_repo: ``pull_request.head.repo.full_name`` (the repository holding the head
            branch: a fork's for a pull request from a fork); ``""`` when GitHub sends
            ``null`` (the fork was deleted); ``None`` when the payload does not say.
        maintainer_can_modify: ``pull_request.maintainer_can_modify`` (a fork allows the
            base repository's maintainers to push to its head branch), or ``None``.
        comment: the comment or review, or ``None``.
        ci: the CI result a check run, check suite, workflow run or commit status
            reports, or ``None``.
        pushed_ref: a push's ``ref`` (``refs/heads/BRANCH``), or ``None``.
        after: a push's ``after`` (the new head commit), or ``None``.
        title: the issue's or pull request's title (untrusted: only ever made into a
            branch name's ASCII slug), or ``None``.
        turn: the runner's report of a :data:`TURN_EVENT`, or ``None``.
        draft: ``pull_request.draft``, or ``None`` when the payload carries no pull
            request (an issue comment's payload does not say).
        pull_number: ``pull_request.number``, or ``None``.
        tickets: Jira issue keys the issue's or pull request's title and body name.
        merged: ``pull_request.merged`` (``pull_request.closed``: merged, or closed
            without merging), or ``None`` when the payload carries no pull request.
        merged_by: ``pull_request.merged_by.login``, or ``None``.
    """

    name: str
    action: str | None = None
    repository: str | None = None
    repository_id: int | None = None
    default_branch: str | None = None
    installation_id: int | None = None
    ref: WorkItemRef | None = None
    kind: SubjectKind | None = None
    sender: Sender = field(default_factory=Sender)
    labels: tuple[str, ...] = ()
    label: str | None = None
    head_sha: str | None = None
    head_ref: str | None = None
    head_repo: str | None = None
    maintainer_can_modify: bool | None = None
    comment: Comment | None = None
    ci: CIResult | None = None
    pushed_ref: str | None = None
    after: str | None = None
    title: str | None = field(default=None, repr=False)
    turn: Mapping[str, Any] | None = None
    draft: bool | None = None
    pull_number: int | None = None
    tickets: tuple[str, ...] = ()
    merged: bool | None = None
    merged_by: str | None = None

    @classmethod
    def parse(cls, event: str, payload: Mapping[str, Any],
              ref: WorkItemRef | None | Derive = DERIVE) -> GitHubEvent:
        """Read every fact the-loop uses off ``payload`` (never raises: a missing or
        malformed field is ``None`` or empty).

        Args:
            event: the ``X-GitHub-Event`` value.
            payload: the delivery's JSON object.
            ref: the work item, when the caller knows it already (the worker reads it
                from the stored record: the receiver's, or the one a CI result was
                fanned out to); by default it is derived (:func:`work_item_ref`).
        """
        repository = _mapping(payload, "repository")
        pull = _mapping(payload, "pull_request")
        head = _mapping(pull, "head")
        turn = _mapping(payload, "turn") if event == TURN_EVENT else None
        if turn:  # the pushed head the exit chain checks
            head = {"sha": turn.get("head_sha"), "ref": turn.get("branch")}
        monitor = _mapping(payload, "monitor") if event == MONITOR_EVENT else None
        if monitor and monitor.get("head_sha"):  # the head a timed wait was about
            head = {"sha": monitor.get("head_sha"), "ref": monitor.get("branch")}
        subject = pull or _mapping(payload, "issue")
        kind: SubjectKind | None = None
        if "pull_request" in payload or subject.get("pull_request"):
            kind = "pull_request"
        elif subject:
            kind = "issue"
        sender = _mapping(payload, "sender")
        action, installation_id, full_name = envelope(payload)
        return cls(
            name=event,
            action=action,
            repository=full_name,
            repository_id=_int(repository.get("id")),
            default_branch=_str(repository.get("default_branch")),
            installation_id=installation_id,
            ref=work_item_ref(event, payload) if ref is DERIVE else ref,
            kind=kind,
            sender=Sender(_str(sender.get("login")), _str(sender.get("type")),
                          _int(sender.get("id"))),
            labels=tuple(str(label.get("name")) for label in subject.get("labels") or ()
                         if isinstance(label, Mapping)),
            label=_str(_get(payload.get("label"), "name")),
            head_sha=_str(head.get("sha")),
            head_ref=_str(head.get("ref")),
            head_repo=(_str(_get(head.get("repo"), "full_name")) or ""
                       if "repo" in head else None),
            maintainer_can_modify=(pull.get("maintainer_can_modify")
                                   if isinstance(pull.get("maintainer_can_modify"), bool)
                                   else None),
            comment=_comment(event, payload),
            ci=_ci_result(event, full_name, payload),
            pushed_ref=_str(payload.get("ref")) if event == "push" else None,
            after=_str(payload.get("after")) if event == "push" else None,
            title=_str(subject.get("title")),
            turn=dict(turn) if turn else None,
            draft=pull.get("draft") if isinstance(pull.get("draft"), bool) else None,
            pull_number=_number(pull.get("number")),
            tickets=ticket_keys(_str(subject.get("title")), _str(subject.get("body"))),
            merged=pull.get("merged") if isinstance(pull.get("merged"), bool) else None,
            merged_by=_str(_get(pull.get("merged_by"), "login")),
        )

    @property
    def kind_name(self) -> str:
        """``"<event>.<action>"``, e.g. ``"issue_comment.created"``, or the event name."""
        return f"{self.name}.{self.action}" if self.action else self.name

    @property
    def carries_labels(self) -> bool:
        """Whether the payload holds the issue or pull request (so :attr:`labels` is its
        label set; a CI event or a turn report says nothing about labels)."""
        return self.kind is not None

    def work_item(self, ref: WorkItemRef, spec_dir: str = DEFAULT_SPEC_DIR, *,
                  risk_tier: int | None = None) -> WorkItem:
        """The graph's :class:`~graph.model.WorkItem` for ``ref`` as this event shows it.

        Args:
            ref: the work item (the delivery's, or the one a CI result was fanned out to).
            spec_dir: a template; ``{number}`` becomes the issue or PR number.
            risk_tier: the work item's risk tier (1-4), if it has one.
        """
        return WorkItem(
            ref=ref.format(),
            id=ref.number,
            repository=ref.repository,
            kind=self.kind or "issue",
            tags=self.labels,
            risk_tier=risk_tier,
            spec_dir=spec_dir.format(number=ref.number),
        )

    def inbound(self, delivery_id: str) -> InboundEvent:
        """The event reduced to the fields hooks may use (see
        :class:`graph.model.InboundEvent`)."""
        comment = self.comment
        return InboundEvent(
            kind=TURN_COMPLETED if self.turn is not None else self.kind_name,
            delivery_id=delivery_id,
            actor=self.sender.login,
            actor_id=self.sender.id,
            actor_type=self.sender.type,
            body=comment.body if comment else None,
            review_state=comment.review_state if comment else None,
            comment_id=comment.id if comment else None,
            head_sha=self.head_sha,
            label=self.label,
            author=comment.author if comment else None,
            author_id=comment.author_id if comment else None,
            review_commit=comment.review_commit if comment else None,
            turn=self.turn,
            comment_kind=comment.kind if comment else None,
            created_at=comment.created_at if comment else None,
            updated_at=comment.updated_at if comment else None,
            previous_body=comment.previous_body if comment else None,
        )
