"""The local driver's agent turns: ``the-loop run --work-item REF --repo DIR`` (and
``the-loop decide``) walk the same loop as the service on one machine, without GitHub
or Redis.

With a harness configured (``harness.adapter`` other than ``none``) the runtime's
:class:`graph.work.AgentWork` port is a :class:`LocalWork` that only collects the turns
the runtime orders. :class:`LocalDriver` then runs each ordered turn in-process, in DIR
itself (the harness through :mod:`runner.harness_turn`, so its input, environment and
limits are the runner's), and hands the turn's end back to the runtime as the runner
would: an :class:`~graph.model.InboundEvent` of kind :data:`graph.work.TURN_COMPLETED`
whose ``turn`` is a :class:`~graph.work.TurnEnded`. The node's exit chain then runs
against DIR; a block orders the repair turn, which runs next. The loop stops when the work
item is no longer ``working``: waiting at a gate, escalated, blocked or done.

Commits: when DIR is the top of a git work tree, each turn's changes are committed there,
locally (never pushed), as the App's bot: each turn is then one reviewable commit (the
repair is a diff against the first try) and its sha is the turn's ``head_sha``, as in the
service. The commit takes only the paths the turn changed: what was already changed in
the work tree before the turn (a person's edits, a review recorded by ``decide``) is left
as it was, and the-loop's state directory (``.the-loop/state``) is never committed. A
DIR that is not a git work tree (or is a folder inside one) gets nothing committed: the
files are left in place and ``head_sha`` is ``None``.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from foundation.turns import TurnContext
from graph.context import HookConfig
from graph.model import InboundEvent, Status
from graph.runtime import AdvanceResult
from graph.work import TURN_COMPLETED, TurnEnded, TurnOrder
from integrations.harness.base import Harness, TurnRequest
from runner import harness_turn
from the_loop.local import STATE_DIR, Local
from the_loop.wiring import BOT_AUTHOR

__all__ = ["DriveResult", "LocalDriver", "LocalWork", "TurnLine", "git_top"]

#: The ``repository`` a local work item's turns name when its ref is not a GitHub one.
LOCAL_REPOSITORY = "local"
#: Seconds a git command of the driver may take.
GIT_TIMEOUT = 60.0


class LocalWork:
    """The local :class:`graph.work.AgentWork`: orders are collected, in order, each id
    once; :class:`LocalDriver` runs them.

    Args:
        max_turns, cost_cap_usd: ``harness.maxTurns`` and ``harness.costCapUsd``.
    """

    def __init__(self, max_turns: int, cost_cap_usd: float | None) -> None:
        self.max_turns = max_turns
        self.cost_cap_usd = cost_cap_usd
        self.pending: list[TurnOrder] = []
        self._seen: set[str] = set()

    def order(self, order: TurnOrder) -> None:
        """Collect ``order`` (an id ordered before is ignored)."""
        if order.id not in self._seen:
            self._seen.add(order.id)
            self.pending.append(order)

    def take(self) -> TurnOrder | None:
        """The oldest order not yet run, or ``None``."""
        return self.pending.pop(0) if self.pending else None


@dataclass(frozen=True)
class TurnLine:
    """One turn the driver ran, as it is printed and reported.

    Attributes:
        order: the turn.
        ended: its end, as reported to the runtime.
        status, node: where the work item stands after the report.
        moves: ``{from, to, on}`` of the edges the report's advance took.
        messages: the messages of the chain that stopped it (a block's, for the repair).
    """

    order: TurnOrder
    ended: TurnEnded
    status: str
    node: str
    moves: tuple[Mapping[str, str], ...] = ()
    messages: tuple[Mapping[str, Any], ...] = ()

    def text(self) -> str:
        """``turn 1 of 5 at requirements: completed, $0.01`` (the detail of a turn that
        did not complete in brackets)."""
        where = self.order.node + (f", task {self.order.task_id}" if self.order.task else "")
        line = (f"turn {self.order.number} of {self.order.max_turns} at {where}: "
                f"{self.ended.status}, ${self.ended.cost_usd:.2f}")
        return f"{line} ({self.ended.detail})" if self.ended.detail else line

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{node, number, max_turns, status, cost_usd, seconds, session_id,
        head_sha, detail, warnings, after: {status, node}, moves, messages}``."""
        return {"node": self.order.node, "number": self.order.number,
                "max_turns": self.order.max_turns, "status": self.ended.status,
                "cost_usd": self.ended.cost_usd, "seconds": self.ended.seconds,
                "session_id": self.ended.session_id, "head_sha": self.ended.head_sha,
                "detail": self.ended.detail, "warnings": list(self.ended.warnings),
                "after": {"status": self.status, "node": self.node},
                "moves": [dict(m) for m in self.moves],
                "messages": [dict(m) for m in self.messages]}


@dataclass
class DriveResult:
    """Where a drive stopped.

    Attributes:
        result: the last advance's result (its status is never ``working`` unless the
            runtime ordered nothing the driver could run).
        turns: every turn run, in order.
        moves: every edge taken by the drive's advances, in order.
    """

    result: AdvanceResult
    turns: list[TurnLine] = field(default_factory=list)
    moves: list[dict[str, str]] = field(default_factory=list)


def moves_of(result: AdvanceResult) -> list[dict[str, str]]:
    """``{from, to, on}`` of each edge ``result`` took."""
    return [{"from": m.source, "to": m.target, "on": m.on} for m in result.moves]


class LocalDriver:
    """Runs a local work item's agent turns in its checkout (see the module docstring).

    Args:
        local: the runtime over the checkout (:func:`the_loop.local.open_local`).
        harness: the configured adapter (:func:`integrations.harness.factory.build_harness`).
        setup: ``harness:``, ``runner:`` and the environment the harness's is built from.
        work: the port the runtime orders through (its ``config`` is ``local.config``
            with ``work`` set to it: :attr:`config`).
    """

    def __init__(self, local: Local, harness: Harness, setup: harness_turn.TurnSetup,
                 work: LocalWork) -> None:
        self.local = local
        self.harness = harness
        self.setup = setup
        self.work = work
        self.config: HookConfig = replace(local.config, work=work)
        self.git = git_top(local.repo, setup.environ)

    # -- what a turn is ----------------------------------------------------------------

    def context(self) -> TurnContext:
        """The work item as its turns name it: a ``github:`` ref's repository and
        number (the agent may read the issue with its own tools), else
        :data:`LOCAL_REPOSITORY` and number 0."""
        item = self.local.work_item
        return TurnContext(repository=item.repository or LOCAL_REPOSITORY,
                           number=item.id or 0, title="", default_branch=self.branch())

    def branch(self) -> str:
        """The checkout's current branch (``local`` outside git or on a detached head)."""
        if self.git is None:
            return "local"
        name = self._git("rev-parse", "--abbrev-ref", "HEAD", check=False).strip()
        return name if name and name != "HEAD" else "local"

    def request(self, order: TurnOrder, *, session_id: str | None = None,
                resume: str | None = None, attempt: int = 1,
                create_dirs: bool = True) -> TurnRequest:
        """The harness request of ``order`` in the checkout (by default the order's own
        session and resume id); ``create_dirs`` false writes nothing (a dry run)."""
        return harness_turn.request(
            self.setup, order, self.context(), cwd=self.local.repo, branch=self.branch(),
            session_id=session_id or order.session_id,
            resume=order.resume if session_id is None else resume, attempt=attempt,
            override=self._override, create_dirs=create_dirs)

    def _override(self, path: str) -> str | None:
        """A repository's prompt template, from the checkout."""
        return self.local.config.files.read_text(path) if self.local.config.files else None

    # -- running -----------------------------------------------------------------------

    def run_turn(self, order: TurnOrder) -> TurnEnded:
        """Run ``order`` in the checkout and commit what it changed (see the module
        docstring); a session the harness cannot resume is replaced by a fresh one
        seeded with the artifacts, as the runner does.

        Returns:
            the turn's end (a failed turn is a status, never an exception; a harness
            that cannot be started is an ``error`` with the-loop's words).
        """
        from integrations.harness.base import HarnessError

        before = self._changed() if self.git is not None else set()
        session_id = order.session_id
        try:
            outcome = harness_turn.run(self.harness, self.request(order))
            if outcome.status == "resume-failed":
                session_id = str(uuid.uuid4())
                fresh = replace(order, seeded_with=(*order.seeded_with, *order.artifacts))
                outcome = harness_turn.run(self.harness, self.request(
                    fresh, session_id=session_id, resume=None, attempt=2))
        except HarnessError as exc:
            return TurnEnded(order.id, "error", session_id=session_id,
                             detail=f"{type(exc).__name__}: {exc}"[:300])
        head = self._commit(order, before) if self.git is not None else None
        return TurnEnded(
            id=order.id, status="failed" if outcome.status == "resume-failed"
            else outcome.status, session_id=session_id,
            harness_session=outcome.harness_session, head_sha=head,
            cost_usd=outcome.cost_usd, input_tokens=outcome.input_tokens,
            output_tokens=outcome.output_tokens, seconds=round(outcome.duration_s, 3),
            detail=outcome.detail, warnings=outcome.warnings, totals=outcome.totals)

    def report(self, ended: TurnEnded) -> AdvanceResult:
        """Hand ``ended`` to the runtime (the exit chain runs on the checkout).

        Raises:
            graph.runtime.GraphMismatch: the work item's node left the graph.
        """
        event = InboundEvent(TURN_COMPLETED, f"local-turn-{uuid.uuid4()}",
                             actor=BOT_AUTHOR[0], actor_type="Bot", turn=ended.to_dict())
        result = self.local.runtime.advance(self.local.work_item, self.config, event,
                                            repo=self.local.repo)
        assert result is not None  # the work item ordered the turn: it is enrolled
        return result

    def drive(self, result: AdvanceResult,
              echo: Callable[[TurnLine], None] | None = None) -> DriveResult:
        """Run the ordered turns until the work item is no longer ``working``.

        Args:
            result: the advance that started it (its moves are the drive's first).
            echo: called with each turn once the runtime has its report.

        Returns:
            the last advance, every turn and every move.

        Raises:
            graph.runtime.GraphMismatch: the work item's node left the graph.
        """
        drive = DriveResult(result, moves=moves_of(result))
        while drive.result.status == Status.WORKING:
            order = self.work.take()
            if order is None:
                break
            ended = self.run_turn(order)
            after = self.report(ended)
            line = TurnLine(order, ended, str(after.status), after.node,
                            tuple(moves_of(after)), tuple(m.to_dict() for m in after.messages))
            drive.turns.append(line)
            drive.moves.extend(moves_of(after))
            drive.result = after
            if echo is not None:
                echo(line)
        return drive

    # -- git ---------------------------------------------------------------------------

    def _git(self, *args: str, check: bool = True) -> str:
        assert self.git is not None
        return _git(self.git, args, self.setup.environ, check=check)

    def _changed(self) -> set[str]:
        """Paths changed in the work tree or the index (untracked files included)."""
        out = self._git("status", "--porcelain=v1", "-z", "--untracked-files=all")
        paths: set[str] = set()
        entries = out.split("\0")
        i = 0
        while i < len(entries):
            entry = entries[i]
            i += 1
            if len(entry) < 4:
                continue
            paths.add(entry[3:])
            if entry[0] in "RC":  # a rename's old path follows
                if i < len(entries) and entries[i]:
                    paths.add(entries[i])
                i += 1
        return {p for p in paths if not _is_state(p)}

    def _commit(self, order: TurnOrder, before: set[str]) -> str | None:
        """Commit the paths the turn changed; the new commit's sha, or ``None`` when the
        turn changed nothing (or git refused: the files stay in place)."""
        paths = sorted(self._changed() - before)
        if not paths:
            return None
        name, email = BOT_AUTHOR
        what = f"task {order.task_id}" if order.task else order.node
        message = (f"the-loop: {what}, turn {order.number}\n\n"
                   f"Work item: {order.ref}")
        try:
            self._git("add", "-A", "--", *paths)
            self._git("-c", f"user.name={name}", "-c", f"user.email={email}", "commit",
                      "--quiet", "--no-verify", "--only", "-m", message, "--", *paths)
            return self._git("rev-parse", "HEAD").strip() or None
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
            return None


def _is_state(path: str) -> bool:
    return path == STATE_DIR or path.startswith(STATE_DIR + "/")


def _git_env(environ: Mapping[str, str]) -> dict[str, str]:
    env = {k: environ[k] for k in ("PATH", "HOME", "LANG") if environ.get(k)}
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def _git(repo: Path, args: tuple[str, ...], environ: Mapping[str, str], *,
         check: bool = True) -> str:
    done = subprocess.run(  # noqa: S603 - argv list, no shell
        # The agent writes the tree and .git: none of its hooks or fsmonitor may run in
        # the-loop's own git calls.
        ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
         "--literal-pathspecs", "-C", str(repo), *args], env=_git_env(environ),
        capture_output=True, text=True, timeout=GIT_TIMEOUT, check=check)
    return done.stdout


def git_top(repo: Path, environ: Mapping[str, str]) -> Path | None:
    """``repo`` when it is the top of a git work tree (git installed), else ``None``."""
    try:
        top = _git(repo, ("rev-parse", "--show-toplevel"), environ).strip()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        return None
    return repo if top and Path(top).resolve() == repo.resolve() else None
