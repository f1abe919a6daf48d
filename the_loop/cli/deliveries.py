"""Dead letters and redelivery from the command line.

* ``the-loop deliveries failed [--json]`` -- the parked deliveries (and those waiting
  for a retry), and the deliveries acknowledged as invalid: their payload did not match
  its event's schema (the failing JSON path and rule; never processed, nothing held).
* ``the-loop deliveries retry ID`` -- put a parked delivery back at the head of its work
  item's inbox and run it again.
* ``the-loop deliveries discard ID`` -- drop a parked delivery for good; its work item's
  held deliveries go on.
* ``the-loop redeliver --since DURATION [--dry-run] [--json]`` -- ask GitHub to send again
  the App's deliveries of the last DURATION that never got through (see
  :mod:`the_loop.redeliver`); meant to run on a schedule.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import Any

import click

from the_loop.cli.base import emit, main, open_operator


def _deliveries() -> Any:
    from foundation.inbox.dead import Deliveries

    operator = open_operator()
    return Deliveries(operator.redis, operator.settings.worker, operator.store)


def _redis_down(exc: Exception) -> click.ClickException:
    return click.ClickException(
        f"Redis at REDIS_URL is unreachable ({type(exc).__name__}); start it or fix REDIS_URL")


@main.group("deliveries")
def deliveries_group() -> None:
    """Deliveries that failed: list, retry or discard the dead letters."""


@deliveries_group.command("failed")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def failed_cmd(as_json: bool) -> None:
    """List the parked deliveries (dead letters): id, event, work item, attempts, age and
    reason. Those still waiting for a retry are counted (listed with --json). Deliveries
    whose payload did not match its event's schema follow, newest first, with the failing
    JSON path and rule: acknowledged, never processed, nothing to retry."""
    import redis

    ledger = _deliveries()
    try:
        parked = ledger.failed()
        retrying = ledger.retrying()
        invalid = ledger.invalid()
    except redis.RedisError as exc:
        raise _redis_down(exc) from None
    if as_json:
        emit("deliveries.failed", True, "parked" if parked else "none",
             failed=[p.to_dict() for p in parked], retrying=retrying, invalid=invalid)
        return
    now = time.time()
    for p in parked:
        kept = "" if p.payload_kept else "  (payload expired: use `the-loop redeliver`)"
        click.echo(f"{p.delivery}  {p.event or '-'}  {p.work_item or '-'}  "
                   f"{p.attempts} attempts  {int(now - p.at)}s ago  {p.reason}{kept}")
    if not parked:
        click.echo("no parked deliveries")
    if retrying:
        click.echo(f"{len(retrying)} deliveries waiting for a retry")
    if invalid:
        click.echo(f"{len(invalid)} invalid deliveries (payload does not match its event's "
                   "schema; acknowledged, not processed):")
    for entry in invalid:
        kind = ".".join(str(part) for part in (entry.get("event"), entry.get("action"))
                        if part)
        click.echo(f"{entry.get('delivery')}  {kind or '-'}  {entry.get('work_item') or '-'}  "
                   f"{int(now - float(entry.get('at') or now))}s ago  invalid at "
                   f"{entry.get('path')} ({entry.get('rule')})")


def _operate(action: str, delivery_id: str, as_json: bool) -> None:
    import redis

    from foundation.inbox.dead import DeliveryCommandError

    ledger = _deliveries()
    try:
        done = getattr(ledger, action)(delivery_id)
    except DeliveryCommandError as exc:
        if as_json:
            emit(f"deliveries.{action}", False, "refused", delivery=delivery_id, error=str(exc))
            sys.exit(1)
        raise click.ClickException(str(exc)) from None
    except redis.RedisError as exc:
        raise _redis_down(exc) from None
    if as_json:
        emit(f"deliveries.{action}", True, "queued" if done.get("job") else "done", **done)
        return
    where = f" of {done['work_item']}" if done.get("work_item") else ""
    if action == "retry":
        click.echo(f"{delivery_id}{where}: back at the head of the inbox; job {done['job']}")
    else:
        click.echo(f"{delivery_id}{where}: discarded"
                   + (f"; the held deliveries go on (job {done['job']})" if done["job"] else ""))


@deliveries_group.command("retry")
@click.argument("delivery_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def retry_cmd(delivery_id: str, as_json: bool) -> None:
    """Run parked delivery DELIVERY_ID again: it goes back to the head of its work item's
    inbox with its attempts reset, and the deliveries held behind it follow in order."""
    _operate("retry", delivery_id, as_json)


@deliveries_group.command("discard")
@click.argument("delivery_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def discard_cmd(delivery_id: str, as_json: bool) -> None:
    """Drop parked delivery DELIVERY_ID for good (its payload too); the deliveries held
    behind it are processed."""
    _operate("discard", delivery_id, as_json)


@main.command("redeliver")
@click.option("--since", "since", required=True, metavar="DURATION",
              help="How far back to look: 30m, 6h, 2d, 1h30m (GitHub keeps 3 days).")
@click.option("--dry-run", is_flag=True, help="List what would be redelivered; ask nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def redeliver_cmd(since: str, dry_run: bool, as_json: bool) -> None:
    """Ask GitHub to redeliver the App's webhook deliveries of the last DURATION that
    failed and were not delivered since (needs the App's credentials). Exits non-zero when
    GitHub refused a request."""
    import os

    from foundation.settings import Settings, SettingsError
    from the_loop.redeliver import (
        AppHookDeliveries,
        RedeliverError,
        age,
        parse_duration,
        parse_time,
        redeliver_missed,
    )
    from the_loop.wiring import github_app

    try:
        window = parse_duration(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    try:
        settings = Settings.from_env(os.environ, process="command")
        log = AppHookDeliveries(github_app(settings))
        report = redeliver_missed(log, window, dry_run=dry_run)
    except (RedeliverError, SettingsError) as exc:
        if as_json:
            emit("redeliver", False, "error", error=str(exc))
            sys.exit(1)
        raise click.ClickException(str(exc)) from None
    ok = not report.errors
    if as_json:
        emit("redeliver", ok, "dry-run" if dry_run else ("done" if ok else "partial"),
             since=report.since.isoformat(), checked=report.checked,
             missed=[m.to_dict() for m in report.missed], redelivered=report.redelivered,
             errors=report.errors)
    else:
        now = datetime.now(UTC)
        for m in report.missed:
            a = m.attempt
            verb = ("would redeliver" if dry_run else
                    "redelivered" if m.guid in report.redelivered else "FAILED")
            when = age(parse_time(str(a["delivered_at"])), now) if a.get("delivered_at") else "?"
            kind = f"{a.get('event')}.{a.get('action')}" if a.get("action") else a.get("event")
            line = (f"{verb} {m.guid} {kind} (last attempt {when} ago: "
                    f"{a.get('status_code')} {a.get('status')})")
            if m.guid in report.errors:
                line += f": {report.errors[m.guid]}"
            click.echo(line)
        click.echo(f"{report.checked} attempts since {report.since:%Y-%m-%d %H:%M} UTC; "
                   f"{len(report.missed)} deliveries never got through"
                   + ("" if dry_run else f", {len(report.redelivered)} redelivered"))
    if not ok:
        sys.exit(1)
