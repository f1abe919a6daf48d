"""The reconciler: deliveries GitHub made that the-loop does not hold are asked for again.

GitHub does not redeliver a failed delivery by itself ("Handling failed webhook
deliveries": list the deliveries since the last run, redeliver those whose ``status`` is
not ``OK``, on a schedule). A delivery is missed when the receiver was down or answered
503, or when it answered 202 and the write was lost with a Redis primary that died before
its replica had it. Every ``THE_LOOP_RECONCILE_INTERVAL`` (default 10 minutes) one worker
-- the first whose reaper round finds the run due, under the run lock -- reads the App's
delivery log (:class:`integrations.hook_deliveries.AppHookDeliveries`, ``GET
/app/hook/deliveries``, newest first) back to its cursor and, for each delivery (``guid``)

* that GitHub recorded as failed (no attempt ``OK`` with a status below 400,
  :func:`~integrations.hook_deliveries.is_ok`), reason ``failed``, or
* that GitHub delivered but whose ``guid`` has no dedupe marker in Redis
  (:meth:`foundation.inbox.enqueue.DeliveryQueue.seen`), reason ``unreceived``,

asks GitHub to redeliver its latest attempt (``POST /app/hook/deliveries/{id}/attempts``),
at most once per ``guid`` (the marker ``P:reconcile:asked:GUID``, kept as long as GitHub
can redeliver). ``ping`` is never queued by the receiver, so never asked for. The
redelivery keeps the ``guid``, so one the receiver did queue is answered 200 and written
nowhere (the dedupe, :mod:`foundation.inbox.enqueue`).

GitHub's limits: only deliveries of the past 3 days can be redelivered
(:data:`~integrations.hook_deliveries.REDELIVERY_WINDOW`; older ones are not looked at);
a run reads at most :data:`MAX_PAGES` pages of 100 and asks at most
:data:`MAX_REDELIVERIES` redeliveries. A run those bounds stop (``partial``) keeps its
cursor, so the next one reads the same window again (what it asked for is marked).

The cursor is the newest attempt the last complete run read (its ``id`` and
``delivered_at``); a run reads back to :data:`OVERLAP` seconds before it (an attempt is
logged when it ends, up to GitHub's 10-second timeout after it started), the first run
:data:`FIRST_LOOKBACK` seconds.

Redis keys (namespace ``reconcile``, :class:`ReconcileKeys`):

- ``P:reconcile:lock``        the run lock (redis-py's ``Lock``: token, expires after
  :data:`LOCK_TTL` s)
- ``P:reconcile:state``       hash: ``cursor`` (the newest attempt id read),
  ``cursor_at`` (its ``delivered_at``, Unix seconds), ``last_run``, ``outcome``,
  ``checked``, ``failed``, ``unreceived``, ``worker``, ``error`` (the last run's)
- ``P:reconcile:asked:GUID``  "1": GitHub was asked to redeliver ``GUID``; expires after
  :data:`ASKED_TTL` s
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import redis

from foundation.redis.namespaces import KeySpace, owns
from integrations.hook_deliveries import (
    REDELIVERY_WINDOW,
    AppHookDeliveries,
    RedeliverError,
    is_ok,
    parse_time,
)

__all__ = ["ASKED_TTL", "FIRST_LOOKBACK", "LOCK_TTL", "MAX_PAGES", "MAX_REDELIVERIES",
           "OVERLAP", "ReconcileKeys", "Reconciler", "Run", "stored_state"]

log = logging.getLogger("the_loop.reconcile")

#: Pages of 100 attempts one run reads at most.
MAX_PAGES = 50
#: Redeliveries one run asks for at most.
MAX_REDELIVERIES = 200
#: Seconds before the cursor a run reads back to.
OVERLAP = 300.0
#: Seconds the first run (no cursor yet) reads back.
FIRST_LOOKBACK = 3600.0
#: Seconds the run lock lives if its holder dies mid-run.
LOCK_TTL = 900.0
#: Seconds a "redelivery asked" marker lives: as long as GitHub can redeliver.
ASKED_TTL = int(REDELIVERY_WINDOW.total_seconds()) + 3600
#: Seconds kept clear of GitHub's 3-day edge (an attempt about to age out is not asked).
EDGE = 600.0
#: Events the receiver answers without queuing them (``ping``: webhook/app.py).
NEVER_QUEUED = frozenset({"ping"})


@owns("reconcile")
@dataclass(frozen=True, slots=True)
class ReconcileKeys(KeySpace):
    """The reconciler's key names (see the module docstring). No I/O."""

    @property
    def lock(self) -> str:
        """``P:reconcile:lock``: the run lock."""
        return self.key("reconcile", "lock")

    @property
    def state(self) -> str:
        """``P:reconcile:state``: the cursor and the last run."""
        return self.key("reconcile", "state")

    def asked(self, guid: str) -> str:
        """``P:reconcile:asked:GUID``: GitHub was asked to redeliver ``guid``."""
        return self.key("reconcile", "asked", guid)


@dataclass
class Run:
    """What one run did: ``outcome`` ``done``, ``partial`` or ``error``; ``checked``
    attempts read; ``asked`` guid -> reason (``failed``/``unreceived``) of the
    redeliveries asked; ``errors`` guid -> why GitHub refused; ``since`` the Unix time
    it read back to; ``cursor`` the newest attempt id it read."""

    outcome: str
    since: float
    checked: int = 0
    asked: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    cursor: int | None = None
    error: str | None = None

    def counts(self) -> dict[str, int]:
        """Redeliveries asked, by reason."""
        out = {"failed": 0, "unreceived": 0}
        for reason in self.asked.values():
            out[reason] = out.get(reason, 0) + 1
        return out


class Reconciler:
    """Finds the missed deliveries and asks GitHub for them (see the module docstring).

    Args:
        connection: Redis (the worker's).
        keys: the reconciler's keys.
        deliveries: the App's delivery log (GitHub as the App).
        received: delivery ids -> whether each has a record
            (:meth:`foundation.inbox.enqueue.DeliveryQueue.seen`).
        interval: seconds between two runs (``THE_LOOP_RECONCILE_INTERVAL``).
        owner: who runs (the worker's name; in the state, for the dashboard).
        clock: Unix seconds (tests pass their own).
        max_pages, max_redeliveries: the bounds of one run.

    No I/O happens in the constructor.
    """

    def __init__(self, connection: redis.Redis, keys: ReconcileKeys,
                 deliveries: AppHookDeliveries,
                 received: Callable[[Sequence[str]], list[bool]], *, interval: float,
                 owner: str = "", clock: Callable[[], float] = time.time,
                 max_pages: int = MAX_PAGES,
                 max_redeliveries: int = MAX_REDELIVERIES) -> None:
        self.redis = connection
        self.keys = keys
        self.deliveries = deliveries
        self.received = received
        self.interval = float(interval)
        self.owner = owner
        self.clock = clock
        self.max_pages = max_pages
        self.max_redeliveries = max_redeliveries

    # -- reading ----------------------------------------------------------------------

    def state(self) -> dict[str, str]:
        """The stored cursor and last run (:func:`stored_state`)."""
        return stored_state(self.redis, self.keys)

    def due(self) -> bool:
        """Whether ``interval`` seconds passed since the last run of any worker."""
        last = self.state().get("last_run")
        return last is None or self.clock() - float(last) >= self.interval

    # -- one run ----------------------------------------------------------------------

    def run_if_due(self) -> Run | None:
        """Run once if it is due and no other worker runs it now (the run lock, taken
        without waiting); ``None`` otherwise. Redis errors propagate (the reaper logs
        them); GitHub's are the run's ``error`` outcome."""
        if not self.due():
            return None
        lock = self.redis.lock(self.keys.lock, timeout=LOCK_TTL, blocking=False)
        if not lock.acquire(blocking=False):
            return None
        try:
            if not self.due():  # another worker ran it between our check and the lock
                return None
            return self.run()
        finally:
            try:
                lock.release()
            except redis.exceptions.LockError:
                log.warning("reconcile: the run lock expired before the run ended")

    def run(self) -> Run:
        """One run (see the module docstring; the caller holds the run lock, as
        :meth:`run_if_due` does); records the state and the metrics.

        Returns:
            what it did (:class:`Run`); GitHub refusing or unreachable is outcome
            ``error`` (the guid it was asking for is not marked).

        Raises:
            redis.RedisError: Redis unreachable.
        """
        now = self.clock()
        state = self.state()
        floor = now - REDELIVERY_WINDOW.total_seconds() + EDGE
        cursor_at = state.get("cursor_at")
        since = max(floor, float(cursor_at) - OVERLAP if cursor_at else now - FIRST_LOOKBACK)
        run = Run("done", since)
        attempts: list[dict[str, Any]] = []
        try:
            attempts, complete = self.deliveries.window(
                datetime.fromtimestamp(since, UTC), max_pages=self.max_pages)
            run.checked = len(attempts)
            if not complete:
                run.outcome = "partial"
            if not self._ask(self._missed(attempts), run):
                run.outcome = "partial"
            if attempts:
                run.cursor = max(int(a.get("id") or 0) for a in attempts)
        except RedeliverError as exc:
            run.outcome, run.error = "error", str(exc)
        self._record(run, now, attempts if run.outcome == "done" else [])
        # Here, not at import: the dashboard (in the receiver) reads the state through
        # this module and must not register the worker's metrics.
        from workers import metrics

        metrics.count_reconcile(run.outcome, run.counts(), now)
        if run.asked or run.outcome != "done":
            log.info("reconcile: %s; read %d attempts since %s; asked %d redeliveries%s",
                     run.outcome, run.checked, _iso(since), len(run.asked),
                     f" ({run.error})" if run.error else "")
        return run

    def _missed(self, attempts: Sequence[Mapping[str, Any]]
                ) -> list[tuple[str, Mapping[str, Any], str]]:
        """``(guid, latest attempt, reason)`` of each delivery to ask for, oldest first."""
        by_guid: dict[str, list[Mapping[str, Any]]] = {}
        for attempt in attempts:
            guid = attempt.get("guid")
            if guid and attempt.get("event") not in NEVER_QUEUED:
                by_guid.setdefault(str(guid), []).append(attempt)
        guids = list(by_guid)
        if not guids:
            return []
        received = self.received(guids)
        with self.redis.pipeline(transaction=False) as pipe:
            for guid in guids:
                pipe.exists(self.keys.asked(guid))
            asked = pipe.execute()
        floor = self.clock() - REDELIVERY_WINDOW.total_seconds() + EDGE
        out = []
        for guid, got, done in zip(guids, received, asked, strict=True):
            tries = by_guid[guid]
            failed = not any(is_ok(t) for t in tries)
            if done or not (failed or not got):
                continue
            latest = max(tries, key=lambda t: int(t.get("id") or 0))
            at = latest.get("delivered_at")
            if at and parse_time(str(at)).timestamp() < floor:
                continue  # GitHub would refuse it
            out.append((guid, latest, "failed" if failed else "unreceived"))
        return sorted(out, key=lambda m: int(m[1].get("id") or 0))

    def _ask(self, missed: Sequence[tuple[str, Mapping[str, Any], str]], run: Run) -> bool:
        """Ask GitHub for each of ``missed`` (up to the bound), marking each guid first;
        returns whether every one was asked (``False``: the bound stopped it)."""
        for count, (guid, attempt, reason) in enumerate(missed):
            if count >= self.max_redeliveries:
                return False
            if not self.redis.set(self.keys.asked(guid), "1", nx=True, ex=ASKED_TTL):
                continue  # asked already (another run)
            try:
                self.deliveries.redeliver(int(attempt["id"]))
            except RedeliverError as exc:
                if exc.passing:
                    # Not asked after all: the next run tries again.
                    self.redis.delete(self.keys.asked(guid))
                    raise
                run.errors[guid] = str(exc)  # refused (4xx): not asked again
                continue
            run.asked[guid] = reason
            log.warning("reconcile: asked GitHub to redeliver %s (%s.%s, %s)", guid,
                        attempt.get("event"), attempt.get("action") or "-", reason)
        return True

    def _record(self, run: Run, now: float, complete: Sequence[Mapping[str, Any]]) -> None:
        """Store the last run; move the cursor only after a complete run."""
        fields: dict[str, str | int | float] = {
            "last_run": now, "outcome": run.outcome, "checked": run.checked,
            "worker": self.owner, "error": run.error or "", **run.counts()}
        if complete:
            newest = max(complete, key=lambda a: int(a.get("id") or 0))
            fields["cursor"] = int(newest.get("id") or 0)
            at = newest.get("delivered_at")
            if at:
                fields["cursor_at"] = parse_time(str(at)).timestamp()
        self.redis.hset(self.keys.state, mapping=cast("dict[Any, Any]", fields))


def stored_state(connection: redis.Redis, keys: ReconcileKeys) -> dict[str, str]:
    """The ``P:reconcile:state`` hash, decoded (``{}`` before the first run): ``cursor``,
    ``cursor_at``, ``last_run``, ``outcome``, ``checked``, ``failed``, ``unreceived``,
    ``worker``, ``error``.

    Raises:
        redis.RedisError: Redis unreachable or timed out.
    """
    raw = connection.hgetall(keys.state)
    return {_text(k): _text(v) for k, v in raw.items()}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
