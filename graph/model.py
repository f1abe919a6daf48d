"""The graph model and the hook contract (specification, "Data models", "The hook
contract").

* The compiled graph: :class:`Graph` of :class:`Node` and :class:`Edge`, each node's
  chains of :class:`HookCall`.
* The hook contract: a hook is a plain function ``hook(ctx: HookContext) -> HookResult``,
  registered as a :class:`HookDef` that declares what the runtime needs to know about it
  (its outcomes, which of them move forward, where it records a decision, whether it
  publishes the work item's status), so the runtime never names a hook. The context
  carries everything a hook may see and nothing more; the result decides whether the work
  item moves. Both are immutable.
* :class:`Status`: where a work item stands.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from graph.context import HookConfig

#: A hook result's status (see :class:`HookResult`).
ResultStatus = Literal["pass", "block", "wait", "skip"]
Boundary = Literal["entry", "exit"]
STATUSES: tuple[str, ...] = ("pass", "block", "wait", "skip")


class Status(StrEnum):
    """Where a work item stands (``WorkItemState.status``); each compares equal to its
    string value, which is what state and logs store."""

    #: An entry chain is due, or the walk is moving.
    ACTIVE = "active"
    #: A chain returned ``wait``: nothing is wrong, an event is awaited (a gate decision).
    WAITING = "waiting"
    #: An agent node's harness turn is ordered or running (:mod:`graph.work`); its exit
    #: chain runs when the runner reports the turn's end.
    WORKING = "working"
    #: A chain returned ``block``: a requirement is unmet; the work retries.
    BLOCKED = "blocked"
    #: A human has been asked to step in (a terminal block, a repeated block, or the
    #: node's ``attempts`` used up); stays so until the work item moves on.
    ESCALATED = "escalated"
    #: The work item reached a terminal node.
    DONE = "done"
    #: Its pull request was closed without being merged: it ends here, never ``done``,
    #: and no more turns are ordered (the reason is in the status comment).
    ABANDONED = "abandoned"


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

    status: ResultStatus
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
        tickets: issue keys of another ticketing system the item links (Jira's
            ``ABC-123``, from its title or description), first seen first.
    """

    ref: str
    id: int | None = None
    repository: str | None = None
    kind: str = "issue"
    tags: tuple[str, ...] = ()
    risk_tier: int | None = None
    spec_dir: str = "specs"
    tickets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Session:
    """The harness session bound to a node (id, runner, working directory)."""

    id: str
    runner: str = "harness"
    cwd: str | None = None


#: Event name -> the kind of comment it carries (GitHub's "Webhook events and payloads").
_COMMENT_KINDS = {"issue_comment": "issue_comment", "pull_request_review": "review",
                  "pull_request_review_comment": "review_comment"}


@dataclass(frozen=True)
class InboundEvent:
    """The event that triggered an evaluation, reduced to what hooks may use.

    Untrusted text (``body``) is carried so that a hook can read it *after* checking that
    ``actor`` is authorized; it is never persisted (only ``body_sha256``).

    Attributes:
        kind: ``"<event>.<action>"``, e.g. ``"issue_comment.created"``, or ``"tick"``.
        delivery_id: the ``X-GitHub-Delivery`` header, or a local id.
        actor: login of the person or bot that caused the event.
        actor_id: that account's user id (``sender.id``), or ``None``: a login can pass
            to another account, the id cannot.
        actor_type: GitHub's ``sender.type`` (``"User"``, ``"Bot"``, ``"Organization"``).
        body: comment or review body, untrusted.
        review_state: a pull request review's state, upper-cased (``"APPROVED"``...).
        comment_id: id of the comment or review the body came from.
        head_sha: the pull request head commit the event refers to, if any.
        label: the label added or removed, for ``labeled``/``unlabeled`` events.
        author: login of the comment's or review's author (differs from ``actor`` when
            someone else edited it).
        author_id: that author's user id, or ``None``.
        review_commit: the commit a pull request review was submitted on.
        turn: for a :data:`graph.work.TURN_COMPLETED` event, the runner's report
            (:meth:`graph.work.TurnEnded.to_dict`); written by the-loop, never a payload's.
        comment_kind: ``issue_comment``, ``review_comment`` or ``review`` when the event
            carries a comment or review (with ``comment_id`` it names the decision's
            source, :attr:`source`).
        created_at, updated_at: when that comment or review was created and last edited
            (Unix seconds, from its ``created_at``/``updated_at``, a review's
            ``submitted_at``), or ``None``.
        previous_body: an edit's earlier text (``changes.body.from``), untrusted like
            ``body`` and never persisted.
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
    turn: Mapping[str, Any] | None = None
    comment_kind: str | None = None
    created_at: float | None = None
    updated_at: float | None = None
    previous_body: str | None = field(default=None, repr=False)
    actor_id: int | None = None
    author_id: int | None = None

    @property
    def source(self) -> str | None:
        """The decision source this event carries: ``<comment kind>:<id>`` (e.g.
        ``review:80``), the same whatever delivery brought it; ``None`` without one."""
        if self.comment_id is None:
            return None
        kind = self.comment_kind or _COMMENT_KINDS.get(self.kind.partition(".")[0])
        return f"{kind}:{self.comment_id}" if kind else None

    @property
    def edited(self) -> bool:
        """Whether the event is an edit of a comment or review (``.edited``)."""
        return self.kind.endswith(".edited")

    @property
    def body_sha256(self) -> str | None:
        """SHA-256 hex digest of ``body`` (what the event log stores instead of the text)."""
        if self.body is None:
            return None
        return hashlib.sha256(self.body.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class GateVisit:
    """What a gate's hooks know about the current visit of the gate (``HookContext.gate``).

    Attributes:
        started_at: when the work item entered the gate this visit (Unix seconds); a
            comment or review created before it never decides the visit.
        decided: decision sources (:attr:`InboundEvent.source`) that decided any gate
            visit of the work item already; none decides again.
        votes: the decisive replies of this visit that did not decide it on their own
            (``approvals: N`` gates), oldest first: ``{actor, outcome, source, kind, at,
            review_commit}``.
        approvals: distinct authorized approvers the gate needs (``Node.approvals``).
    """

    started_at: float
    decided: frozenset[str] = frozenset()
    votes: tuple[Mapping[str, Any], ...] = ()
    approvals: int = 1


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
        gate: at a gate (``actor: human``), the current visit's :class:`GateVisit`;
            ``None`` elsewhere and offline.
        decisions: gate id -> its standing decision (``record-decision``'s record: who,
            outcome, sources, ``head_sha`` the pull request head approved, artifacts...;
            never text), the invalidated ones left out; what a later node acts on (the
            merge: the head the review approved).
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
    gate: GateVisit | None = None
    decisions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


HookFn = Callable[[HookContext], HookResult]
ParamCheck = Callable[[Mapping[str, Any]], str | None]
#: Called by the runtime when the work item's published status changes: (the hook's
#: context, with its integrations wrapped by the outbox; the status; a one-line summary)
#: -> anything (ignored); raises what its integration raises (recorded, never fatal).
StatusFn = Callable[[HookContext, Status, str], object]


@dataclass(frozen=True)
class RecordCheck:
    """What a recorded decision is checked against when it is read back (``the-loop check
    --recompute``, the rebuild of unreadable state).

    Attributes:
        work_item: the work item's ref the record must name.
        gate: the gate (node id) the record must name.
        path: the artifact's repository-relative path (named in findings).
        keys: key id -> trusted Ed25519 public key (:mod:`graph.signing`): the published
            ones and the service's own.
        authorized: (login, GitHub user id or ``None``) -> whether that person may decide
            this gate now.
        elsewhere: other texts that may hold signed records of the artifact
            (``HookConfig.records_elsewhere``: a fork's pull request comments); only
            verified records of this artifact count there, anything else is ignored.
    """

    work_item: str
    gate: str
    path: str
    keys: Mapping[str, Any]
    authorized: Callable[[str, int | None], bool]
    elsewhere: tuple[str, ...] = ()


@dataclass(frozen=True)
class Approval:
    """A gate's decision as read back from one artifact.

    Attributes:
        approved: the latest verified entry approves the artifact's current content.
        findings: entries that were not counted (unsigned, altered, signed by an unknown
            key, for another work item, by someone not authorized now), in the-loop's
            words (never the entry's text).
    """

    approved: bool
    findings: tuple[Message, ...] = ()


@dataclass(frozen=True)
class DecisionRecord:
    """Where a hook records a gate's decision in the artifacts, and how to read it back
    (``the-loop check --recompute`` re-derives a gate's verdict from them alone).

    Attributes:
        artifacts: the call's ``with:`` parameters -> artifact names (relative to the
            work item's spec directory) holding the decision; empty when not configured.
        approved: (an artifact's text, ``None`` when absent; the :class:`RecordCheck`) ->
            the :class:`Approval`: whether its latest verified decision is an approval of
            its current content, and the entries that did not count.
        fingerprint: an artifact's text -> a digest of what a reviewer approves in it (the
            text without the-loop's own review-record entries), ``None`` when absent;
            an approval binds to it, and a different one later means the approved
            artifact changed (``gates.reapproveOnChange``).
        strip: an artifact's text -> the text without the record the hook writes (so a
            repair is told from the-loop's own entry); ``None``: nothing to strip.
    """

    artifacts: Callable[[Mapping[str, Any]], tuple[str, ...]]
    approved: Callable[[str | None, RecordCheck], Approval]
    fingerprint: Callable[[str | None], str | None] | None = None
    strip: Callable[[str], str] | None = None


@dataclass(frozen=True)
class HookDef:
    """A registered hook: the function and what the compiler and runtime know about it.

    Attributes:
        name: the name graphs refer to, e.g. ``"validate-artifacts"``.
        fn: the hook function.
        requires: integration name -> operations the hook calls on it, e.g.
            ``{"github": frozenset({"add-label"})}``; checked against the configured
            providers at startup.
        outcomes: named outcomes the hook may put in ``data["outcome"]`` besides ``pass``.
        boundaries: where the hook may run (``entry``, ``exit``).
        params: the ``with:`` keys the hook accepts; anything else is a load error.
        timeout: seconds the hook may run by default (a graph's call may set its own,
            ``{hook: notify, timeout: 10}``); past it, a validating hook is a retriable
            block and a ``fails_open`` hook records the timeout and passes.
        fails_open: an integration hook (a notification: Slack, Jira...) whose failure,
            exception or timeout is recorded and passes (specification, "Error handling":
            notification hook fails -> record and continue), never wedging the graph.
        validating: the hook only judges artifacts (no side effect, no network); ``the-loop
            check --recompute`` re-runs exactly these to re-derive verdicts.
        check: called by the compiler with each call's ``with:`` parameters; returns an
            error message (a load error naming file, node and hook) or ``None``. For what
            can be known before running, e.g. a tool the call needs is not installed.
        forward: the outcomes (of ``outcomes``) that move the work item forward as
            ``pass`` does, in the order ``recompute`` follows them.
        hands_off: outcomes whose decision (who, which comment, its digest; never the
            text) is handed to the node the edge leads to, as its next input.
        shown_waits: message codes of a ``wait`` worth showing in the status comment (why
            a decision did not count); other waits are not repeated there.
        records: where the hook records a gate's decision, if it does.
        on_status: called when the work item's published status changes while it is at a
            node whose chains call this hook (e.g. to update a check run).
        on_settle: a hook function (context -> HookResult) the runtime calls instead of
            writing on entry: once, when a delivery (or a forced move) leaves the work
            item at a node whose entry chain calls this hook, with its integrations
            wrapped by the outbox under the entry call's effect ids. For what shows where
            the work item is (its phase label): a node passed through within the same
            delivery gets no write nobody could see. A ``block`` it returns (it raised)
            parks the work item as an entry block would.
    """

    name: str
    fn: HookFn
    requires: Mapping[str, frozenset[str]] = field(default_factory=dict)
    outcomes: frozenset[str] = frozenset()
    boundaries: frozenset[str] = frozenset({"entry", "exit"})
    params: frozenset[str] = frozenset()
    timeout: float = 30.0
    validating: bool = False
    fails_open: bool = False
    check: ParamCheck | None = None
    forward: tuple[str, ...] = ()
    hands_off: frozenset[str] = frozenset()
    shown_waits: frozenset[str] = frozenset()
    records: DecisionRecord | None = None
    on_status: StatusFn | None = None
    on_settle: HookFn | None = None


@dataclass(frozen=True)
class HookCall:
    """One hook in a chain: the resolved definition, its ``with:`` parameters and the
    call's own ``timeout`` (seconds; ``None``: the hook's default)."""

    name: str
    definition: HookDef = field(repr=False, compare=False)
    params: Mapping[str, Any] = field(default_factory=dict)
    timeout: float | None = None

    @property
    def limit(self) -> float:
        """Seconds this call may run: the graph's ``timeout``, else the hook's default."""
        return self.timeout if self.timeout is not None else self.definition.timeout


#: The outcome every passing chain has; it always moves forward.
PASS = "pass"


@dataclass(frozen=True)
class Node:
    """A step of the PDLC: a place the work item is (specification, "Data models").

    Attributes:
        id: unique node id (``^[a-z0-9][a-z0-9-]*$``, see ``graph.schema.json``).
        phase: the phase name label hooks sync (``phase:<phase>``).
        actor: ``agent``, ``human`` (a gate) or ``system`` (e.g. the terminal node).
        produces: artifact file names, relative to the work item's spec directory.
        session: ``new``, ``inherit`` (reuse the producing node's session) or ``None``.
        entry, exit: hook chains, in declared order.
        attempts: how many blocks the node tolerates before escalating.
        role: collaborators role whose people decide a gate (default ``approver``).
        approvals: distinct authorized approvers a gate needs (default 1); a
            changes-requested from any of them wins.
        command, stage: the-loop command and model tier for agent nodes.
        plan: an artifact (e.g. ``tasks.md``) whose task list the node runs, wave by
            wave, one harness session per task (:mod:`graph.tasks`); ``None``: the node's
            work is one session.
        max_parallel: ``maxParallel``: most task sessions of a plan at once; 1 runs the
            tasks one after another as commits on the work item's own branch.
        freshness: seconds a gate may wait before it is ``stale`` and its people are
            reminded (``freshness: 72h``); ``None``: no monitor.
    """

    id: str
    phase: str
    actor: str
    produces: tuple[str, ...] = ()
    session: str | None = None
    entry: tuple[HookCall, ...] = ()
    exit: tuple[HookCall, ...] = ()
    attempts: int = 3
    role: str = "approver"
    approvals: int = 1
    command: str | None = None
    stage: str | None = None
    plan: str | None = None
    max_parallel: int = 1
    freshness: float | None = None

    @property
    def is_gate(self) -> bool:
        """A human gate node (specification, "Is the human gate a node or a hook?")."""
        return self.actor == "human"

    @property
    def calls(self) -> tuple[HookCall, ...]:
        """Every hook call of the node: entry chain, then exit chain."""
        return self.entry + self.exit

    @property
    def forward_outcomes(self) -> tuple[str, ...]:
        """Outcomes that move the work item forward from this node: ``pass``, then what
        its exit hooks declare forward, in declared order."""
        out = [PASS]
        for call in self.exit:
            out += [o for o in call.definition.forward if o not in out]
        return tuple(out)

    @property
    def hands_off(self) -> frozenset[str]:
        """Outcomes whose decision this node hands to the node the edge leads to."""
        return frozenset().union(*(c.definition.hands_off for c in self.exit))

    @property
    def shown_waits(self) -> frozenset[str]:
        """Message codes of a wait at this node worth showing in the status comment."""
        return frozenset().union(*(c.definition.shown_waits for c in self.calls))


@dataclass(frozen=True)
class Edge:
    """``{from, to, on}``: leave ``source`` for ``target`` when the exit chain's outcome is
    ``on``."""

    source: str
    target: str
    on: str


@dataclass(frozen=True)
class Graph:
    """A compiled, immutable graph.

    Attributes:
        name: the graph's name.
        source: the file it was compiled from (for messages).
        start: id of the node a new work item enters.
        nodes: id -> node, in declared order.
        edges: all edges, in declared order.
        digest: SHA-256 hex of the canonical JSON form (pinned in work item state).
    """

    name: str
    source: str
    start: str
    nodes: Mapping[str, Node]
    edges: tuple[Edge, ...]
    index: Mapping[tuple[str, str], Edge] = field(repr=False)
    digest: str

    def node(self, node_id: str) -> Node:
        """Return node ``node_id``.

        Raises:
            KeyError: naming the valid ids.
        """
        try:
            return self.nodes[node_id]
        except KeyError:
            raise KeyError(
                f"no node {node_id!r} in {self.source}; valid ids: {', '.join(self.nodes)}"
            ) from None

    def edge(self, node_id: str, outcome: str) -> Edge | None:
        """The edge leaving ``node_id`` on ``outcome``, or ``None``."""
        return self.index.get((node_id, outcome))

    def outgoing(self, node_id: str) -> tuple[Edge, ...]:
        """Edges leaving ``node_id`` in declared order."""
        return tuple(e for e in self.edges if e.source == node_id)

    def is_terminal(self, node_id: str) -> bool:
        """A node with no outgoing edge: reaching it means the work item is done."""
        return not self.outgoing(node_id)

    def required_operations(self) -> dict[str, frozenset[str]]:
        """Integration name -> operations needed by every hook the graph uses."""
        needed: dict[str, set[str]] = {}
        for node in self.nodes.values():
            for call in node.calls:
                for integration, ops in call.definition.requires.items():
                    needed.setdefault(integration, set()).update(ops)
        return {k: frozenset(v) for k, v in sorted(needed.items())}

    def canonical(self) -> dict[str, Any]:
        """The canonical, JSON-serialisable form (sorted keys, declared order kept)."""
        return canonical_form(self.name, self.start, self.nodes.values(), self.edges)

    def node_digests(self) -> dict[str, str]:
        """Node id -> SHA-256 hex (first 16 digits) of the node's boundaries: its
        canonical form (fields, entry and exit chains) and its outgoing edges. A work
        item whose node keeps its digest under a new graph can go on unchanged."""
        form = canonical_form(self.name, self.start, self.nodes.values(), ())
        out = {}
        for entry in form["nodes"]:
            edges = [{"to": e.target, "on": e.on} for e in self.outgoing(entry["id"])]
            body = json.dumps({"node": entry, "edges": edges}, sort_keys=True,
                              separators=(",", ":"))
            out[entry["id"]] = hashlib.sha256(body.encode()).hexdigest()[:16]
        return out


def canonical_form(name: str, start: str, nodes: Iterable[Node],
                   edges: Iterable[Edge]) -> dict[str, Any]:
    """Canonical dict of a graph's parts; the digest is taken over its JSON bytes."""

    def chain(calls: tuple[HookCall, ...]) -> list[dict[str, Any]]:
        # A call's own timeout is part of the graph; absent, the form is as before.
        return [{"hook": c.name, "with": plain(c.params),
                 **({"timeout": c.timeout} if c.timeout is not None else {})}
                for c in calls]

    return {
        "name": name,
        "start": start,
        "nodes": [
            {
                "id": n.id,
                "phase": n.phase,
                "actor": n.actor,
                "produces": list(n.produces),
                "session": n.session,
                "role": n.role,
                "attempts": n.attempts,
                "command": n.command,
                "stage": n.stage,
                # only when set, so the digests of graphs without it stay as they were
                **({"approvals": n.approvals} if n.approvals != 1 else {}),
                "entry": chain(n.entry),
                "exit": chain(n.exit),
                # Optional fields enter the form only when set: a graph that does not
                # use them keeps its digest.
                **({"plan": n.plan, "maxParallel": n.max_parallel} if n.plan else {}),
                **({"freshness": n.freshness} if n.freshness is not None else {}),
            }
            for n in nodes
        ],
        "edges": [{"from": e.source, "to": e.target, "on": e.on} for e in edges],
    }


def plain(value: Any) -> Any:
    """``value`` as JSON data: mappings with sorted string keys, tuples as lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value
