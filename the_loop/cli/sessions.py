"""``the-loop sessions``: the agent sessions the runner works on, from its turn records
in Redis (:class:`foundation.turns.TurnRecords`) and the work items' state.

``list`` and ``show`` read; ``logs`` prints a turn's output (the log file when it is on
this host, else the tail the runner keeps in Redis); ``cancel`` asks the runner to stop
a turn (it reports the turn ``cancelled``, and the work item escalates); ``resume``
queues an interrupted or queued turn again now (it resumes the same session);
``attach`` joins the tmux session of a turn run with ``runner.mode: tmux``.

Every ``--json`` output is the commands' one envelope (``schemaVersion``, ``action``,
``ok``, ``status``, ...); a work item without a turn record exits 1 with the reason.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from the_loop.cli.base import emit, main, open_operator, read_settings

if TYPE_CHECKING:
    from foundation.turns import TurnRecords
    from graph.state import WorkItemState
    from the_loop.wiring import Operator

T = TypeVar("T")
#: Bytes of a log file printed without ``--follow`` (its end).
SHOWN_LOG_BYTES = 64 * 1024
#: Seconds between looks at a followed log.
FOLLOW_TICK = 0.5
#: Control characters of a log (agent output, untrusted) shown as U+FFFD: no escape
#: sequence reaches the operator's terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
LIVE = ("queued", "running", "interrupted")


@main.group("sessions")
def sessions_group() -> None:
    """The agent sessions the runner works on (its turn records in Redis)."""


# -- helpers -------------------------------------------------------------------------


class Session:
    """What one command works with: the operator's Redis and state, and the runner's
    turn records (built whatever ``harness.adapter`` says: records outlive a change of
    it)."""

    def __init__(self, operator: Operator) -> None:
        from foundation.turns import TurnKeys, TurnRecords
        from the_loop.wiring import turn_records

        settings = operator.settings
        self.operator = operator
        self.records: TurnRecords = turn_records(settings, operator.redis) or TurnRecords(
            operator.redis, TurnKeys(settings.worker.prefix), settings.runner.queue)

    def state(self, ref: str) -> WorkItemState | None:
        """The work item's state, or ``None`` (unknown, or unreadable)."""
        from graph.state import StateError

        try:
            return self.operator.store.load(ref.partition("/task/")[0])  # a task's: its item's
        except StateError:
            return None


def _fail(action: str, as_json: bool, status: str, message: str, **fields: Any) -> NoReturn:
    if as_json:
        emit(action, False, status, error=message, **fields)
        sys.exit(1)
    raise click.ClickException(message)


@contextmanager
def _redis(action: str, as_json: bool) -> Iterator[None]:
    import redis

    try:
        yield
    except redis.RedisError as exc:
        _fail(action, as_json, "unreachable",
              f"Redis at REDIS_URL is unreachable ({type(exc).__name__}); start it or fix "
              "REDIS_URL")


def _normal(ref: str) -> str:
    """``ref`` as the records spell it (a ``github:`` ref normalised; a task of a plan
    is ``REF/task/ID``)."""
    from graph.refs import PREFIX, RefError, WorkItemRef

    if ref.startswith(PREFIX):
        base, sep, task = ref.partition("/task/")
        try:
            return WorkItemRef.parse(base).format() + (f"{sep}{task}" if sep else "")
        except RefError as exc:
            raise click.BadParameter(str(exc), param_hint="REF") from None
    return ref


def _record(session: Session, ref: str, action: str, as_json: bool) -> dict[str, str]:
    record = session.records.get(ref)
    if record is None:
        _fail(action, as_json, "unknown", f"{ref} has no agent turn recorded (no turn was "
              "ever ordered for it, or its record expired)", ref=ref)
    return record


def _number(value: str | None, kind: Callable[[str], T], default: T) -> T:
    try:
        return kind(value) if value else default
    except ValueError:
        return default


def _summary(ref: str, record: Mapping[str, str],
             state: WorkItemState | None) -> dict[str, Any]:
    """``{ref, node, number, max_turns, status, session_id, cost_usd, ...}``: cost is the
    work item's whole spend when its state is known, else the last turn's."""
    from graph.work import spend_of

    cost = _number(record.get("cost_usd"), float, 0.0)
    if state is not None and state.spend:
        cost = spend_of(state.spend)["cost_usd"]
    return {"ref": ref, "node": record.get("node"),
            "number": _number(record.get("number"), int, 0),
            "max_turns": _number(record.get("max_turns"), int, 0),
            "status": record.get("status"), "session_id": record.get("session_id"),
            "cost_usd": cost, "attempt": _number(record.get("attempt"), int, 1),
            "host": record.get("host") or None}


def _line(summary: Mapping[str, Any]) -> str:
    return (f"{summary['ref']}  {summary['node']}  turn {summary['number']} of "
            f"{summary['max_turns']}  {summary['status']}  {summary['session_id']}  "
            f"${summary['cost_usd']:.2f}")


def _decoded(record: Mapping[str, str]) -> dict[str, Any]:
    """The record with its JSON fields (``order``, ``context``) parsed."""
    out: dict[str, Any] = dict(record)
    for key in ("order", "context"):
        if key in out:
            with suppress(ValueError):
                out[key] = json.loads(out[key])
    return out


def clean(text: str) -> str:
    """``text`` with control characters (but newline and tab) shown as U+FFFD."""
    return _CONTROL.sub("\ufffd", text)


# -- list / show ---------------------------------------------------------------------


@sessions_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def list_cmd(as_json: bool) -> None:
    """One line per work item with a turn record: ref, node, turn N of MAX, status,
    session id, cost so far."""
    session = Session(open_operator())
    with _redis("sessions.list", as_json):
        rows = []
        for ref in session.records.refs():
            record = session.records.get(ref)
            if record is not None:
                rows.append(_summary(ref, record, session.state(ref)))
    if as_json:
        emit("sessions.list", True, "ok", sessions=rows)
        return
    if not rows:
        click.echo("no agent sessions")
    for row in rows:
        click.echo(_line(row))


@sessions_group.command("show")
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show_cmd(ref: str, as_json: bool) -> None:
    """REF's turn record, the session bound to its node and what its turns cost."""
    from graph.work import spend_of

    ref = _normal(ref)
    session = Session(open_operator())
    with _redis("sessions.show", as_json):
        record = _record(session, ref, "sessions.show", as_json)
        state = session.state(ref)
        workspace = session.records.workspace(ref)
    summary = _summary(ref, record, state)
    bound: dict[str, Any] | None = None
    if state is not None:
        bound = {"node": state.current_node, "status": str(state.status),
                 "session": state.session, "sessions": state.sessions, "turn": state.turn,
                 "turns": state.turns, "spend": spend_of(state.spend)}
    if as_json:
        emit("sessions.show", True, str(record.get("status")), ref=ref, summary=summary,
             record=_decoded(record), state=bound, workspace=workspace)
        return
    click.echo(_line(summary))
    for key in ("id", "attempt", "host", "runner", "pid", "harness_session", "head_sha",
                "log", "detail", "cancel", "lost_session", "fresh_session_at"):
        if record.get(key):
            click.echo(f"  {key}: {record[key]}")
    if workspace:
        click.echo("  workspace: " + ", ".join(f"{k} {v}" for k, v in sorted(workspace.items())))
    if bound is None:
        click.echo("  state: none (the work item is not known to the service)")
        return
    spend = bound["spend"]
    click.echo(f"  state: {bound['status']} at {bound['node']}")
    current = bound["session"] or {}
    click.echo(f"  session of {bound['node']}: {current.get('id') or '-'}"
               + (f" (resume {current['resume']})" if current.get("resume") else ""))
    click.echo(f"  spend: ${spend['cost_usd']:.2f}, {int(spend['turns'])} turns, "
               f"{int(spend['input_tokens'])} in / {int(spend['output_tokens'])} out "
               f"tokens, {spend['seconds']:.0f} s")


# -- logs ----------------------------------------------------------------------------


@sessions_group.command("logs")
@click.argument("ref")
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing the log file while the turn runs (this host only).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def logs_cmd(ref: str, follow: bool, as_json: bool) -> None:
    """The output of REF's last turn: its log file when it is on this host, else the
    tail the runner keeps in Redis."""
    ref = _normal(ref)
    session = Session(open_operator())
    with _redis("sessions.logs", as_json):
        record = _record(session, ref, "sessions.logs", as_json)
        path = Path(record["log"]) if record.get("log") else None
        local = path is not None and path.is_file()
        tail: bytes | None = None
        if not local:
            raw = session.records.redis.get(session.records.keys.turn_log(ref))
            tail = raw if isinstance(raw, bytes) or raw is None else str(raw).encode()
    if not local and tail is None:
        _fail("sessions.logs", as_json, "no-log",
              f"{ref}: no log of its turn on this host ({socket.gethostname()}) or in Redis "
              f"(turn {record.get('status')}; runner host {record.get('host') or '-'})",
              ref=ref)
    if local:
        assert path is not None
        size = path.stat().st_size
        with path.open("rb") as handle:
            handle.seek(max(0, size - SHOWN_LOG_BYTES))
            data = handle.read()
        source = str(path)
    else:
        assert tail is not None
        data, size, source = tail, len(tail), "redis"
    text = clean(data.decode("utf-8", "replace"))
    if as_json:
        emit("sessions.logs", True, str(record.get("status")), ref=ref, source=source,
             bytes=size, log=text)
        return
    click.echo(text, nl=False)
    if follow:
        if not local:
            raise click.ClickException("--follow needs the turn's log file on this host; "
                                       f"it runs on {record.get('host') or 'another host'}")
        assert path is not None
        _follow(session, ref, path, size)


def _follow(session: Session, ref: str, path: Path, offset: int) -> None:
    """Print what is appended to ``path`` until the turn is no longer live."""
    while True:
        with path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
        offset += len(chunk)
        if chunk:
            click.echo(clean(chunk.decode("utf-8", "replace")), nl=False)
        record = session.records.get(ref) or {}
        if record.get("status") not in LIVE and not chunk:
            return
        time.sleep(FOLLOW_TICK)


# -- cancel / resume -----------------------------------------------------------------


@sessions_group.command("cancel")
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def cancel_cmd(ref: str, as_json: bool) -> None:
    """Stop REF's live turn: the runner stops the harness and reports the turn
    cancelled, and the work item escalates to a person."""
    ref = _normal(ref)
    session = Session(open_operator())
    with _redis("sessions.cancel", as_json):
        record = _record(session, ref, "sessions.cancel", as_json)
        asked = session.records.request_cancel(ref)
    if not asked:
        _fail("sessions.cancel", as_json, "refused",
              f"{ref}: its turn is {record.get('status')}, not queued or running: "
              "nothing to cancel", ref=ref)
    if as_json:
        emit("sessions.cancel", True, "cancel-requested", ref=ref, turn=record.get("id"))
        return
    click.echo(f"{ref}: cancel requested for turn {record.get('number')} at "
               f"{record.get('node')}; the runner stops it and reports it cancelled")


@sessions_group.command("resume")
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def resume_cmd(ref: str, as_json: bool) -> None:
    """Queue REF's interrupted (or still queued) turn again now; it resumes the same
    session. A turn that ended is never run again (the work item moved on from it), and
    a running one is left alone."""
    from foundation.turns import INTERRUPTED, QUEUED, RUNNING

    ref = _normal(ref)
    session = Session(open_operator())
    records = session.records
    with _redis("sessions.resume", as_json):
        record = _record(session, ref, "sessions.resume", as_json)
        status = record.get("status")
        if status == RUNNING:
            lock = records.redis.exists(records.keys.turn_lock(ref))
            if lock or _number(record.get("lease_until"), float, 0.0) > time.time():
                _fail("sessions.resume", as_json, "refused",
                      f"{ref}: its turn is running on {record.get('host') or '?'} "
                      f"(pid {record.get('pid') or '?'}): nothing to resume; "
                      f"`the-loop sessions cancel {ref}` stops it", ref=ref)
            reason = "resumed by an operator: its runner stopped mid-turn"
        elif status in (QUEUED, INTERRUPTED):
            reason = "resumed by an operator"
        else:
            _fail("sessions.resume", as_json, "refused",
                  f"{ref}: its turn ended ({status}); an ended turn is not run again "
                  "(the work item's next event orders the next one)", ref=ref)
        queued = records.requeue(ref, reason=reason)
    if not queued:
        _fail("sessions.resume", as_json, "refused",
              f"{ref}: its turn can no longer be queued again", ref=ref)
    if as_json:
        emit("sessions.resume", True, "queued", ref=ref, turn=record.get("id"))
        return
    click.echo(f"{ref}: turn {record.get('number')} at {record.get('node')} queued again; "
               "it resumes the same session")


# -- attach --------------------------------------------------------------------------


@sessions_group.command("attach")
@click.argument("ref")
def attach_cmd(ref: str) -> None:
    """Attach to the tmux session of REF's running turn (``runner.mode: tmux``) to watch
    it or take it over; detach with C-b d."""
    import os

    from integrations.harness.base import HarnessMissing
    from integrations.harness.tmux import attach_command, session_name, tmux_binary

    settings = read_settings()
    ref = _normal(ref)
    session = Session(open_operator(settings))
    with _redis("sessions.attach", False):
        record = _record(session, ref, "sessions.attach", False)
    if settings.runner.mode != "tmux":
        raise click.ClickException(
            f"the runner mode is {settings.runner.mode}: turns run as plain processes with "
            "nothing to attach to; set runner.mode: tmux in cli-config.yaml, or read the "
            f"output with `the-loop sessions logs {ref}`")
    if record.get("status") != "running":
        raise click.ClickException(f"{ref}: its turn is {record.get('status')}, not "
                                   "running: no tmux session to attach to")
    host = record.get("host")
    if host and host != socket.gethostname():
        raise click.ClickException(f"{ref}: its turn runs on host {host}; attach there")
    name = record.get("tmux") or session_name(record.get("session_id") or "")
    try:
        binary = tmux_binary()
    except HarnessMissing as exc:
        raise click.ClickException(str(exc)) from None
    argv = attach_command(name)
    os.execv(binary, [binary, *argv[1:]])
