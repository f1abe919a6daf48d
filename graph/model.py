"""The hook contract: HookContext in, HookResult out (specification, "The hook contract").

A hook is a plain function ``hook(ctx: HookContext) -> HookResult``. The context carries
everything a hook may see and nothing more; the result is what decides whether the work
item moves. Both are immutable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from graph.compile import Node
    from graph.context import HookConfig

Status = Literal["pass", "block", "wait", "skip"]
Boundary = Literal["entry", "exit"]
STATUSES: tuple[str, ...] = ("pass", "block", "wait", "skip")


@dataclass(frozen=True)
class Message:
    """One human- and agent-readable finding.

    Attributes:
        text: the-loop's own wording; never text copied from a webhook payload.
        path: repository-relative path the finding is about, if any.
        code: a stable machine-readable identifier, e.g. ``"artifact-missing"``.
    """

    text: str
    path: str | None = None
    code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"text", "path", "code"}`` for JSON state and logs."""
        return {"text": self.text, "path": self.path, "code": self.code}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Inverse of :meth:`to_dict`."""
        return cls(text=str(data["text"]), path=data.get("path"), code=data.get("code"))


@dataclass(frozen=True)
class HookResult:
    """The contract every hook returns (specification, "HookResult").

    Attributes:
        status: ``pass`` (satisfied, continue), ``block`` (a requirement is unmet; stop the
            chain, the node does not advance), ``wait`` (nothing is wrong but we cannot
            proceed yet; park the node) or ``skip`` (does not apply; continue, recorded).
        hook: name of the hook that produced this result.
        messages: findings in priority order.
        data: structured output other hooks and edges may read. A named outcome that
            edges route on is ``data["outcome"]`` (e.g. ``"approved"``, ``"docs-only"``).
        retriable: whether the harness may try again; ``False`` marks a terminal block.

    Raises:
        ValueError: on construction with a status outside the four above.
    """

    status: Status
    hook: str
    messages: tuple[Message, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    retriable: bool = True

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"HookResult.status must be one of {STATUSES}, got {self.status!r}")
        object.__setattr__(self, "messages", tuple(self.messages))

    @property
    def outcome(self) -> str:
        """The named outcome edges route on: ``data["outcome"]`` if set, else the status."""
        named = self.data.get("outcome")
        return str(named) if named else self.status

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict of this result."""
        return {
            "status": self.status,
            "hook": self.hook,
            "messages": [m.to_dict() for m in self.messages],
            "data": dict(self.data),
            "retriable": self.retriable,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HookResult:
        """Inverse of :meth:`to_dict`."""
        return cls(
            status=data["status"],
            hook=str(data["hook"]),
            messages=tuple(Message.from_dict(m) for m in data.get("messages", ())),
            data=dict(data.get("data") or {}),
            retriable=bool(data.get("retriable", True)),
        )

    # Constructors keep hook bodies short and uniform.
    @classmethod
    def passed(cls, hook: str, **data: Any) -> HookResult:
        """A ``pass`` result carrying ``data``."""
        return cls("pass", hook, (), data)

    @classmethod
    def blocked(
        cls, hook: str, *messages: Message, retriable: bool = True, **data: Any
    ) -> HookResult:
        """A ``block`` result with the given findings."""
        return cls("block", hook, messages, data, retriable)

    @classmethod
    def waiting(cls, hook: str, *messages: Message, **data: Any) -> HookResult:
        """A ``wait`` result: park the node until the next inbound event."""
        return cls("wait", hook, messages, data)

    @classmethod
    def skipped(cls, hook: str, reason: str) -> HookResult:
        """A ``skip`` result: the hook does not apply here; ``reason`` is recorded."""
        return cls("skip", hook, (Message(reason, code="skipped"),), {})


@dataclass(frozen=True)
class WorkItem:
    """The issue or pull request a graph walk is about.

    Attributes:
        ref: ``github:OWNER/REPO#N`` (service) or any stable string (local CLI use).
        id: the issue or pull request number.
        repository: ``OWNER/REPO`` or ``None`` for a local work item.
        kind: ``"issue"`` or ``"pull_request"``.
        tags: labels on the item when the event was received.
        risk_tier: the harness config's risk tier for this item, if known.
        spec_dir: repository-relative directory holding the item's artifacts.
    """

    ref: str
    id: int | None = None
    repository: str | None = None
    kind: str = "issue"
    tags: tuple[str, ...] = ()
    risk_tier: int | None = None
    spec_dir: str = "specs"


@dataclass(frozen=True)
class Session:
    """The harness session bound to a node (id, runner, working directory)."""

    id: str
    runner: str = "harness"
    cwd: str | None = None


@dataclass(frozen=True)
class InboundEvent:
    """The event that triggered an evaluation, reduced to what hooks may use.

    Untrusted text (``body``) is carried so that a hook can read it *after* checking that
    ``actor`` is authorized; it is never persisted (only ``body_sha256``).

    Attributes:
        kind: ``"<event>.<action>"``, e.g. ``"issue_comment.created"``, or ``"tick"``.
        delivery_id: the ``X-GitHub-Delivery`` header, or a local id.
        actor: login of the person or bot that caused the event.
        actor_type: GitHub's ``sender.type`` (``"User"``, ``"Bot"``, ``"Organization"``).
        body: comment or review body, untrusted.
        review_state: a pull request review's state, upper-cased (``"APPROVED"``...).
        comment_id: id of the comment or review the body came from.
        head_sha: the pull request head commit the event refers to, if any.
        label: the label added or removed, for ``labeled``/``unlabeled`` events.
        author: login of the comment's or review's author (differs from ``actor`` when
            someone else edited it).
        review_commit: the commit a pull request review was submitted on.
    """

    kind: str
    delivery_id: str
    actor: str | None = None
    actor_type: str | None = None
    body: str | None = field(default=None, repr=False)
    review_state: str | None = None
    comment_id: int | None = None
    head_sha: str | None = None
    label: str | None = None
    author: str | None = None
    review_commit: str | None = None

    @property
    def body_sha256(self) -> str | None:
        """SHA-256 hex digest of ``body`` (what the event log stores instead of the text)."""
        if self.body is None:
            return None
        import hashlib

        return hashlib.sha256(self.body.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class HookContext:
    """Everything a hook may see, nothing more (specification, "HookContext").

    Attributes:
        work_item: the work item being advanced.
        node: the compiled node whose chain is running.
        boundary: ``"entry"`` or ``"exit"``.
        repo: absolute path of a local checkout, or ``None`` in the service.
        artifacts: artifact name -> repository-relative path of the node's declared outputs.
        session: the harness session bound to this node, or ``None``.
        event: the triggering event; ``None`` for a tick (a later node in the same advance).
        results: results of the hooks already run in this chain, in order.
        config: harness config, collaborators, and integration handles (never secrets).
        params: this hook call's ``with:`` block from the graph.
        visit: how many times the work item has entered ``node`` (1 on the first visit);
            with the node and hook it keys idempotent side effects.
    """

    work_item: WorkItem
    node: Node
    boundary: Boundary
    repo: Path | None
    artifacts: Mapping[str, str]
    session: Session | None
    event: InboundEvent | None
    results: tuple[HookResult, ...]
    config: HookConfig
    params: Mapping[str, Any] = field(default_factory=dict)
    visit: int = 1
