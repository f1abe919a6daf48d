"""What the read API and the dashboard show, read from the service's Redis: work items,
their detail, event log and graph envelope, and the parked deliveries.

Every answer is JSON data built from stored state only (no clock, no request), in a
fixed order, so the same state gives the same bytes (:func:`graph.envelope.encode`).
Nothing a person wrote is returned: the state and the event log hold metadata and
SHA-256 digests (:mod:`graph.state`), hook messages and reasons are the-loop's own words,
and free text that does appear in state (an operator's ``--reason``) is given as its
digest (:func:`graph.envelope.metadata`).

Listing reads every work item's state (``SCAN P:state:*``, then ``MGET`` in batches):
one pass over the deployment's work items per request, filtered and sorted in the
process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from foundation import links
from foundation.inbox.dead import Deliveries
from foundation.settings import Settings
from foundation.turns import TurnKeys, TurnRecords
from graph.envelope import LIMITS, build, metadata, timestamp
from graph.errors import LoopError
from graph.model import Graph, Status
from graph.refs import WorkItemRef
from graph.state import LogEvent, Past, StateError, WorkItemState
from graph.work import spend_of
from workers.reconcile import ReconcileKeys, stored_state
from workers.state import RedisStateStore

log = logging.getLogger("the_loop.web")

#: Work items per page: the default and the most one request may ask for.
PER_PAGE, MAX_PER_PAGE = 30, 100
#: Events per page of ``/events``: the default and the most.
EVENTS_PER_PAGE, MAX_EVENTS_PER_PAGE = 500, 500
#: States read per MGET while listing.
BATCH = 500
STATUSES = tuple(s.value for s in Status)
APPROVALS = ("approved", "approved-with-comments")
#: The operator's commands for a parked delivery (``the-loop deliveries``).
RETRY_COMMAND = "the-loop deliveries retry {id}"
DISCARD_COMMAND = "the-loop deliveries discard {id}"


class QueryError(LoopError, ValueError):
    """A query parameter is invalid; the message names it and what is accepted (never
    the value sent)."""


@dataclass(frozen=True)
class Query:
    """A work-item listing: filters (``None``: any) and the page.

    Attributes:
        repository: ``OWNER/REPO``.
        phase: a phase of the graph.
        status: a :class:`graph.model.Status` value.
        page: 1-based page number.
        per_page: work items per page (1..100).
    """

    repository: str | None = None
    phase: str | None = None
    status: str | None = None
    page: int = 1
    per_page: int = PER_PAGE


def _positive(args: Mapping[str, str], name: str, default: int, most: int,
              least: int = 1) -> int:
    raw = args.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not least <= int(raw) <= most:
        raise QueryError(f"{name} must be a whole number from {least} to {most}")
    return int(raw)


class ReadModel:
    """The read side over one deployment's Redis.

    Args:
        connection: Redis client (the receiver's: short timeouts).
        settings: the process's settings (key prefix, queue names, GitHub's web root).
        graph: returns the compiled graph (``THE_LOOP_GRAPH``, else the shipped one);
            called once, on first use, so a receiver that serves no page never loads it.

    Errors: ``redis.RedisError`` propagates (the routes answer 503).
    """

    def __init__(self, connection: redis.Redis, settings: Settings,
                 graph: Callable[[], Graph]) -> None:
        worker = settings.worker
        self.redis = connection
        self.store = RedisStateStore(connection, worker.prefix)
        self.keys = self.store.keys
        self.turns = TurnRecords(connection, TurnKeys(worker.prefix), settings.runner.queue)
        self.deliveries = Deliveries(connection, worker, self.store)
        self.reconcile_keys = ReconcileKeys(worker.prefix)
        self.web_url = settings.dashboard.github_web_url
        self._load_graph = graph
        self._graph: Graph | None = None
        self._lock = threading.Lock()

    # -- the graph ----------------------------------------------------------------------

    @property
    def graph(self) -> Graph:
        """The compiled graph, loaded on first use.

        Raises:
            graph.compile.GraphError: it does not compile.
        """
        with self._lock:
            if self._graph is None:
                self._graph = self._load_graph()
            return self._graph

    def phases(self) -> list[str]:
        """The graph's phases in node order (each once)."""
        return list(dict.fromkeys(n.phase for n in self.graph.nodes.values()))

    def phase_of(self, node: str) -> str | None:
        """The phase of ``node``, or ``None`` when the graph has no such node."""
        found = self.graph.nodes.get(node)
        return found.phase if found is not None else None

    # -- reading states -----------------------------------------------------------------

    def _state_keys(self) -> Iterator[str]:
        prefix = self.keys.state_prefix
        for raw in self.redis.scan_iter(match=self.keys.state_match, count=1000):
            key = raw.decode() if isinstance(raw, bytes) else str(raw)
            if WorkItemRef.parse_or_none(key.removeprefix(prefix)) is not None:
                yield key

    def states(self) -> list[WorkItemState]:
        """Every readable work item's state, in no particular order (an unreadable one
        is logged and left out)."""
        keys = sorted(set(self._state_keys()))
        states = []
        for start in range(0, len(keys), BATCH):
            chunk = keys[start:start + BATCH]
            for key, raw in zip(chunk, self.redis.mget(chunk), strict=True):
                if raw is None:
                    continue  # deleted meanwhile
                try:
                    states.append(WorkItemState.from_json(raw, key))
                except StateError as exc:
                    log.warning("dashboard: %s", exc)
        return states

    def state(self, ref: str) -> WorkItemState | None:
        """``ref``'s state, or ``None`` (unknown or unreadable)."""
        try:
            return self.store.load(ref)
        except StateError as exc:
            log.warning("dashboard: %s", exc)
            return None

    # -- the listing --------------------------------------------------------------------

    def query(self, args: Mapping[str, str]) -> Query:
        """A :class:`Query` from request arguments (``repository``, ``phase``, ``status``,
        ``page``, ``per_page``).

        Raises:
            QueryError: naming the parameter and the accepted values.
        """
        repository = args.get("repository") or None
        if repository is not None:
            try:
                WorkItemRef(repository, 1)
            except ValueError:
                raise QueryError("repository must be OWNER/REPO, e.g. "
                                 "repository=octo-org/octo-repo") from None
        phase = args.get("phase") or None
        if phase is not None and phase not in self.phases():
            raise QueryError(f"phase must be one of {', '.join(self.phases())}")
        status = args.get("status") or None
        if status is not None and status not in STATUSES:
            raise QueryError(f"status must be one of {', '.join(STATUSES)}")
        return Query(repository, phase, status, _positive(args, "page", 1, 10**6),
                     _positive(args, "per_page", PER_PAGE, MAX_PER_PAGE))

    def summary(self, state: WorkItemState) -> dict[str, Any]:
        """One work item as the listing shows it."""
        ref = WorkItemRef.parse(state.ref)
        return {
            "ref": state.ref, "repository": ref.repository, "number": ref.number,
            "node": state.current_node, "phase": self.phase_of(state.current_node),
            "status": str(state.status), "parked_reason": state.parked_reason,
            "escalated": state.escalated is not None,
            "held_by_delivery": (state.blocked_by_delivery or {}).get("delivery"),
            "created_at": timestamp(state.created_at),
            "updated_at": timestamp(state.updated_at),
            "links": self._links(ref),
        }

    def _links(self, ref: WorkItemRef) -> dict[str, str]:
        text = ref.format()
        return {"ui": links.work_item_path(text), "api": links.api_path(text),
                "graph": links.api_path(text, "graph"), "events": links.api_path(text, "events"),
                "github": links.github_item(self.web_url, ref.repository, ref.number)}

    def matching(self, query: Query,
                 states: Sequence[WorkItemState] | None = None) -> list[WorkItemState]:
        """The states ``query``'s filters select (of ``states``, default every work
        item's), newest first (created, then ref)."""
        chosen = []
        for state in self.states() if states is None else states:
            ref = WorkItemRef.parse(state.ref)
            if query.repository and ref.repository.casefold() != query.repository.casefold():
                continue
            if query.phase and self.phase_of(state.current_node) != query.phase:
                continue
            if query.status and str(state.status) != query.status:
                continue
            chosen.append(state)
        chosen.sort(key=lambda s: s.ref)
        chosen.sort(key=lambda s: round(s.created_at, 3), reverse=True)
        return chosen

    def work_items(self, query: Query) -> dict[str, Any]:
        """``GET /api/v1/work-items``: one page of the selected work items, newest first:
        ``{work_items, page, per_page, total, pages, filters}``."""
        chosen = self.matching(query)
        start = (query.page - 1) * query.per_page
        return {
            "work_items": [self.summary(s) for s in chosen[start:start + query.per_page]],
            "page": query.page, "per_page": query.per_page, "total": len(chosen),
            "pages": max(1, -(-len(chosen) // query.per_page)),
            "filters": {"repository": query.repository, "phase": query.phase,
                        "status": query.status},
        }

    # -- one work item ------------------------------------------------------------------

    def events_of(self, ref: str) -> list[LogEvent]:
        """``ref``'s whole event log, oldest first."""
        return self.store.events(ref)

    def detail(self, state: WorkItemState) -> dict[str, Any]:
        """``GET /api/v1/work-items/{ref}``: where the work item is and how it got there
        (see the route's docstring for the fields)."""
        events = self.events_of(state.ref)
        past = Past.of(events, state.legacy)
        ref = WorkItemRef.parse(state.ref)
        graph = self.graph
        node = graph.nodes.get(state.current_node)
        blocked = state.blocked_by_delivery
        return {
            **self.summary(state),
            "entry_pending": state.entry_pending,
            "graph_digest": state.graph_digest,
            "graph_changed": state.graph_digest != graph.digest,
            "actor": node.actor if node is not None else None,
            "escalation": None if state.escalated is None else {
                "node": state.escalated.get("node"), "reason": state.escalated.get("reason"),
                "at": timestamp(state.escalated.get("at"))},
            # The status comment's notes of this visit (a hook's refusal, a gate re-opened).
            "notes": state.current_notes(),
            "attempts": dict(sorted(state.attempts.items())),
            "visits": dict(sorted(state.visits.items())),
            "outcomes": dict(sorted(state.outcomes.items())),
            "hooks": self.hooks(state),
            "decisions": [self._decision(ref, d) for d in past.decisions],
            "approved_shas": list(dict.fromkeys(
                str(d["head_sha"]) for d in past.decisions
                if d.get("outcome") in APPROVALS and d.get("head_sha"))),
            "forced": [self._forced(m) for m in past.forced],
            "history": [{"node": h.get("node"), "via": h.get("via"),
                         "forced": bool(h.get("forced")), "at": timestamp(h.get("at"))}
                        for h in past.history],
            "sessions": self.sessions(state, events),
            "spend": spend_of(state.spend),
            "held_by": None if blocked is None else {
                "delivery": blocked.get("delivery"), "event": blocked.get("event"),
                "reason": blocked.get("reason"), "attempts": blocked.get("attempts"),
                "at": timestamp(blocked.get("at")),
                "retry": RETRY_COMMAND.format(id=blocked.get("delivery")),
                "discard": DISCARD_COMMAND.format(id=blocked.get("delivery"))},
            "events": len(events),
        }

    def hooks(self, state: WorkItemState) -> list[dict[str, Any]]:
        """Every hook of the current node, entry chain then exit chain, with its last
        result: ``{boundary, hook, status, messages}`` (``status`` ``not-run`` when the
        chain has not reached it; messages are the-loop's own words and paths)."""
        node = self.graph.nodes.get(state.current_node)
        results = state.results.get(state.current_node, {})
        out = []
        chains = (("entry", node.entry), ("exit", node.exit)) if node is not None else ()
        for boundary, calls in chains:
            recorded = list(results.get(boundary, []))
            for call in calls:
                result = next((r for r in recorded if r.get("hook") == call.name), None)
                if result is not None:
                    recorded.remove(result)
                out.append({
                    "boundary": boundary, "hook": call.name,
                    "status": str(result.get("status")) if result else "not-run",
                    "messages": [{"text": m.get("text"), "path": m.get("path"),
                                  "code": m.get("code")}
                                 for m in (result or {}).get("messages", [])
                                 if isinstance(m, Mapping)],
                })
        return out

    def _decision(self, ref: WorkItemRef, decision: Mapping[str, Any]) -> dict[str, Any]:
        comment_id = decision.get("comment_id")
        return {
            "node": decision.get("node"), "outcome": decision.get("outcome"),
            "actor": decision.get("actor"), "source": decision.get("source"),
            "at": timestamp(decision.get("at")), "head_sha": decision.get("head_sha"),
            "delivery": decision.get("delivery"), "comment_id": comment_id,
            "body_sha256": decision.get("body_sha256"),
            "link": links.github_decision(self.web_url, ref.repository, ref.number,
                                          decision.get("source"), comment_id),
        }

    @staticmethod
    def _forced(move: Mapping[str, Any]) -> dict[str, Any]:
        return {"from": move.get("from"), "to": move.get("to"),
                "bypassed": list(move.get("bypassed") or []),
                "undeclared": bool(move.get("undeclared")), "operator": move.get("operator"),
                "at": timestamp(move.get("at")),
                "reason_sha256": metadata({"reason": move.get("reason")})["reason_sha256"]}

    def sessions(self, state: WorkItemState,
                 events: Sequence[LogEvent]) -> list[dict[str, Any]]:
        """The work item's harness sessions with their turns, oldest first: ``{id,
        nodes, runner, turns: [{node, number, status, ordered_at, ended_at, seconds,
        cost_usd, head_sha}], turn_count, cost_usd, seconds}``. Turns come from the event
        log (``turn.ordered``, ``turn.completed``); the outstanding one's status from the
        runner's record (``queued``, ``running``...); one ordered but never reported
        whose node was left is ``abandoned``."""
        sessions: dict[str, dict[str, Any]] = {}

        def session(sid: str) -> dict[str, Any]:
            return sessions.setdefault(sid, {"id": sid, "nodes": [], "runner": None,
                                             "turns": []})

        for nid, bound in state.sessions.items():
            if isinstance(bound, Mapping) and bound.get("id"):
                entry = session(str(bound["id"]))
                entry["nodes"].append(nid)
                entry["runner"] = entry["runner"] or bound.get("runner")
        open_turns: dict[tuple[str, int], dict[str, Any] | None] = {}
        for event in events:
            data = event.data
            if event.type not in ("turn.ordered", "turn.completed") or not data.get("session"):
                continue
            key = (str(data.get("node")), int(data.get("turn") or 0))
            turn: dict[str, Any] | None
            if event.type == "turn.ordered":
                turn = {"node": key[0], "number": key[1], "status": "ordered",
                        "ordered_at": timestamp(event.at), "ended_at": None, "seconds": None,
                        "cost_usd": None, "head_sha": None}
                session(str(data["session"]))["turns"].append(turn)
                open_turns[key] = turn
                continue
            turn = open_turns.pop(key, None)
            if turn is None:
                turn = {"node": key[0], "number": key[1], "ordered_at": None}
                session(str(data["session"]))["turns"].append(turn)
            turn.update({"status": str(data.get("status")), "ended_at": timestamp(event.at),
                         "seconds": data.get("seconds"), "cost_usd": data.get("cost_usd"),
                         "head_sha": data.get("head_sha")})
        live = state.turn
        live_key = (str(live.get("node")), int(live.get("number") or 0)) if live else None
        for key, turn in open_turns.items():
            if turn is not None and key != live_key:
                turn["status"] = "abandoned"  # its node was left before it reported
        if live and live_key in open_turns:
            record = self.turns.get(state.ref) or {}
            outstanding = open_turns[live_key]
            if outstanding is not None and record.get("id") == live.get("id"):
                outstanding["status"] = record.get("status") or "ordered"
        out = []
        for entry in sessions.values():
            turns = entry["turns"]
            entry["turn_count"] = len(turns)
            entry["cost_usd"] = round(sum(float(t.get("cost_usd") or 0) for t in turns), 6)
            entry["seconds"] = round(sum(float(t.get("seconds") or 0) for t in turns), 3)
            out.append(entry)
        out.sort(key=lambda s: (min((t.get("ordered_at") or "~" for t in s["turns"]),
                                    default="~"), s["id"]))
        return out

    def events(self, ref: str, args: Mapping[str, str]) -> dict[str, Any]:
        """``GET /api/v1/work-items/{ref}/events``: the event log, oldest first, metadata
        only: ``{ref, events: [{seq, type, at, caused_by, data}], after, limit, total,
        next_after}``; ``after`` (a sequence number) and ``limit`` (1..500) page it.

        Raises:
            QueryError: a bad ``after`` or ``limit``.
        """
        after = _positive(args, "after", 0, 10**12, least=0)
        limit = _positive(args, "limit", EVENTS_PER_PAGE, MAX_EVENTS_PER_PAGE)
        events = self.events_of(ref)
        page = [e for e in events if e.seq > after][:limit]
        last = page[-1].seq if page else after
        return {
            "ref": ref, "after": after, "limit": limit, "total": len(events),
            "next_after": last if events and last < events[-1].seq else None,
            "events": [{"seq": e.seq, "type": e.type, "at": timestamp(e.at),
                        "caused_by": e.caused_by, "data": metadata(e.data)} for e in page],
        }

    def envelope(self, state: WorkItemState, args: Mapping[str, str]) -> dict[str, Any]:
        """``GET /api/v1/work-items/{ref}/graph``: the ``the-loop.graph/v1`` envelope
        (:func:`graph.envelope.build`); ``since`` (a sequence number) leaves out the
        events up to it.

        Raises:
            QueryError: a bad ``since``.
            graph.envelope.EnvelopeLimitError: past a limit.
        """
        since = _positive(args, "since", 0, 10**12, least=0)
        return build(self.graph, state, self.events_of(state.ref), since=since, limits=LIMITS)

    # -- deliveries ---------------------------------------------------------------------

    def failed(self) -> dict[str, Any]:
        """``GET /api/v1/deliveries/failed``: the parked deliveries, oldest first, each
        with the exact commands that retry or discard it, and those waiting for a retry:
        ``{failed: [{delivery, event, work_item, reason, attempts, at, payload_kept,
        retry, discard, links}], retrying: [{delivery, due, attempts, last_error}],
        reconciler}`` (:meth:`reconciler`)."""
        failed = []
        for parked in sorted(self.deliveries.failed(), key=lambda p: (p.at, p.delivery)):
            ref = WorkItemRef.parse_or_none(parked.work_item)
            failed.append({
                "delivery": parked.delivery, "event": parked.event,
                "work_item": parked.work_item, "reason": parked.reason,
                "attempts": parked.attempts, "at": timestamp(parked.at),
                "payload_kept": parked.payload_kept,
                "retry": RETRY_COMMAND.format(id=parked.delivery),
                "discard": DISCARD_COMMAND.format(id=parked.delivery),
                "links": self._links(ref) if ref is not None else None,
            })
        retrying = [{"delivery": r["delivery"], "due": timestamp(r["due"]),
                     "attempts": r["attempts"], "last_error": r["last_error"]}
                    for r in sorted(self.deliveries.retrying(),
                                    key=lambda r: (r["due"], r["delivery"]))]
        return {"failed": failed, "retrying": retrying, "reconciler": self.reconciler()}

    def reconciler(self) -> dict[str, Any] | None:
        """The reconciler's last run (:mod:`workers.reconcile`), or ``None`` before the
        first: ``{last_run, outcome, worker, checked, recovered: {failed, unreceived},
        cursor, cursor_at, error}`` (times ISO 8601; ``cursor`` the newest delivery log
        attempt id a complete run read)."""
        state = stored_state(self.redis, self.reconcile_keys)
        if "last_run" not in state:
            return None
        return {"last_run": timestamp(float(state["last_run"])),
                "outcome": state.get("outcome"), "worker": state.get("worker") or None,
                "checked": int(state.get("checked") or 0),
                "recovered": {r: int(state.get(r) or 0) for r in ("failed", "unreceived")},
                "cursor": int(state["cursor"]) if state.get("cursor") else None,
                "cursor_at": timestamp(float(state["cursor_at"]))
                if state.get("cursor_at") else None,
                "error": state.get("error") or None}
