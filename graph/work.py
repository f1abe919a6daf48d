"""The work of an agent node: harness turns (specification, "The two-concept model",
"Feedback to the harness", "Sessions").

An agent node's work is a harness session that the-loop starts, feeds and resumes. The
runtime does not run it: when an agent node's entry chain has passed it *orders a turn*
through the :class:`AgentWork` port (the runner, its own processes, does the work) and
the work item is ``working``. The runner reports the turn's end as an inbound event of
kind :data:`TURN_COMPLETED`; only then does the node's exit chain run, against what the
turn pushed. A block's messages become the next turn's input, in the same session (do ->
check -> repair -> check); a gate's changes-requested hands its reference to the
producing node, whose next turn resumes the session that wrote the artifacts.

This module holds the shapes and the bookkeeping; :mod:`graph.runtime` decides when.
Nothing here renders text for the agent (the runner's prompts do, from the-loop's own
templates) and nothing carries text from a payload: feedback is the-loop's messages (its
own wording, paths, hook names) and references (who, which comment, its digest).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

#: ``InboundEvent.kind`` of the runner's report that a turn ended.
TURN_COMPLETED = "turn.completed"
#: ``TurnEnded.status`` of a turn that ran to its end (others: ``failed``, ``timeout``,
#: ``idle``, ``no-result``, ``interrupted``, ``cancelled``, ``error``).
COMPLETED = "completed"
CANCELLED = "cancelled"
#: A block's ``data`` key (and its next input's ``block`` key): what a failed CI check
#: reported (:mod:`foundation.ci_report`), bounded; untrusted text, which the runner
#: shows the agent as data inside a fence, never as the-loop's instructions.
CI_REPORT = "ci_report"


@dataclass(frozen=True)
class TurnOrder:
    """One turn the runtime asks the runner for.

    Attributes:
        id: ``<ref>/<node>/<visit>/turn/<n>``: unique, and the runner's idempotency key
            (ordering the same id twice runs it once).
        ref: the work item.
        node: the agent node.
        visit: the node visit the turn belongs to.
        number: the turn's number in this visit, 1-based.
        max_turns: the most turns this visit may take (``harness.maxTurns``).
        session_id: the-loop's id of the node's session (a UUID with dashes; Claude Code's
            first turn is pinned to it).
        resume: the harness's own id to resume (``None``: a fresh session).
        command: the node's ``command`` (the template of the first turn's input).
        stage: the node's ``stage`` (picks the model).
        artifacts: repository-relative paths the node must produce.
        checks: the node's exit chain as ``{"hook", "with"}`` (named in the input so the
            agent knows what will be checked).
        feedback: what the work gets next (``WorkItemState.next_input`` of the node):
            ``block`` (hook and messages of the last block) and/or ``feedback`` (a gate's
            decision reference); empty on a first turn.
        seeded_with: artifacts of earlier nodes a fresh session should read first.
        totals: the running totals the harness last reported for the session it resumes
            (``{cost_usd?, input_tokens?, output_tokens?}``; empty for a fresh session):
            a resumed Claude Code session reports its cost, a resumed Codex thread its
            tokens, as the session's totals, and the turn's own figures are the
            difference.
        task: the task of a plan this turn works on (:mod:`graph.tasks`), or ``None``
            for the node's own work: ``{id, title, acceptance, paths, tier, wave,
            shared}``; ``shared`` true: the task commits on the work item's branch
            (``maxParallel: 1``), else on its own branch ``<work item branch>--<id>``,
            merged back when the turn completes.
    """

    id: str
    ref: str
    node: str
    visit: int
    number: int
    max_turns: int
    session_id: str
    resume: str | None = None
    command: str | None = None
    stage: str | None = None
    artifacts: tuple[str, ...] = ()
    checks: tuple[Mapping[str, Any], ...] = ()
    feedback: Mapping[str, Any] = field(default_factory=dict)
    seeded_with: tuple[str, ...] = ()
    task: Mapping[str, Any] | None = None
    totals: Mapping[str, float] = field(default_factory=dict)

    @property
    def task_id(self) -> str | None:
        """The id of :attr:`task`, or ``None``."""
        return str(self.task["id"]) if self.task else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (what state and the runner's job carry)."""
        data = asdict(self)
        data["artifacts"] = list(self.artifacts)
        data["checks"] = [dict(c) for c in self.checks]
        data["feedback"] = dict(self.feedback)
        data["seeded_with"] = list(self.seeded_with)
        data["task"] = json.loads(json.dumps(self.task)) if self.task else None
        data["totals"] = dict(self.totals)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TurnOrder:
        """Inverse of :meth:`to_dict`.

        Raises:
            KeyError, TypeError, ValueError: a malformed order.
        """
        return cls(
            id=str(data["id"]), ref=str(data["ref"]), node=str(data["node"]),
            visit=int(data["visit"]), number=int(data["number"]),
            max_turns=int(data["max_turns"]), session_id=str(data["session_id"]),
            resume=data.get("resume"), command=data.get("command"), stage=data.get("stage"),
            artifacts=tuple(str(a) for a in data.get("artifacts") or ()),
            checks=tuple(dict(c) for c in data.get("checks") or ()),
            feedback=dict(data.get("feedback") or {}),
            seeded_with=tuple(str(a) for a in data.get("seeded_with") or ()),
            task=dict(data["task"]) if data.get("task") else None,
            totals=totals_of(data.get("totals")),
        )


@dataclass(frozen=True)
class TurnEnded:
    """The runner's report of a turn (``InboundEvent.turn``).

    Attributes:
        id: the :attr:`TurnOrder.id` it answers.
        status: ``completed`` or why not (see :data:`COMPLETED`).
        session_id: the-loop's session id the turn ran in (a fresh one when the old
            session could not be resumed).
        harness_session: the harness's id to resume next (the latest it reported).
        head_sha: the commit the turn's work was pushed as (``None``: nothing pushed).
        pull: the work item's draft pull request number, if one exists.
        cost_usd, input_tokens, output_tokens: what the harness reported for the turn.
        seconds: wall-clock seconds the turn took.
        agent_seconds: of ``seconds``, those the harness ran (the rest is the-loop's own
            work: the workspace, the commit, the push, a task's merge).
        detail: the-loop's own words about an unsuccessful turn (never agent output).
        merged: a task's turn: whether its work reached the work item's branch (``False``:
            the merge conflicted, ``detail`` names the paths); ``None`` otherwise.
        warnings: what the harness reported without failing the turn (a retried 5xx,
            a reconnect), at most 10, each cut to 200 characters.
        totals: the session's running totals the harness reported at the turn's end
            (see :attr:`TurnOrder.totals`); empty when it reported none.
    """

    id: str
    status: str
    session_id: str | None = None
    harness_session: str | None = None
    head_sha: str | None = None
    pull: int | None = None
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    agent_seconds: float = 0.0
    detail: str = ""
    merged: bool | None = None
    warnings: tuple[str, ...] = ()
    totals: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The turn ran to its end."""
        return self.status == COMPLETED

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (the runner's event payload)."""
        data = asdict(self)
        data["warnings"] = list(self.warnings)
        data["totals"] = dict(self.totals)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TurnEnded:
        """Parse a report; unknown keys are ignored, numbers are coerced.

        Raises:
            KeyError, TypeError, ValueError: a malformed report.
        """
        pull = data.get("pull")
        return cls(
            id=str(data["id"]), status=str(data["status"]),
            session_id=_opt_str(data.get("session_id")),
            harness_session=_opt_str(data.get("harness_session")),
            head_sha=_opt_str(data.get("head_sha")),
            pull=int(pull) if pull is not None else None,
            cost_usd=float(data.get("cost_usd") or 0.0),
            input_tokens=int(data.get("input_tokens") or 0),
            output_tokens=int(data.get("output_tokens") or 0),
            seconds=float(data.get("seconds") or 0.0),
            agent_seconds=float(data.get("agent_seconds") or 0.0),
            detail=str(data.get("detail") or "")[:500],
            merged=None if data.get("merged") is None else bool(data["merged"]),
            warnings=tuple(str(w)[:200] for w in list(data.get("warnings") or ())[:10]),
            totals=totals_of(data.get("totals")),
        )


#: The figures a session's running totals may hold.
TOTALS = ("cost_usd", "input_tokens", "output_tokens")


def totals_of(value: Any) -> dict[str, float]:
    """``value``'s running totals: the :data:`TOTALS` keys holding a finite number
    >= 0 (anything else is dropped; a malformed record never fails a turn)."""
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, float] = {}
    for key in TOTALS:
        number = value.get(key)
        if (not isinstance(number, bool) and isinstance(number, int | float)
                and 0 <= number < float("inf")):
            out[key] = number
    return out


def record_totals(session: dict[str, Any], ended: TurnEnded) -> None:
    """Keep the running totals ``ended`` reports on its session record (the work item
    state's ``sessions`` entry): a fresh session (a new ``session_id``) starts from its
    own; a turn that reported none (killed, no result) keeps the last ones, so the next
    turn's difference still counts what it spent."""
    fresh = bool(ended.session_id) and ended.session_id != session.get("id")
    if fresh or ended.totals:
        session["totals"] = dict(ended.totals)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


class AgentWork(Protocol):
    """The port through which the runtime orders agent turns (the runner implements it;
    ``HookConfig.work`` is ``None`` when no harness is configured: ``harness.adapter:
    none`` keeps the wait-for-a-human behaviour).

    Attributes:
        max_turns: turns one node visit may take before the work item escalates.
        cost_cap_usd: spend per work item at which no further turn is ordered (the work
            item escalates instead); ``None``: no cap.
    """

    max_turns: int
    cost_cap_usd: float | None

    def order(self, order: TurnOrder) -> None:
        """Queue ``order`` for the runner; ordering an id already ordered does nothing.

        Raises:
            graph.ports.RetryLater: the queue is unreachable (the delivery is retried and
                the same order placed again).
        """
        ...


def spend_of(state_spend: Mapping[str, Any]) -> dict[str, float]:
    """A work item's spend (``WorkItemState.spend``) with every figure present:
    ``{"cost_usd", "input_tokens", "output_tokens", "turns", "seconds"}``."""
    return {k: float(state_spend.get(k) or 0) for k in
            ("cost_usd", "input_tokens", "output_tokens", "turns", "seconds")}


def add_spend(state_spend: dict[str, Any], turn: TurnEnded) -> None:
    """Add one turn's figures to a work item's spend, in place."""
    total = spend_of(state_spend)
    total["cost_usd"] = round(total["cost_usd"] + turn.cost_usd, 6)
    total["input_tokens"] += turn.input_tokens
    total["output_tokens"] += turn.output_tokens
    total["turns"] += 1
    total["seconds"] = round(total["seconds"] + turn.seconds, 3)
    state_spend.clear()
    state_spend.update(total)


def working_line(number: int, max_turns: int, spend: Mapping[str, Any]) -> str:
    """``agent working: turn 2 of 5, 3 min, $0.41`` (minutes and dollars spent on the
    work item's turns so far)."""
    total = spend_of(spend)
    minutes = int(round(total["seconds"] / 60))
    return (f"agent working: turn {number} of {max_turns}, {minutes} min, "
            f"${total['cost_usd']:.2f}")


def now() -> float:
    """Unix seconds (one clock for the orders' timestamps)."""
    return time.time()
