"""Per-work-item state and its append-only event log, behind one interface.

State is a cache, not an authority (specification, "graph-state.json"). The service keeps
it in Redis (``workers.state``), the local CLI in JSON files
(``the_loop.stores.FileStateStore``); both satisfy :class:`StateStore`, and
:class:`MemoryStateStore` serves tests and dry runs. The event log's envelope is ``{seq,
id, type, data, caused_by}``; comment bodies are never stored, only metadata and SHA-256
digests.

The state record holds where a work item is, not its past, so its size (and the cost of
every delivery that reads and writes it) does not grow with the item's history: the
nodes entered, the decisions, the forced moves and the migrations are entries of the
event log, which :class:`Past` reads back when they are asked for. What the delivery
path needs of them is kept small: when the current visit began, each gate's standing
decision, the sources of the newest decisions, counters.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from graph.errors import LoopError
from graph.model import Status
from graph.status import status_effect

STATE_VERSION = 1
#: Decisions whose sources the state keeps for "one reply decides once".
DECIDED_KEPT = 16
#: The per-step lists a record of an older format kept (now in the event log).
LEGACY_LISTS = ("history", "decisions", "forced", "migrations")


def now() -> float:
    """Current time as Unix seconds (float)."""
    return time.time()


@dataclass
class WorkItemState:
    """Where one work item is in the graph and how it got there.

    Attributes:
        ref: the work item ref, e.g. ``github:OWNER/REPO#1``.
        graph_digest: digest of the compiled graph the item was walked with.
        current_node: id of the node the item is in.
        status: a :class:`~graph.model.Status`: ``active`` (an entry chain is due, or the
            walk is moving), ``waiting``, ``blocked``, ``escalated`` (a human has been asked
            to step in) or ``done``.
        entry_pending: the current node's entry chain has not yet passed.
        visits: node id -> times entered (the visit number keys idempotent effects).
        attempts: node id -> consecutive blocks in the current visit.
        outcomes: node id -> last exit outcome.
        results: node id -> {"entry"|"exit": [HookResult dicts]} of the last run.
        standing: gate id -> its latest recorded decision, ``{index, decision}``
            (``decision`` is the hook's record as it was handed on: who, what, when,
            digests, never text; ``invalidated`` added when a re-opened gate voided it);
            every decision is in the event log (``decision.recorded``, :class:`Past`).
        decision_count: decisions recorded so far (the next one's ``index``).
        decided: the decision sources (``<comment kind>:<id>``) of the newest
            :data:`DECIDED_KEPT` decisions, so one reply never decides twice.
        session: the harness session bound to the current node, if any.
        parked_reason: why the item is waiting or blocked, in the-loop's words.
        visit_started: when the current node visit began (Unix seconds); the nodes
            entered before are in the event log (``node.entered``, :class:`Past`).
        visit_via: how the current visit began (an edge's outcome, ``forced``,
            ``reconstructed``...: the ``via`` of its ``node.entered`` entry).
        sessions: node id -> the harness session bound to it (``session: inherit`` gates
            reuse their producing node's).
        next_input: node id -> what the node's work gets next: ``block`` (the hook and
            messages of its last block) and ``feedback`` (a gate's changes-requested or
            approved-with-comments reference: who, comment id, digest; never the text).
        last_block: node id -> fingerprint of the last block (a repeat escalates).
        escalated: ``{node, reason, at}`` while a human has been asked to step in.
        forced_count: forced moves so far; ``last_forced`` is the newest record
            (``{from, to, reason, bypassed, undeclared, operator, at}``); every one is in
            the event log (``work-item.forced``).
        status_digest: digest of the status comment last published.
        installation_id: the GitHub App installation the item was last seen through.
        repository: the repository's current full name (its ref keeps the name it had
            when the work item began; a rename changes this one), if known.
        kind: ``issue`` or ``pull_request``, if known.
        default_branch: the repository's default branch, if known.
        tickets: the Jira issue keys the work item links (``ABC-123``).
        effects: the outbox of the current node visit: effect id (``<ref>/<node>/<visit>/
            <hook>/<n>``) -> ``{op, integration, status: pending|done, attempts, at,
            result}``; recorded before the side effect is performed and marked done
            after it (never a body or a secret; see :mod:`graph.effects`).
        last_event: delivery id of the last event an exit chain consumed; the same
            delivery processed again (a retried job) is evaluated as a tick.
        blocked_by_delivery: ``{delivery, event, reason, attempts, at}`` while a delivery
            of this item is parked as a dead letter (later deliveries wait behind it).
        turn: the agent turn ordered and not yet reported (:mod:`graph.work`):
            ``{id, node, number, status: "ordered", at, order}``; ``None`` when no turn is
            outstanding.
        turns: node id -> agent turns ordered in the current visit.
        spend: what the work item's agent turns cost: ``{cost_usd, input_tokens,
            output_tokens, turns, seconds}`` (summed from each turn's report).
        votes: node id -> the decisive replies of the current visit of that gate that
            did not decide it on their own (``approvals: N``): ``{actor, outcome,
            source, kind, at, review_commit}``; cleared when the gate is entered.
        notes: what the status comment tells people beyond the chain's findings (a gate
            re-opened, a deciding comment deleted): ``{node, visit, code, text, at}``,
            shown while the work item is at that node visit; the newest few are kept.
        risk_tier: the work item's risk tier (1-4) when last evaluated, or ``None``
            (kept for the events that carry no labels).
        plan: the task plan the current node runs (:mod:`graph.tasks`), ``None`` when
            it runs none: ``{node, visit, artifact, digest, tasks, waves, wave, status,
            turns, sessions, out, heads, next_input, joins}``; ``joins`` holds one durable
            record per finished wave (``{wave, passed, failed, blocked, at}``), written
            before the next wave's first turn is ordered.
        reminders: ``<node>/<visit>`` -> freshness periods a stale gate was reminded of.
        node_digests: node id -> digest of the node (its fields, chains and outgoing
            edges) in the graph the item was walked with.
        drift: ``{from, to, nodes, at}`` while the deployed graph changed the current
            node's boundaries (or removed it): the item waits for ``the-loop state
            migrate``.
        migration_count: explicit migrations to a new graph so far (each is in the
            event log, ``work-item.migrated``).
        created_at, updated_at: Unix seconds.
    """

    ref: str
    graph_digest: str
    current_node: str
    status: Status = Status.ACTIVE
    entry_pending: bool = True
    visits: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    results: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    standing: dict[str, dict[str, Any]] = field(default_factory=dict)
    decision_count: int = 0
    decided: list[str] = field(default_factory=list)
    session: dict[str, Any] | None = None
    parked_reason: str | None = None
    visit_started: float = 0.0
    visit_via: str = ""
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    next_input: dict[str, dict[str, Any]] = field(default_factory=dict)
    last_block: dict[str, str] = field(default_factory=dict)
    escalated: dict[str, Any] | None = None
    forced_count: int = 0
    last_forced: dict[str, Any] | None = None
    status_digest: str | None = None
    installation_id: int | None = None
    repository: str | None = None
    kind: str | None = None
    default_branch: str | None = None
    tickets: list[str] = field(default_factory=list)
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)
    last_event: str | None = None
    blocked_by_delivery: dict[str, Any] | None = None
    turn: dict[str, Any] | None = None
    turns: dict[str, int] = field(default_factory=dict)
    spend: dict[str, Any] = field(default_factory=dict)
    votes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)
    risk_tier: int | None = None
    plan: dict[str, Any] | None = None
    reminders: dict[str, int] = field(default_factory=dict)
    node_digests: dict[str, str] = field(default_factory=dict)
    drift: dict[str, Any] | None = None
    migration_count: int = 0
    created_at: float = field(default_factory=now)
    updated_at: float = field(default_factory=now)
    version: int = STATE_VERSION

    @classmethod
    def new(cls, ref: str, graph_digest: str, start: str) -> WorkItemState:
        """A fresh state entering ``start``."""
        state = cls(ref=ref, graph_digest=graph_digest, current_node=start)
        state.enter(start, via="enrolled")
        return state

    def __post_init__(self) -> None:
        # The outbox of the visit was replaced (a node entered): the store writes the
        # effects anew with the record instead of one effect at a time.
        self.effects_reset = False
        # What a record of an older format kept per past step (history, decisions,
        # forced moves, migrations), for the runtime to move into the event log.
        self.legacy: dict[str, list[dict[str, Any]]] = {}

    def enter(self, node_id: str, *, via: str, forced: bool = False) -> dict[str, Any]:
        """Move the pointer to ``node_id``; its entry chain becomes due.

        Returns:
            the step's ``node.entered`` record, ``{node, via, at, forced, visit}``, for
            the event log (the state keeps only when the visit began).
        """
        self.current_node = node_id
        self.entry_pending = True
        self.status = Status.ACTIVE
        self.parked_reason = None
        self.escalated = None
        self.attempts[node_id] = 0
        self.turns[node_id] = 0
        self.turn = None  # a turn of the node left behind reports to nobody
        self.last_block.pop(node_id, None)
        self.visits[node_id] = self.visits.get(node_id, 0) + 1
        self.votes.pop(node_id, None)  # a new visit is decided afresh
        # Effects key on the node visit: those of the visit just left are never replayed.
        # The status publications (kept current in place, not made once) stay: their
        # records hold the ids of the status comment and check run, edited by id.
        kept = status_effect(self.ref)
        self.effects = {k: v for k, v in self.effects.items()
                        if k == kept or k.startswith(f"{kept}/")}
        self.effects_reset = True
        self.visit_started = now()
        self.visit_via = via
        return {"node": node_id, "via": via, "at": self.visit_started, "forced": forced,
                "visit": self.visits[node_id]}

    @property
    def visit(self) -> int:
        """How many times the current node has been entered (1 on the first visit)."""
        return self.visits.get(self.current_node, 1)

    @property
    def visit_started_at(self) -> float:
        """When the current node visit began (Unix seconds)."""
        return self.visit_started or self.created_at

    def decided_sources(self) -> frozenset[str]:
        """The decision sources (``<comment kind>:<id>``) the newest
        :data:`DECIDED_KEPT` decisions used (older replies were made before the current
        visit began, which rules them out on its own)."""
        return frozenset(self.decided)

    def record_decision(self, decision: Mapping[str, Any]) -> dict[str, Any]:
        """Record a gate decision (the hook's dict, kept as it is) as its gate's standing
        one. Returns its ``decision.recorded`` entry for the event log: ``{index,
        decision}`` (``index`` counts from 0)."""
        entry = {"index": self.decision_count, "decision": dict(decision)}
        self.decision_count += 1
        self.standing[str(decision.get("node"))] = entry
        self.decided.extend(str(s) for s in decision.get("sources") or () if s)
        del self.decided[:-DECIDED_KEPT]
        return entry

    def standing_decisions(self) -> list[tuple[int, dict[str, Any]]]:
        """``(index, decision)`` of every gate's standing decision, oldest first."""
        return sorted(((int(e["index"]), e["decision"]) for e in self.standing.values()),
                      key=lambda pair: pair[0])

    def decision(self, index: int) -> dict[str, Any] | None:
        """The standing decision recorded as ``index``, or ``None`` (superseded since by
        a later decision of its gate, or never recorded)."""
        return next((d for i, d in self.standing_decisions() if i == index), None)

    def note(self, code: str, text: str, *, keep: int = 5) -> None:
        """Add a note for the status comment of the current node visit (the-loop's own
        words; never payload text)."""
        self.notes.append({"node": self.current_node, "visit": self.visit, "code": code,
                           "text": text, "at": now()})
        del self.notes[:-keep]

    def current_notes(self) -> list[str]:
        """Texts of the notes of the current node visit, oldest first."""
        return [str(n["text"]) for n in self.notes
                if n.get("node") == self.current_node and n.get("visit") == self.visit]

    def record(self) -> dict[str, Any]:
        """The fields as stored (every declared field; ``effects`` included)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (``schemaVersion`` is the state format version).

        A deep copy made through the JSON encoder (every field is JSON data): an order of
        magnitude cheaper than ``dataclasses.asdict`` on a long-lived work item, which
        matters because the state is saved around every side effect.
        """
        return json.loads(json.dumps(self.record()))

    def to_json(self, *, indent: int | None = None, effects: bool = True) -> str:
        """The stored form: JSON text of :meth:`to_dict`'s shape (keys sorted); with
        ``effects=False`` the outbox is left out (``{}``: a store that keeps each effect
        on its own, :meth:`StateStore.save_effect`)."""
        record = self.record()
        if not effects:
            record["effects"] = {}
        return json.dumps(record, indent=indent, sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes, source: str) -> WorkItemState:
        """Parse the stored form (what every :class:`StateStore` keeps).

        Args:
            raw: JSON text (UTF-8 bytes too).
            source: where it was read, for the message (a path, a key).

        Raises:
            StateError: naming ``source``: not JSON, not an object, missing or mistyped
                fields.
        """
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StateError(f"{source}: not valid JSON ({type(exc).__name__})") from None
        try:
            return cls.from_dict(data)
        except StateError as exc:
            raise StateError(f"{source}: {exc}") from None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkItemState:
        """Inverse of :meth:`to_dict`.

        Raises:
            StateError: missing or mistyped fields.
        """
        if not isinstance(data, Mapping):
            raise StateError("state must be a JSON object")
        try:
            known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
            state = cls(**known)
        except TypeError as exc:
            raise StateError(f"state is missing required fields ({exc})") from None
        _upgrade(state, data)
        if not isinstance(state.current_node, str) or not isinstance(state.ref, str):
            raise StateError("state fields 'ref' and 'current_node' must be strings")
        try:
            state.status = Status(state.status)
        except ValueError:
            raise StateError(f"state field 'status' is {state.status!r}; expected one of "
                             f"{', '.join(s.value for s in Status)}") from None
        return state


def _upgrade(state: WorkItemState, data: Mapping[str, Any]) -> None:
    """Derive the summaries from a record of an older format, which kept every past
    step in lists (:data:`LEGACY_LISTS`); the lists themselves are kept in
    ``state.legacy`` for the runtime to move into the event log (``history.imported``)."""
    legacy = {k: [dict(e) for e in data[k] if isinstance(e, Mapping)]
              for k in LEGACY_LISTS if isinstance(data.get(k), list) and data[k]}
    if not legacy or "decision_count" in data:
        return
    state.legacy = legacy
    entered = [h for h in legacy.get("history", ()) if h.get("node") == state.current_node]
    if entered:
        state.visit_started = float(entered[-1].get("at") or 0.0)
        state.visit_via = str(entered[-1].get("via") or "")
    for decision in legacy.get("decisions", ()):
        state.record_decision(decision)
    forced = legacy.get("forced", [])
    state.forced_count, state.last_forced = len(forced), (forced[-1] if forced else None)
    state.migration_count = len(legacy.get("migrations", ()))


@dataclass(frozen=True)
class Past:
    """What a work item went through, read from its event log when asked for (the
    ``state`` command, the API, ``check --recompute``); the state record keeps only where
    the item is.

    Attributes:
        history: ``{node, via, at, forced}`` per node entered, oldest first
            (``node.entered``).
        decisions: the recorded gate decisions, oldest first, each the hook's dict as it
            was recorded (``decision.recorded``) with ``invalidated: {via, at}`` added
            when a re-opened gate voided it (``decision.invalidated``).
        forced: ``{from, to, reason, bypassed, undeclared, operator, at}`` per forced
            move (``work-item.forced``).
        migrations: ``{from, to, node, target, changed, reason, operator, at}`` per
            explicit migration (``work-item.migrated``).
    """

    history: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    forced: list[dict[str, Any]]
    migrations: list[dict[str, Any]]

    @classmethod
    def of(cls, events: Iterable[LogEvent],
           legacy: Mapping[str, list[dict[str, Any]]] | None = None) -> Past:
        """The past the entries ``events`` (a whole log, oldest first) record; a record
        of an older format's lists (``history.imported``, or ``legacy``: the
        ``WorkItemState.legacy`` of a record not moved into the log yet) come first."""
        if legacy:
            imported = LogEvent(0, "", "history.imported", legacy)
            events = [imported, *events]
        history: list[dict[str, Any]] = []
        decisions: dict[int, dict[str, Any]] = {}
        forced: list[dict[str, Any]] = []
        migrations: list[dict[str, Any]] = []
        for event in events:
            data = event.data
            if event.type == "node.entered":
                history.append({k: data.get(k) for k in ("node", "via", "at", "forced")})
            elif event.type == "decision.recorded" and isinstance(data.get("decision"),
                                                                   Mapping):
                decisions[int(data.get("index", len(decisions)))] = dict(data["decision"])
            elif event.type == "decision.invalidated":
                voided = decisions.get(int(data.get("index", -1)))
                if voided is not None:
                    voided.setdefault("invalidated", {"via": data.get("via"),
                                                      "at": data.get("at")})
            elif event.type == "work-item.forced":
                forced.append(dict(data))
            elif event.type == "work-item.migrated":
                migrations.append(dict(data))
            elif event.type == "history.imported":
                history[:0] = [dict(h) for h in data.get("history") or ()]
                for index, decision in enumerate(data.get("decisions") or ()):
                    decisions.setdefault(index, dict(decision))
                forced[:0] = [dict(f) for f in data.get("forced") or ()]
                migrations[:0] = [dict(m) for m in data.get("migrations") or ()]
        return cls(history, [decisions[i] for i in sorted(decisions)], forced, migrations)

    @classmethod
    def read(cls, store: StateStore, ref: str,
             legacy: Mapping[str, list[dict[str, Any]]] | None = None) -> Past:
        """``ref``'s past from ``store``'s event log (reads the whole log: for commands
        and pages, never the delivery path); ``legacy`` as for :meth:`of`."""
        return cls.of(store.events(ref), legacy)


@dataclass(frozen=True)
class LogEvent:
    """One entry of a work item's append-only event log.

    Attributes:
        seq: 1-based position in the work item's log.
        id: unique id of this entry.
        type: e.g. ``delivery.received``, ``node.entered``, ``chain.completed``.
        data: metadata only (ids, statuses, digests); never comment text or secrets.
        caused_by: id of what caused it (a delivery id or another entry's id), if any.
        at: Unix seconds.
    """

    seq: int
    id: str
    type: str
    data: Mapping[str, Any]
    caused_by: str | None = None
    at: float = 0.0

    def record(self) -> dict[str, Any]:
        """The fields as stored (every declared field; ``effects`` included)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """The envelope ``{seq, id, type, data, caused_by, at}``."""
        return {
            "seq": self.seq,
            "id": self.id,
            "type": self.type,
            "data": dict(self.data),
            "caused_by": self.caused_by,
            "at": self.at,
        }


class StateError(LoopError, ValueError):
    """Stored state could not be read as a :class:`WorkItemState`."""


class StateStore(Protocol):
    """Load and save work item state; append to and read its event log."""

    def load(self, ref: str) -> WorkItemState | None:
        """The stored state of ``ref``, or ``None``. Raises :class:`StateError` if corrupt."""
        ...

    def save(self, state: WorkItemState) -> None:
        """Persist ``state`` (durably, before the caller performs side effects). Its
        effects are written with it only when the visit's outbox was replaced
        (``state.effects_reset``); otherwise :meth:`save_effect` keeps them."""
        ...

    def save_effect(self, state: WorkItemState, effect: str) -> None:
        """Persist one record of ``state.effects`` (``effect`` its id) on its own: a small
        write, not the whole record (the outbox writes around every side effect)."""
        ...

    def append_event(
        self, ref: str, type: str, data: Mapping[str, Any], caused_by: str | None = None
    ) -> LogEvent:
        """Append one entry to ``ref``'s event log and return it."""
        ...

    def events(self, ref: str) -> list[LogEvent]:
        """All entries of ``ref``'s event log, oldest first."""
        ...

    def caused_by(self, ref: str, delivery: str) -> list[LogEvent]:
        """The entries of ``ref``'s log that ``delivery`` caused, oldest first, from an
        index (what a retried delivery checks; never a read of the whole log)."""
        ...

    def logged(self, ref: str, type: str) -> bool:
        """Whether ``ref``'s log ever had an entry of ``type``, from an index."""
        ...

    def quarantine(self, ref: str) -> str | None:
        """Move ``ref``'s unreadable state aside (kept, not deleted); return where to."""
        ...


def new_event_id() -> str:
    """A unique event id."""
    return uuid.uuid4().hex


class MemoryStateStore:
    """In-memory :class:`StateStore` for tests and dry runs."""

    def __init__(self) -> None:
        self._states: dict[str, str] = {}
        self._logs: dict[str, list[LogEvent]] = {}

    def load(self, ref: str) -> WorkItemState | None:
        raw = self._states.get(ref)
        return None if raw is None else WorkItemState.from_json(raw, f"memory:{ref}")

    def save(self, state: WorkItemState) -> None:
        state.updated_at = now()
        self._states[state.ref] = state.to_json()
        state.effects_reset = False

    def save_effect(self, state: WorkItemState, effect: str) -> None:
        self.save(state)

    def quarantine(self, ref: str) -> str | None:
        raw = self._states.pop(ref, None)
        if raw is None:
            return None
        self._states[f"{ref}:corrupt"] = raw
        return f"{ref}:corrupt"

    def append_event(
        self, ref: str, type: str, data: Mapping[str, Any], caused_by: str | None = None
    ) -> LogEvent:
        log = self._logs.setdefault(ref, [])
        event = LogEvent(len(log) + 1, new_event_id(), type, dict(data), caused_by, now())
        log.append(event)
        return event

    def events(self, ref: str) -> list[LogEvent]:
        return list(self._logs.get(ref, []))

    def caused_by(self, ref: str, delivery: str) -> list[LogEvent]:
        return [e for e in self._logs.get(ref, []) if e.caused_by == delivery]

    def logged(self, ref: str, type: str) -> bool:
        return any(e.type == type for e in self._logs.get(ref, []))
