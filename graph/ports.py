"""Narrow, typed ports the graph core and the hooks call out through, and their errors.

The core never imports an HTTP, Redis or Flask library. It reaches people's tools only
through objects that satisfy these ports:

* one small :class:`~typing.Protocol` per area -- :class:`GitHubRepos`,
  :class:`GitHubLabels`, :class:`GitHubComments`, :class:`GitHubPulls`,
  :class:`GitHubContents`, :class:`GitHubChecks` (all of them: :class:`GitHub`),
  :class:`Slack`, :class:`Jira`; optional ones a provider may add: :class:`GitHubCommits`,
  :class:`EffectFinder` -- whose methods are the operations, with typed,
  keyword-only parameters, so mypy checks every call. A hook types against the
  narrowest port it uses (``ctx.config.github`` is a :class:`GitHub`).
* every operation is declared once, on its port method, as a read (:func:`read`) or a
  write (:func:`write`); :data:`OPERATIONS` collects them per integration
  (``"github"`` -> ``"add-label"`` -> :class:`Operation`). The outbox
  (:mod:`graph.effects`) records writes and passes reads through by that flag; the
  capability check compares the names hooks declare (``requires=``) with each
  provider's ``operations``.
* :class:`Integration` is the specification's contract ("Tool access"): a provider
  declares ``operations`` and answers ``call(op, **params)``; :class:`Transport` writes
  that dispatcher once for every provider, on top of its typed methods.

Results are JSON-serialisable dicts, typed per operation (:class:`Labels`, :class:`Posted`,
:class:`Comments`, :class:`File`...; the transports' docstrings give the details).

Errors (one tree, below :class:`graph.errors.LoopError`)::

    IntegrationError (integration, op, status, retriable, codes)
    ├── NotFound        the target does not exist or is not visible (404)
    ├── RateLimited     slow down: retry_after, reset_at; retriable
    ├── Unavailable     5xx, network, timeout, a command without an answer; retriable
    ├── Unsupported     the provider does not implement the operation
    └── RetryLater      the outbox's verdict for any retriable failure: retry later
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypedDict, TypeVar, runtime_checkable

from graph.errors import LoopError

__all__ = [
    "MAX_REASON",
    "OPERATIONS",
    "PERMISSIONS",
    "REACTIONS",
    "App",
    "Annotation",
    "Annotations",
    "CheckRun",
    "CheckRunDetail",
    "CheckRuns",
    "Comment",
    "Comments",
    "Committed",
    "Created",
    "Deleted",
    "EffectFinder",
    "EnsuredLabel",
    "File",
    "GitHub",
    "GitHubIdentity",
    "GitHubChecks",
    "GitHubComments",
    "GitHubCommits",
    "GitHubContents",
    "GitHubLabels",
    "GitHubPulls",
    "GitHubRepos",
    "Integration",
    "IntegrationError",
    "Jira",
    "JiraComment",
    "JiraLabel",
    "JiraTransition",
    "JobLog",
    "Labels",
    "Merged",
    "NotFound",
    "Operation",
    "Permission",
    "Posted",
    "PullFiles",
    "PullRequest",
    "RateLimited",
    "Repository",
    "RetryLater",
    "Review",
    "Reviewers",
    "Reviews",
    "Slack",
    "SlackMessage",
    "Transport",
    "Unavailable",
    "Unsupported",
    "User",
    "operations_of",
    "provider_text",
    "read",
    "write",
]

Result = dict[str, Any]
_F = TypeVar("_F", bound=Callable[..., Any])


# ----------------------------------------------------------------------- result shapes
# What each operation returns (JSON-serialisable). Through the outbox, a write performed
# before returns the summary recorded for it (bodies and texts left out), and a
# reconciled one may carry ``reused`` / ``unchanged``.


class Repository(TypedDict):
    full_name: str
    default_branch: str


class Permission(TypedDict):
    permission: str  # admin | maintain | write | triage | read | none


class Labels(TypedDict):
    labels: list[str] | None  # None: unknown (remove-label of a label not there)


class EnsuredLabel(TypedDict):
    label: str
    created: bool


class Posted(TypedDict):
    id: int
    url: str


class Comment(TypedDict):
    id: int
    user: str  # login; "ghost" for a deleted account
    user_id: int | None  # the author's user id (None: the answer did not say)
    body: str


class User(TypedDict):
    login: str
    id: int
    type: str  # User | Bot | Organization


class App(TypedDict):
    id: int
    slug: str


class Comments(TypedDict):
    comments: list[Comment]


class Created(TypedDict):
    id: int


class PullRequest(TypedDict):
    number: int
    head_sha: str
    head_ref: str
    base_ref: str
    state: str  # open | closed
    draft: bool
    html_url: str
    head_repo: str | None  # OWNER/NAME holding head_ref (a fork's); None: a deleted fork
    maintainer_can_modify: bool  # the fork lets the base's maintainers push to head_ref
    merged: bool  # GitHub's ``merged`` (a merged pull request's ``state`` is closed)
    merged_by: str | None  # login of who merged it (``merged_by.login``), or None
    node_id: str  # its GraphQL global id (the mutations' pullRequestId)
    body: str  # its description ("" when it has none)


class Merged(TypedDict):
    sha: str | None  # the merge (or squash/rebase) commit on the base branch
    merged: bool
    message: str  # GitHub's words ("Pull Request successfully merged")


class Deleted(TypedDict):
    deleted: bool  # False: there was no such branch (GitHub's 422)


class PullFiles(TypedDict):
    files: list[str]


class Reviewers(TypedDict):
    requested: list[str]
    teams: list[str]  # team slugs with a pending review request


class Review(TypedDict):
    id: int
    user: str
    state: str  # APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED, PENDING
    commit_id: str | None


class Reviews(TypedDict):
    reviews: list[Review]


class File(TypedDict):
    path: str
    sha: str
    ref: str | None
    text: str


class Committed(TypedDict):
    path: str
    sha: str
    commit: str


class CheckRun(TypedDict):
    id: int
    name: str | None
    status: str | None
    conclusion: str | None


class CheckRuns(TypedDict):
    check_runs: list[CheckRun]


class CheckOutput(TypedDict):
    title: str | None
    summary: str | None
    text: str | None
    annotations_count: int


class CheckRunDetail(TypedDict):
    id: int
    name: str | None
    head_sha: str | None
    status: str | None
    conclusion: str | None
    details_url: str | None
    app: str | None
    output: CheckOutput


class Annotation(TypedDict):
    path: str | None
    start_line: int | None
    end_line: int | None
    annotation_level: str | None
    title: str | None
    message: str | None


class Annotations(TypedDict):
    annotations: list[Annotation]
    truncated: bool


class JobLog(TypedDict):
    text: str
    truncated: bool


class SlackMessage(TypedDict):
    ok: bool
    ts: str | None


class JiraComment(TypedDict):
    issue: str
    id: str | None


class JiraLabel(TypedDict):
    issue: str
    label: str


class JiraTransition(TypedDict):
    issue: str
    transition: str


@dataclass(frozen=True)
class Operation:
    """One operation of one integration.

    Attributes:
        name: the operation's name, e.g. ``"add-label"`` (what hooks declare).
        method: the port method that performs it, e.g. ``"add_label"``.
        writes: whether it changes something outside the-loop (the outbox records it
            before performing it); ``False`` for a read, passed straight through.
    """

    name: str
    method: str
    writes: bool


def read(method: _F) -> _F:
    """Declare a port method an operation that only reads."""
    method.__loop_writes__ = False  # type: ignore[attr-defined]
    return method


def write(method: _F) -> _F:
    """Declare a port method an operation that changes something (recorded by the
    outbox before it is performed)."""
    method.__loop_writes__ = True  # type: ignore[attr-defined]
    return method


def operations_of(*ports: type) -> dict[str, Operation]:
    """Operation name -> :class:`Operation` for every method of ``ports`` declared with
    :func:`read` or :func:`write` (``add_label`` is ``"add-label"``)."""
    found: dict[str, Operation] = {}
    for port in ports:
        for attribute in dir(port):
            writes = getattr(getattr(port, attribute, None), "__loop_writes__", None)
            if writes is not None:
                name = attribute.replace("_", "-")
                found[name] = Operation(name, attribute, bool(writes))
    return dict(sorted(found.items()))


# ------------------------------------------------------------------------------ GitHub

#: Reaction contents GitHub accepts ("Create reaction for an issue comment").
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
#: Repository roles, strongest first ("Get repository permissions for a user").
PERMISSIONS = ("admin", "maintain", "write", "triage", "read", "none")

#
# ``repo`` is always "OWNER/NAME"; ``number`` an issue or pull-request number (they share
# one sequence). Result shapes are documented on integrations.github_ops.GitHubOperations.


class GitHubRepos(Protocol):
    """Repositories and people's roles in them."""

    @read
    def get_repository(self, *, repo: str) -> Repository:
        """``{"full_name", "default_branch"}``."""
        ...

    @read
    def get_permission(self, *, repo: str, login: str) -> Permission:
        """``{"permission": "admin" | "maintain" | "write" | "triage" | "read" | "none"}``."""
        ...

    @read
    def get_user(self, *, login: str) -> User:
        """``{"login", "id", "type"}`` of the account that has ``login`` now; raises
        :class:`NotFound` when none has."""
        ...


class GitHubLabels(Protocol):
    """Labels of issues and pull requests, and the repository's labels."""

    @write
    def add_label(self, *, repo: str, number: int, label: str) -> Labels:
        """``{"labels": [name, ...]}`` after the call."""
        ...

    @write
    def remove_label(self, *, repo: str, number: int, label: str) -> Labels:
        """``{"labels": [name, ...] | None}`` (``None``: it was not there)."""
        ...

    @write
    def ensure_label(self, *, repo: str, label: str, color: str = "ededed",
                     description: str = "") -> EnsuredLabel:
        """``{"label": name, "created": bool}``."""
        ...


class GitHubComments(Protocol):
    """Issue and pull-request comments and their reactions."""

    @write
    def comment(self, *, repo: str, number: int, body: str) -> Posted:
        """``{"id": int, "url": str}``."""
        ...

    @write
    def update_comment(self, *, repo: str, comment_id: int, body: str) -> Posted:
        """``{"id": int, "url": str}``."""
        ...

    @read
    def list_comments(self, *, repo: str, number: int, since: str | None = None) -> Comments:
        """``{"comments": [{"id": int, "user": login, "body": str}, ...]}`` oldest first;
        ``since`` (ISO 8601, ``2024-01-01T12:00:00Z``): only those updated at or after it
        (GitHub's ``since`` of "List issue comments")."""
        ...

    @write
    def add_reaction(self, *, repo: str, comment_id: int, content: str) -> Created:
        """``{"id": int}`` (an issue comment's reaction)."""
        ...

    @write
    def add_review_comment_reaction(self, *, repo: str, comment_id: int,
                                    content: str) -> Created:
        """``{"id": int}`` (a pull request review comment's reaction)."""
        ...


class GitHubPulls(Protocol):
    """Pull requests: heads, files, reviewers and reviews."""

    @read
    def get_pull_request(self, *, repo: str, number: int) -> PullRequest:
        """``{"number", "head_sha", "head_ref", "base_ref", "state", "draft", "html_url",
        "head_repo", "maintainer_can_modify", "node_id", "body"}``."""
        ...

    @read
    def find_pull_request(self, *, repo: str, head: str) -> PullRequest | None:
        """The open pull request whose head is branch ``head`` of ``repo`` itself, or
        ``None`` (a :class:`PullRequest`)."""
        ...

    @write
    def create_pull_request(self, *, repo: str, head: str, base: str, title: str,
                            body: str, draft: bool = True) -> PullRequest:
        """Open a pull request from branch ``head`` into ``base`` (a draft by default);
        a :class:`PullRequest`."""
        ...

    @write
    def update_pull_request(self, *, repo: str, number: int, title: str | None = None,
                            body: str | None = None) -> PullRequest:
        """Change the title and/or body of pull request ``number``; a :class:`PullRequest`."""
        ...

    @read
    def list_pull_files(self, *, repo: str, number: int) -> PullFiles:
        """``{"files": [path, ...]}``."""
        ...

    @write
    def request_reviewers(self, *, repo: str, number: int, reviewers: list[str],
                          team_reviewers: list[str] | None = None) -> Reviewers:
        """``{"requested": [login, ...], "teams": [slug, ...]}``: ``reviewers`` are
        logins, ``team_reviewers`` team slugs of the repository's organization."""
        ...

    @write
    def mark_pull_request_ready(self, *, repo: str, number: int) -> PullRequest:
        """Mark draft pull request ``number`` ready for review (nothing is written when
        it is not a draft); a :class:`PullRequest` (``draft`` false)."""
        ...

    @read
    def list_reviews(self, *, repo: str, number: int) -> Reviews:
        """``{"reviews": [{"id", "user", "state", "commit_id"}, ...]}``."""
        ...

    @write
    def merge_pull_request(self, *, repo: str, number: int, sha: str,
                           merge_method: str = "squash") -> Merged:
        """Merge pull request ``number`` if its head is still ``sha`` (``merge_method``:
        ``merge``, ``squash`` or ``rebase``); ``{"sha", "merged", "message"}``. A
        refusal (409 head moved, 405 not mergeable, 403/422 protection) raises
        :class:`IntegrationError` with GitHub's ``message`` as its ``reason``."""
        ...

    @write
    def delete_branch(self, *, repo: str, branch: str) -> Deleted:
        """Delete branch ``branch`` of ``repo``; ``{"deleted": False}`` when there is none."""
        ...


class GitHubContents(Protocol):
    """Files on a branch, tag or commit."""

    @read
    def get_file(self, *, repo: str, path: str, ref: str | None = None) -> File:
        """``{"path", "sha", "ref", "text"}``; :class:`NotFound` when absent."""
        ...

    @write
    def put_file(self, *, repo: str, path: str, branch: str, text: str,
                 sha: str | None = None, message: str | None = None) -> Committed:
        """``{"path", "sha", "commit"}``: one commit on ``branch``."""
        ...


class GitHubChecks(Protocol):
    """Check runs on a commit."""

    @write
    def create_check_run(self, *, repo: str, head_sha: str, name: str, status: str,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None,
                         details_url: str | None = None) -> Created:
        """``{"id": int}``; ``details_url`` is the run's "Details" link."""
        ...

    @write
    def update_check_run(self, *, repo: str, check_run_id: int, status: str | None = None,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None,
                         details_url: str | None = None) -> Created:
        """``{"id": int}``."""
        ...

    @read
    def list_check_runs(self, *, repo: str, head_sha: str, name: str | None = None) -> CheckRuns:
        """``{"check_runs": [{"id", "name", "status", "conclusion"}, ...]}``."""
        ...

    @read
    def get_check_run(self, *, repo: str, check_run_id: int) -> CheckRunDetail:
        """``{"id", "name", "head_sha", "status", "conclusion", "details_url", "app",
        "output": {"title", "summary", "text", "annotations_count"}}`` (``app``: the
        slug of the App that made it, ``github-actions`` for an Actions job)."""
        ...

    @read
    def list_check_run_annotations(self, *, repo: str, check_run_id: int,
                                   limit: int = 50) -> Annotations:
        """``{"annotations": [{"path", "start_line", "end_line", "annotation_level",
        "title", "message"}, ...], "truncated": bool}``: at most ``limit``, in GitHub's
        order."""
        ...

    @read
    def download_job_logs(self, *, repo: str, job_id: int, tail_bytes: int = 4096) -> JobLog:
        """``{"text", "truncated"}``: the last ``tail_bytes`` bytes (at most) of a GitHub
        Actions job's plain-text log, ``truncated`` when the log was longer;
        :class:`NotFound` for a check run that is not an Actions job."""
        ...


class GitHub(GitHubRepos, GitHubLabels, GitHubComments, GitHubPulls, GitHubContents,
             GitHubChecks, Protocol):
    """Every GitHub operation (what each GitHub transport implements)."""

    operations: frozenset[str]


# ------------------------------------------------------------------------ Slack, Jira


class Slack(Protocol):
    """Slack messages."""

    operations: frozenset[str]

    @write
    def post_message(self, *, channel: str, text: str,
                     blocks: list[dict[str, Any]] | None = None,
                     effect: str | None = None) -> SlackMessage:
        """``{"ok": True, "ts": str | None}``; ``effect`` (given by the outbox to a
        transport implementing ``find-effect``) tags the message so it is known again."""
        ...


class Jira(Protocol):
    """Jira issues; ``issue`` is an issue key such as ``PROJ-12``."""

    operations: frozenset[str]

    @write
    def add_comment(self, *, issue: str, body: str) -> JiraComment:
        """``{"issue": key, "id": str | None}``."""
        ...

    @write
    def add_label(self, *, issue: str, label: str,
                  replace_prefix: str | None = None) -> JiraLabel:
        """``{"issue": key, "label": str}``; with ``replace_prefix``, the issue's other
        labels starting with it (case-insensitively) are removed in the same edit."""
        ...

    @write
    def transition_issue(self, *, issue: str, name: str) -> JiraTransition:
        """``{"issue": key, "transition": str}``."""
        ...


class GitHubCommits(Protocol):
    """Optional, not part of :class:`GitHub` (no transport implements it yet): a
    commit's tree. A caller checks ``"get-commit" in github.operations`` first."""

    @read
    def get_commit(self, *, repo: str, sha: str) -> Result:
        """``{"sha": str, "tree_sha": str}``."""
        ...


class GitHubIdentity(Protocol):
    """Optional, not part of :class:`GitHub`: who the transport acts as. A caller checks
    ``"get-app"`` (a transport acting for an App) or ``"get-authenticated-user"`` (one
    acting with a person's token) in ``github.operations`` first."""

    @read
    def get_app(self) -> App:
        """``{"id", "slug"}`` of the App ("Get the authenticated app"); its bot user is
        ``<slug>[bot]``."""
        ...

    @read
    def get_authenticated_user(self) -> User:
        """``{"login", "id", "type"}`` of the token's user ("Get the authenticated
        user")."""
        ...


class EffectFinder(Protocol):
    """Optional, for any integration: find an effect the outbox recorded as pending.

    An integration listing ``"find-effect"`` in its ``operations`` gets every write's
    effect id as the keyword ``effect=`` (so it can tag the write at its target), and is
    asked before a pending write is performed again.

    An integration that cannot read its writes back may instead list operations in an
    ``at_most_once: frozenset[str]`` attribute: a pending write of those whose outcome is
    unknown is not performed again (see :mod:`graph.effects`).
    """

    @read
    def find_effect(self, *, operation: str, effect: str, params: Mapping[str, Any],
                    since: float | None = None) -> Result:
        """``{"found": bool, "result": {...}}`` for the effect id ``effect`` of
        ``operation`` called with ``params``, first recorded at ``since`` (Unix
        seconds)."""
        ...


#: integration -> operation name -> :class:`Operation`, declared once on the ports.
OPERATIONS: Mapping[str, Mapping[str, Operation]] = {
    "github": operations_of(GitHub),
    "slack": operations_of(Slack),
    "jira": operations_of(Jira),
}


# -------------------------------------------------------------------------- providers


@runtime_checkable
class Integration(Protocol):
    """A provider of operations on one external system (GitHub, Slack, Jira).

    Attributes:
        name: the integration, ``"github"``, ``"slack"`` or ``"jira"``.
        operations: the operation names this provider implements, e.g.
            ``frozenset({"add-label", "comment"})``.

    Besides its port's typed methods, ``call(op, **params)`` performs one operation by
    name and returns a JSON-serialisable dict. It raises :class:`Unsupported` for an
    operation outside ``operations`` and :class:`IntegrationError` (or a subclass) when
    the target system refuses the call.
    """

    operations: frozenset[str]

    def call(self, op: str, **params: Any) -> dict[str, Any]: ...


class Transport:
    """Base of every provider: :meth:`call` by operation name, written once.

    A subclass sets ``name`` (its integration), ``transport`` (``api``, ``cli``...) and
    ``operations`` (the names it implements, by default all of its integration's), and
    implements the port's methods.
    """

    name: ClassVar[str] = "?"
    transport: str = "?"
    operations: frozenset[str] = frozenset()

    def call(self, op: str, **params: Any) -> dict[str, Any]:
        """Perform operation ``op`` with keyword ``params`` (its port method's).

        Raises:
            Unsupported: ``op`` is not in :attr:`operations`.
            IntegrationError: ``params`` do not fit the operation (not retriable), or the
                system refused it (see the method).
        """
        spec = OPERATIONS.get(self.name, {}).get(op)
        if spec is None or op not in self.operations:
            raise Unsupported(
                f"{self.name} ({self.transport}) does not implement operation {op!r}; it "
                f"implements: {', '.join(sorted(self.operations))}",
                integration=self.name, op=op,
            )
        method: Callable[..., dict[str, Any]] = getattr(self, spec.method)
        try:
            return method(**params)
        except TypeError as exc:
            try:  # only on failure: were the parameters wrong, or is it a bug inside?
                inspect.signature(method).bind(**params)
            except TypeError as bad:
                raise IntegrationError(f"{self.name} {op}: bad parameters ({bad})",
                                       integration=self.name, op=op) from None
            raise exc


# ----------------------------------------------------------------------------- errors


#: Longest provider text an :class:`IntegrationError` carries as its ``reason``.
MAX_REASON = 300

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]+")


def provider_text(value: object, limit: int = MAX_REASON) -> str:
    """``value`` (a provider's free text: untrusted) as one safe line: control and
    bidirectional-formatting characters become spaces, runs of whitespace one space, at
    most ``limit`` characters (an ellipsis marks a cut); ``""`` for anything not a
    string."""
    if not isinstance(value, str):
        return ""
    text = " ".join(_CONTROL.sub(" ", value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class IntegrationError(LoopError):
    """An external system refused or failed an operation.

    Attributes:
        integration: provider name, e.g. ``"github"``.
        op: operation name, e.g. ``"add-label"``.
        status: HTTP status code when there was one, else ``None``.
        retriable: whether trying again later may succeed (5xx, rate limits, network).
        codes: the system's own error codes when it gave any (GitHub's ``errors[].code``,
            e.g. ``("already_exists",)``), else ``()``.
        reason: what the system said of its refusal (Jira's ``errorMessages``/``errors``,
            Slack's ``error``, GitHub's ``message``), made safe by :func:`provider_text`
            (untrusted text: bounded, no control characters), else ``""``. Set by each
            transport's error builder; never a header, token or request body.
    """

    def __init__(
        self,
        message: str,
        *,
        integration: str,
        op: str,
        status: int | None = None,
        retriable: bool = False,
        codes: tuple[str, ...] = (),
        reason: str = "",
    ) -> None:
        super().__init__(message)
        self.integration = integration
        self.op = op
        self.status = status
        self.retriable = retriable
        self.codes = tuple(codes)
        self.reason = provider_text(reason)

    def summary(self, target: str) -> str:
        """The refusal as one log line, secret-free: ``<integration> <op> on <target>:
        status=<HTTP status|None> codes=<codes|-> reason=<provider's words|->`` (the
        request's parameters, headers and credentials are never in it)."""
        return (f"{self.integration} {self.op} on {target}: status={self.status} "
                f"codes={','.join(self.codes) or '-'} reason={self.reason or '-'}")


class NotFound(IntegrationError):
    """The target (repository, issue, file, label) does not exist or is not visible."""


class RateLimited(IntegrationError):
    """The system asked to slow down (GitHub's 429, or 403 with a rate-limit answer;
    Slack's and Jira's 429). Always retriable.

    Attributes:
        retry_after: seconds the system asked to wait (``Retry-After``), else ``None``.
        reset_at: when the limit resets, seconds since the epoch (GitHub's
            ``X-RateLimit-Reset``), else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        integration: str,
        op: str,
        status: int | None = None,
        codes: tuple[str, ...] = (),
        retry_after: float | None = None,
        reset_at: float | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(message, integration=integration, op=op, status=status,
                         retriable=True, codes=codes, reason=reason)
        self.retry_after = retry_after
        self.reset_at = reset_at


class Unavailable(IntegrationError):
    """The system or the way to it failed: a 5xx answer, a network error, a command that
    timed out or ran without an answer. Always retriable."""

    def __init__(
        self,
        message: str,
        *,
        integration: str,
        op: str,
        status: int | None = None,
        codes: tuple[str, ...] = (),
        reason: str = "",
    ) -> None:
        super().__init__(message, integration=integration, op=op, status=status,
                         retriable=True, codes=codes, reason=reason)


class Unsupported(IntegrationError):
    """The provider does not implement the requested operation."""


class RetryLater(IntegrationError):  # noqa: N818  (a verdict, not an error class name)
    """A transient failure (rate limit, 5xx, network): retry the delivery later.

    Raised by the outbox (:mod:`graph.effects`) for every retriable failure of a call
    made through it. Always ``retriable``. A hook may catch it as an
    ``IntegrationError`` (to record and go on); uncaught, it stops the chain without a
    verdict (see :func:`graph.runtime.call_hook`).

    Attributes:
        retry_after: seconds the system asked to wait, when the failure said so.
        reset_at: when the system's rate limit resets (seconds since the epoch), when
            the failure said so.
    """

    def __init__(self, message: str, *, integration: str, op: str,
                 status: int | None = None, retry_after: float | None = None,
                 reset_at: float | None = None) -> None:
        super().__init__(message, integration=integration, op=op, status=status,
                         retriable=True)
        self.retry_after = retry_after
        self.reset_at = reset_at

    @classmethod
    def from_error(cls, exc: IntegrationError) -> RetryLater:
        """The retry verdict for a retriable integration error (its message is the-loop's
        own: operation, target, status; never a response body)."""
        return cls(str(exc), integration=exc.integration, op=exc.op, status=exc.status,
                   retry_after=getattr(exc, "retry_after", None),
                   reset_at=getattr(exc, "reset_at", None))
