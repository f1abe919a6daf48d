"""Monitors of waiting gates: is a work item that waits for people still fresh?

A gate node may declare ``freshness`` (``72h``): how long it may wait before it should
have moved. Each waiting work item at such a gate is an observation whose signal is the
time it entered the gate, and gets one status (the rules of a monitor map's observation
contract):

- ``healthy``: the signal is at most ``freshness`` seconds old;
- ``stale``: older;
- ``skew``: the signal is dated more than :data:`SKEW_TOLERANCE` seconds after *now* (a
  clock is wrong: reported, never treated as fresh);
- ``unknown``: there is no signal.

A stale gate is reminded once per freshness period (period *k* = whole periods waited),
never more: :func:`due_reminder` says which period is due; the runtime sends it through
the gate's ``notify`` hooks and records it (``WorkItemState.reminders``). Pure code: the
caller passes *now*.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from graph.model import Graph, Node, Status
from graph.state import WorkItemState

HEALTHY, STALE, SKEW, UNKNOWN = "healthy", "stale", "skew", "unknown"
#: Seconds a signal may lie in the future before it is ``skew``.
SKEW_TOLERANCE = 5.0
#: ``InboundEvent.kind`` of a reminder being due (the worker's monitor sweep sends it).
REMINDER = "the-loop.monitor.stale"
#: The ``notify`` event of a reminder.
REMINDER_EVENT = "phase-approval-stale"
#: A ``wait`` result's ``data`` key: when its hook should be evaluated again with no new
#: event (Unix seconds; ``verify-tests``'s ``timeout``). The worker's monitor sweep
#: sends the work item a delivery of :data:`DUE` then.
WAKE_AT = "wake_at"
#: ``InboundEvent.kind`` of a waiting hook's time having come.
DUE = "the-loop.monitor.due"


def waiting_data(state: WorkItemState) -> dict[str, Any]:
    """The ``data`` of the ``wait`` that parks ``state`` (the stopping result of its
    current node's last exit chain); ``{}`` when it does not wait (status
    ``waiting``) on its exit chain."""
    if state.status != Status.WAITING:
        return {}
    results = (state.results.get(state.current_node) or {}).get("exit") or []
    last = results[-1] if results else None
    if not isinstance(last, dict) or last.get("status") != "wait":
        return {}
    data = last.get("data")
    return dict(data) if isinstance(data, dict) else {}


def wake_at(state: WorkItemState) -> float | None:
    """When the ``wait`` that parks ``state`` asked to be evaluated again
    (:data:`WAKE_AT` of :func:`waiting_data`), or ``None``: it waits for no time, or
    does not wait."""
    at = waiting_data(state).get(WAKE_AT)
    return float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None


def status_of(last_signal: float | None, now: float, freshness: float, *,
              tolerance: float = SKEW_TOLERANCE) -> str:
    """One observation's status (see the module docstring); seconds throughout."""
    if last_signal is None:
        return UNKNOWN
    if last_signal - now > tolerance:
        return SKEW
    return HEALTHY if now - last_signal <= freshness else STALE


@dataclass(frozen=True)
class Monitor:
    """A waiting work item's monitor.

    Attributes:
        ref, node: the work item and the gate it waits at.
        status: ``healthy``, ``stale``, ``skew`` or ``unknown``.
        freshness: the gate's ``freshness``, seconds.
        last_signal: when the work item entered the gate (Unix seconds), or ``None``.
        age: seconds since then (negative under skew), or ``None``.
        period: whole freshness periods waited (0 while healthy).
        reminded: periods already reminded in this visit.
    """

    ref: str
    node: str
    status: str
    freshness: float
    last_signal: float | None
    age: float | None
    period: int
    reminded: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def reminder_key(node: str, visit: int) -> str:
    """``WorkItemState.reminders`` key of a gate visit."""
    return f"{node}/{visit}"


def forget_reminders(state: WorkItemState, node: str) -> None:
    """Drop the reminders of ``node``'s earlier visits (it is entered again: only the
    current visit's are ever looked up), so the state keeps no record per past visit."""
    earlier = reminder_key(node, 0).rpartition("/")[0] + "/"
    for key in [k for k in state.reminders if k.startswith(earlier)]:
        del state.reminders[key]


def _watched(state: WorkItemState, graph: Graph) -> Node | None:
    """The gate of ``graph`` ``state`` waits (or is escalated) at, if it declares
    ``freshness``; else ``None``."""
    node = graph.nodes.get(state.current_node)
    if node is None or not node.is_gate or node.freshness is None:
        return None
    if state.status not in (Status.WAITING, Status.ESCALATED):
        return None
    return node


def monitor(state: WorkItemState, graph: Graph, now: float) -> Monitor | None:
    """The monitor of ``state``: ``None`` unless it waits (or is escalated) at a gate of
    ``graph`` that declares ``freshness``."""
    node = _watched(state, graph)
    if node is None or node.freshness is None:
        return None
    signal = float(state.visit_started) if state.visit_started else None
    status = status_of(signal, now, node.freshness)
    age = None if signal is None else now - signal
    period = int(age // node.freshness) if status == STALE and age is not None else 0
    return Monitor(state.ref, node.id, status, node.freshness, signal, age, period,
                   int(state.reminders.get(reminder_key(node.id, state.visit), 0)))


def due_reminder(state: WorkItemState, graph: Graph, now: float) -> int | None:
    """The freshness period whose reminder is due now, or ``None`` (not stale, or this
    period was reminded already). One reminder per period: periods skipped while nobody
    looked are not sent afterwards, only the current one."""
    seen = monitor(state, graph, now)
    if seen is None or seen.status != STALE or seen.period <= seen.reminded:
        return None
    return seen.period


def reminder_due_at(state: WorkItemState, graph: Graph, *,
                    reminded: int | None = None) -> float | None:
    """When ``state``'s next reminder falls due (Unix seconds): the end of the first
    freshness period after the ``reminded`` ones (default: those ``state`` records for
    this visit; period *k* ends ``k * freshness`` after the gate was entered). ``None``
    when it has no monitor (:func:`monitor`) or no signal."""
    node = _watched(state, graph)
    if node is None or node.freshness is None or not state.visit_started:
        return None
    if reminded is None:
        reminded = int(state.reminders.get(reminder_key(node.id, state.visit), 0))
    return float(state.visit_started) + (reminded + 1) * node.freshness
