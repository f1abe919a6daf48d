"""The runner: ``the-loop runner`` does the work of agent nodes, one harness turn per RQ
job on its own queue (``RunnerSettings.queue``), never inside delivery processing.

One turn (:meth:`TurnRunner.run`):

1. take the work item's turn lock (at most one live turn per work item) and a slot under
   the global and the installation's caps (``runner.concurrency``,
   ``runner.perInstallation``; a turn without a slot waits in the queue);
2. check the work item's branch out in its own workspace (:mod:`runner.workspace`);
3. render the input (:mod:`runner.prompts`) and run the harness
   (:mod:`integrations.harness`: its own process group, a minimal environment, bounded
   time and output), resuming the node's session; a session that no longer exists is
   replaced by a fresh one seeded with the artifacts;
4. commit what changed as the App's bot, push, open or update the work item's one draft
   pull request;
5. report the turn's end into the work item's inbox (:meth:`foundation.turns.TurnRecords.
   report`); the worker runs the node's exit chain on it.

A heartbeat renews the lock, the slots and the record's lease while the turn runs, and
stops the harness when an operator cancels the turn. A runner killed mid-turn stops
renewing: the :class:`TurnReaper` of any runner sees the lease expire, stops what is left
of the harness on its host, marks the turn ``interrupted`` and queues it again; the next
attempt resumes the same session (the lock keeps it from ever running twice at once).

A runner told to stop (SIGTERM: a rollout, a node drain) takes no new turn (RQ's warm
shutdown) and lets the live one run for up to ``THE_LOOP_RUNNER_DRAIN_SECONDS``
(:attr:`~foundation.config.deployment.RunnerSettings.drain_seconds`); a turn still
running then is interrupted the reaper's way: its harness is stopped, nothing is pushed
or reported, the record is marked ``interrupted`` and the turn queued again
(:meth:`foundation.turns.TurnRecords.requeue`), its lock released, so another runner
resumes the same session at once (:meth:`TurnRunner.drain`).

Sessions follow the work item (:mod:`foundation.turns`, "Affinity"): a runner is named by
:attr:`TurnRunner.runner_id` (its host and ``homeDir``, or ``THE_LOOP_RUNNER_ID``), keeps
``P:runner:alive:ID`` alive from its reaper thread, records itself as the holder of each
work item it runs a turn of, and takes jobs with :class:`AffinityQueue`: the first waiting
job whose holder is itself, nobody, or a dead runner. A turn whose session is not in this
HOME (its holder died) is run as a fresh session seeded with the artifacts; the turn
record keeps ``fresh_session_at`` (the turn that started it) and ``lost_session`` (the
session it replaced) for the work item's later turns, and its ``session_id`` is the new
one.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import DequeueTimeout
from rq.worker import WorkerStatus

from foundation.inbox.enqueue import DeliveryQueue
from foundation.redis import DEQUEUE_TIMEOUT, BoundedDequeue, blocking
from foundation.turns import (
    INTERRUPTED,
    LOG_TAIL_BYTES,
    QUEUED,
    RUNNING,
    TurnContext,
    TurnRecords,
    record_key,
    runner_id,
)
from graph import pull_body
from graph.errors import LoopError
from graph.work import CANCELLED, TurnEnded, TurnOrder
from integrations.harness.base import Harness, TurnOutcome
from integrations.harness.process import kill_group
from runner import harness_turn
from runner.harness_turn import PASS_THROUGH  # noqa: F401 (re-exported)
from runner.prompts import override_path
from runner.workspace import Checkout, MergeConflict, Workspaces, branch_name

if TYPE_CHECKING:
    from foundation.settings import HarnessSettings, RunnerSettings
    from graph.ports import GitHub

log = logging.getLogger("the_loop.runner")

#: prctl(2) options (linux/prctl.h).
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
#: Seconds a turn without a slot waits before it is queued again.
SLOT_WAIT = 5.0
#: Seconds a turn whose work item's lock is held waits before it is queued again.
BUSY_WAIT = 1.0
#: Seconds between two looks at the turns queue while no waiting job is this runner's.
PICK_POLL = 0.2


@dataclass
class TurnRunner:
    """Runs turns (see the module docstring). Built once per runner process by
    :func:`the_loop.wiring.build_runner`.

    Attributes:
        records: the turn records.
        inbox: where reports go (the worker's delivery queue).
        harness: the configured harness adapter.
        harness_settings, runner_settings: ``harness:`` and ``runner:``.
        workspaces: installation id -> the per-work-item checkouts (their git token is
            the installation's).
        github: installation id -> GitHub provider (draft pull requests), or ``None``
            (a local or git-only deployment: no pull request is opened).
        environ: the runner's environment (the harness gets the variables
            ``harness.env`` names from it, and :data:`PASS_THROUGH`; nothing else).
        host: this runner's host name (the reaper only stops processes of its own host).
    """

    records: TurnRecords
    inbox: DeliveryQueue
    harness: Harness
    harness_settings: HarnessSettings
    runner_settings: RunnerSettings
    workspaces: Callable[[int | None], Workspaces]
    github: Callable[[int | None], GitHub] | None
    environ: Mapping[str, str]
    host: str = socket.gethostname()
    #: The heartbeat of the turn this process runs now, if any (:meth:`drain`).
    _live: _Heartbeat | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def runner_id(self) -> str:
        """This runner's id in affinity records and its liveness key
        (:func:`foundation.turns.runner_id`: ``THE_LOOP_RUNNER_ID``, else its host and a
        digest of its resolved ``homeDir``)."""
        return runner_id(self.host, self.runner_settings.home_dir,
                         self.environ.get("THE_LOOP_RUNNER_ID"))

    def drain(self) -> bool:
        """Interrupt the turn this process runs (the runner is stopping and its drain
        time is up): its harness is stopped and the turn is queued again to resume
        elsewhere (see the module docstring). Returns whether a turn was live."""
        beat = self._live
        if beat is None:
            return False
        log.warning("turn %s: the runner is stopping; interrupting it to resume on "
                    "another runner", beat.order.id)
        beat.interrupt()
        return True

    # -- one turn ----------------------------------------------------------------------

    def run(self, ref: str, order_id: str) -> str:
        """Run turn ``order_id`` of ``ref`` if it is still the one to run.

        Returns:
            a one-line summary (``stale``, ``busy``, ``waiting for a slot`` or the turn's
            status).
        """
        record = self.records.get(ref)
        if (record is None or record.get("id") != order_id
                or record.get("status") not in (QUEUED, INTERRUPTED)):
            return "stale: the turn ended or another one replaced it"
        order = TurnOrder.from_dict(json.loads(record["order"]))
        context = TurnContext.from_dict(json.loads(record["context"]))
        lease = self.runner_settings.lease
        token = self.records.lock(ref, lease)
        if token is None:
            # The lock may still be the previous turn's, whose report ordered this one:
            # come back shortly; an attempt of this very turn is live only when RUNNING.
            if record.get("status") != RUNNING:
                time.sleep(BUSY_WAIT)
                self.records.enqueue_again(ref, front=True)
            return "busy: another turn of this work item is live"
        try:
            if not self.records.take_slot(order.id, context.installation_id, lease,
                                          limit=self.runner_settings.concurrency,
                                          per_installation=self.runner_settings.per_installation):
                self.records.unlock(ref, token)
                token = ""
                self._wait_for_slot(ref, order)
                return "waiting for a slot"
            return self._run_locked(ref, order, context, record, token)
        finally:
            if token:
                self.records.unlock(ref, token)
            self.records.release_slot(order.id, context.installation_id)

    def _wait_for_slot(self, ref: str, order: TurnOrder) -> None:
        time.sleep(SLOT_WAIT)  # the queue has nothing better for this process meanwhile
        self.records.enqueue_again(ref)

    def _run_locked(self, ref: str, order: TurnOrder, context: TurnContext,
                    record: Mapping[str, str], token: str) -> str:
        attempt = int(record.get("attempt") or 1)
        interrupted = record.get("status") == INTERRUPTED
        self.records.hold(ref, self.runner_id)
        self.records.update(ref, status=RUNNING, host=self.host, pid=os.getpid(),
                            runner=self.runner_id, started_at=time.time(),
                            lease_until=time.time() + self.runner_settings.lease)
        beat = _Heartbeat(self.records, ref, order, context, token, self.runner_settings.lease)
        beat.start()
        self._live = beat
        started = time.monotonic()
        branch: str | None = context.branch
        try:
            if record.get("cancel") == "1":  # cancelled while it waited in the queue
                beat.cancelled = True
                ended = TurnEnded(order.id, CANCELLED, session_id=order.session_id)
            else:
                ended, branch = self._turn(ref, order, context, interrupted, attempt, beat)
        except TurnAbandoned:
            ended = TurnEnded(order.id, "error", session_id=order.session_id)
        except TurnInterrupted:
            return self._interrupted(ref, order, context, token)
        except LoopError as exc:
            log.warning("turn %s failed: %s", order.id, exc)
            ended = TurnEnded(order.id, "error", session_id=order.session_id,
                              detail=f"{type(exc).__name__}: {exc}"[:300])
        finally:
            self._live = None
            beat.stop()
        if beat.lost:
            log.error("turn %s lost its lock mid-turn; another attempt owns it: nothing is "
                      "reported", order.id)
            return "abandoned: the lock was lost"
        if beat.cancelled:
            ended = replace(ended, status=CANCELLED, detail="cancelled by an operator")
        ended = replace(ended, seconds=round(time.monotonic() - started, 3))
        self._report(ref, order, context, ended, attempt, branch)
        return ended.status

    def _interrupted(self, ref: str, order: TurnOrder, context: TurnContext,
                     token: str) -> str:
        """The reaper's path for a turn :meth:`drain` interrupted: marked ``interrupted``,
        its lock and slots released (another runner may take it now), queued again."""
        self.records.update_if(ref, order.id, status=INTERRUPTED)
        self.records.unlock(ref, token)
        self.records.release_slot(order.id, context.installation_id)
        self.records.requeue(ref, reason="its runner stopped mid-turn (drained)")
        return INTERRUPTED

    def _turn(self, ref: str, order: TurnOrder, context: TurnContext, interrupted: bool,
              attempt: int, beat: _Heartbeat) -> tuple[TurnEnded, str | None]:
        workspaces = self.workspaces(context.installation_id)
        own_branch = order.task is not None and not order.task.get("shared")
        checkout = workspaces.prepare(context.repository, context.number, context.title,
                                      context.default_branch, branch=context.branch,
                                      task=order.task_id if own_branch else None,
                                      read=(override_path(order.command),)
                                      if order.command else ())
        resume = order.resume
        if interrupted and resume is None and self.harness.name == "claude-code":
            resume = order.session_id  # the first turn was pinned to the-loop's id
        session_id = order.session_id
        outcome = self._harness(workspaces, order, context, checkout, session_id, resume,
                                attempt, beat)
        agent_seconds = outcome.duration_s
        if outcome.status == "resume-failed" and not (beat.cancelled or beat.interrupted):
            log.warning("session of %s at %s cannot be resumed; starting a fresh one seeded "
                        "with the artifacts", ref, order.node)
            lost, session_id = session_id, str(uuid.uuid4())
            self.records.update(ref, fresh_session_at=order.id, lost_session=resume or lost)
            fresh = replace(order, seeded_with=(*order.seeded_with, *order.artifacts))
            outcome = self._harness(workspaces, fresh, context, checkout, session_id, None,
                                    attempt, beat)
            agent_seconds += outcome.duration_s
        if beat.lost:  # another attempt took the turn over: its work is the one pushed
            raise TurnAbandoned(order.id)
        if beat.interrupted:  # the runner is stopping: the turn resumes elsewhere
            raise TurnInterrupted(order.id)
        what = f"task {order.task_id}" if order.task_id else order.node
        head = workspaces.commit_and_push(
            checkout, f"the-loop: {what}, turn {order.number} for "
                      f"#{context.number}\n\nWork item: {order.ref}")
        status = outcome.status if outcome.status != "resume-failed" else "failed"
        merged: bool | None = True if order.task is not None else None
        detail = outcome.detail
        branch = checkout.branch
        if own_branch:
            # The task's branch joins the work item's once its turn completed.
            branch = context.branch or branch_name(context.number, context.title)
            merged = False
            if status == "completed":
                try:
                    head = workspaces.merge_into(
                        checkout, branch, f"the-loop: merge task {order.task_id} for "
                                          f"#{context.number}\n\nWork item: {order.ref}")
                    merged = True
                except MergeConflict as conflict:
                    detail = f"conflict in {', '.join(conflict.paths) or 'the merge'}"
        # Nothing written yet (a first turn that failed early): no branch to show, and
        # GitHub refuses a pull request without commits.
        pushed = head != checkout.base_sha and merged is not False
        pull = self._draft_pull(order.ref, context, branch) if pushed else None
        return TurnEnded(
            id=order.id, status=status, session_id=session_id,
            harness_session=outcome.harness_session, head_sha=head, pull=pull,
            cost_usd=outcome.cost_usd, input_tokens=outcome.input_tokens,
            output_tokens=outcome.output_tokens, agent_seconds=round(agent_seconds, 3),
            detail=detail, merged=merged,
            warnings=outcome.warnings, totals=outcome.totals), (
                branch if pushed else context.branch)

    def _harness(self, workspaces: Workspaces, order: TurnOrder, context: TurnContext,
                 checkout: Checkout,
                 session_id: str, resume: str | None, attempt: int,
                 beat: _Heartbeat) -> TurnOutcome:
        request = harness_turn.request(
            self.setup, order, context, cwd=checkout.path, branch=checkout.branch,
            session_id=session_id, resume=resume, attempt=attempt,
            override=lambda path: workspaces.read_default(checkout, path),
            on_start=beat.started)
        self.records.update(record_key(order), log=str(request.log_path),
                            session_id=session_id)
        outcome = harness_turn.run(self.harness, request)
        stop_orphans()  # before git runs with a token in its environment
        self._keep_tail(record_key(order), request.log_path)
        return outcome

    @property
    def setup(self) -> harness_turn.TurnSetup:
        """The settings and environment every turn is built from."""
        return harness_turn.TurnSetup(self.harness_settings, self.runner_settings,
                                      self.environ)

    def environment(self, order: TurnOrder, context: TurnContext, session_id: str,
                    resume: str | None, result_path: Path) -> dict[str, str]:
        """The harness process's whole environment (:func:`runner.harness_turn.
        environment`): :data:`PASS_THROUGH`, ``HOME`` (the runner's ``homeDir``), the
        ``THE_LOOP_*`` variables naming the turn, and the variables ``harness.env`` names
        (its API key). None of the-loop's own secrets."""
        return harness_turn.environment(self.setup, order, session_id, resume, result_path)

    def log_dir(self, ref: str) -> Path:
        """Where ``ref``'s turn logs and result files are kept (outside its checkout)."""
        return harness_turn.log_dir(self.setup, ref)

    def _keep_tail(self, ref: str, log_path: Path) -> None:
        with contextlib.suppress(OSError):
            with log_path.open("rb") as f:
                f.seek(max(0, log_path.stat().st_size - LOG_TAIL_BYTES))
                tail = f.read()
            self.records.redis.set(self.records.keys.turn_log(ref), tail,
                                   ex=7 * 24 * 3600)

    def _draft_pull(self, ref: str, context: TurnContext, branch: str) -> int | None:
        """Open the work item's one draft pull request, or find it (``None`` without
        GitHub: a local run). Its body is the-loop's marked region
        (:func:`graph.pull_body.render`): ``Closes #N`` for an issue work item, so
        merging it closes the issue (GitHub docs, "Linking a pull request to an issue");
        ``Refs #N`` for a pull request, which a pull request cannot close. The worker
        keeps the region current from then on (artifacts, the task table:
        :mod:`workers.pull_body`); an existing pull request's body is not touched here."""
        if self.github is None:
            return None
        github = self.github(context.installation_id)
        found = github.find_pull_request(repo=context.repository, head=branch)
        if found is not None:
            return int(found["number"])
        created = github.create_pull_request(
            repo=context.repository, head=branch, base=context.default_branch,
            title=f"the-loop: #{context.number}",
            body=pull_body.render(ref, kind=context.kind, number=context.number),
            draft=True)
        return int(created["number"])

    def _report(self, ref: str, order: TurnOrder, context: TurnContext, ended: TurnEnded,
                attempt: int, branch: str | None) -> None:
        # The record first, and only while it is this turn's: once the report is in, the
        # worker may order the next turn, whose record must not be overwritten.
        self.records.update_if(ref, order.id, status=ended.status, ended_at=time.time(),
                               cost_usd=ended.cost_usd, detail=ended.detail,
                               harness_session=ended.harness_session or "",
                               head_sha=ended.head_sha or "",
                               warnings=json.dumps(list(ended.warnings)))
        self.records.report(self.inbox, order, context, ended, attempt=attempt,
                            branch=branch)
        log.info("turn %s ended: %s", order.id, ended.status)


class TurnAbandoned(LoopError):
    """A turn whose lock another attempt took over (a runner paused past its lease):
    it neither pushes nor reports."""


class TurnInterrupted(LoopError):
    """A turn the stopping runner interrupted (:meth:`TurnRunner.drain`): it neither
    pushes nor reports; it is queued again."""


#: Seconds between SIGTERM and SIGKILL when a turn is cancelled or its lock lost.
KILL_GRACE = 5.0


class _Heartbeat(threading.Thread):
    """Renews the turn's lock, slots and lease every third of the lease, and stops the
    harness's process group when the turn is cancelled or its lock is lost."""

    def __init__(self, records: TurnRecords, ref: str, order: TurnOrder,
                 context: TurnContext, token: str, lease: int) -> None:
        super().__init__(name=f"turn-heartbeat-{order.number}", daemon=True)
        self.records, self.ref, self.order, self.context = records, ref, order, context
        self.token, self.lease = token, lease
        self.pgid: int | None = None
        self.cancelled = False
        self.lost = False
        self.interrupted = False
        self._stop_event = threading.Event()

    def started(self, pgid: int) -> None:
        """The harness started as process group ``pgid`` (recorded for the reaper); one
        started after the lock was lost or the turn cancelled is stopped at once."""
        self.pgid = pgid
        self.records.update(self.ref, pgid=pgid)
        if self.lost or self.cancelled or self.interrupted:
            self._kill()

    def interrupt(self) -> None:
        """The runner is stopping: stop the harness (the turn is queued again)."""
        self.interrupted = True
        self._kill()

    def run(self) -> None:
        while not self._stop_event.wait(max(1.0, self.lease / 3)):
            try:
                if not self.records.renew(self.ref, self.token, self.lease):
                    log.error("turn %s lost its lock; stopping the harness", self.order.id)
                    self.lost = True
                    self._kill()
                    return
                self.records.take_slot(self.order.id, self.context.installation_id,
                                       self.lease, limit=1 << 30, per_installation=1 << 30)
                record = self.records.get(self.ref) or {}
                if record.get("cancel") == "1" and not self.cancelled:
                    self.cancelled = True
                    self._kill()
            except redis.RedisError as exc:  # the lease outlives a short outage
                log.warning("turn heartbeat failed (%s)", type(exc).__name__)

    def _kill(self) -> None:
        """TERM the harness's group, KILL it after the grace (it may ignore TERM)."""
        if self.pgid is not None:
            threading.Thread(target=kill_group, args=(self.pgid, KILL_GRACE), daemon=True,
                             name=f"turn-kill-{self.pgid}").start()

    def stop(self) -> None:
        self._stop_event.set()


class TurnReaper(threading.Thread):
    """Takes back turns whose runner died: a ``running`` record whose lock expired is
    marked ``interrupted`` (what is left of its harness on this host is stopped) and
    queued again, to resume the same session.

    Args:
        records: the turn records.
        host: this runner's host name.
        interval: seconds between rounds.
    """

    def __init__(self, records: TurnRecords, host: str, *, interval: float = 5.0,
                 runner: str | None = None, alive_ttl: float = 30.0) -> None:
        super().__init__(name="turn-reaper", daemon=True)
        self.records, self.host, self.interval = records, host, interval
        self.runner, self.alive_ttl = runner, max(alive_ttl, 3 * interval)
        self._stop_event = threading.Event()

    def beat(self) -> None:
        """Renew this runner's liveness key (``P:runner:alive:ID``, :attr:`alive_ttl`
        seconds: at least three rounds), which keeps its work items' turns its own."""
        if self.runner is not None:
            self.records.alive(self.runner, int(self.alive_ttl))

    def reap(self) -> list[str]:
        """One round. Returns the refs whose turn was queued again."""
        again: list[str] = []
        for ref in self.records.refs():
            record = self.records.get(ref) or {}
            if record.get("status") != RUNNING:
                continue
            if self.records.redis.exists(self.records.keys.turn_lock(ref)):
                continue  # its runner is alive (or another took it)
            if float(record.get("lease_until") or 0) > time.time():
                continue
            if record.get("host") == self.host and record.get("pgid"):
                with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                    os.killpg(int(record["pgid"]), signal.SIGKILL)
            self.records.update(ref, status=INTERRUPTED)
            if self.records.requeue(ref, reason="its runner stopped mid-turn"):
                again.append(ref)
        return again

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            try:
                self.beat()
                self.reap()
            except redis.RedisError as exc:
                log.warning("turn reaper round failed (%s)", type(exc).__name__)

    def stop(self) -> None:
        self._stop_event.set()


# -- the RQ side ---------------------------------------------------------------------

_current: contextvars.ContextVar[TurnRunner] = contextvars.ContextVar("turn_runner")


@contextlib.contextmanager
def running_with(runner: TurnRunner) -> Iterator[None]:
    """Make ``runner`` the one :func:`run_turn` uses while a job runs."""
    token = _current.set(runner)
    try:
        yield
    finally:
        _current.reset(token)


def run_turn(ref: str, order_id: str) -> str:
    """The RQ job of one turn (:data:`foundation.turns.TURN_FUNC`)."""
    return _current.get().run(ref, order_id)


def remove_workspace(ref: str, repository: str, number: int) -> str:
    """The RQ job that removes done work item ``ref``'s checkout and turn logs
    (:data:`foundation.turns.CLEANUP_FUNC`)."""
    runner = _current.get()
    runner.workspaces(None).remove(repository, number)
    shutil.rmtree(harness_turn.log_dir(runner.setup, ref, create=False), ignore_errors=True)
    return f"removed the workspace of {ref}"


class AffinityQueue(Queue):
    """The turns queue as one runner takes from it: RQ's dequeue, but the job taken is
    the first waiting one whose work item's holder is this runner, nobody, or a dead
    runner (:meth:`foundation.turns.TurnRecords.pick`), not simply the head. Built per
    runner by :func:`affinity_queue`.

    While no waiting job is this runner's, it looks again every :data:`PICK_POLL`
    seconds up to RQ's dequeue timeout (a blocking pop would take the head, which may be
    another runner's)."""

    records: ClassVar[TurnRecords]
    runner: ClassVar[str]

    @classmethod
    def dequeue_any(cls, queues: Any, timeout: int | None, connection: Any,
                    job_class: Any = None, serializer: Any = None,
                    death_penalty_class: Any = None) -> Any:
        """RQ's :meth:`rq.Queue.dequeue_any` with the affinity pick.

        Returns:
            ``(job, queue)``, or ``None`` (``timeout`` ``None`` and nothing to take).

        Raises:
            rq.exceptions.DequeueTimeout: nothing to take within ``timeout`` seconds.
        """
        queues = list(queues)
        deadline = time.monotonic() + (timeout or 0)
        while True:
            for queue in queues:
                job = cls.records.pick(cls.runner, connection, queue.key)
                if job is None:
                    continue
                found = cls._fetch_dequeued_job(connection, queue.key, job,
                                                job_class=job_class, serializer=serializer,
                                                death_penalty_class=death_penalty_class)
                if found is not None:
                    return found
            if timeout is None:
                return None
            if time.monotonic() >= deadline:
                raise DequeueTimeout(timeout, [q.key for q in queues])
            time.sleep(PICK_POLL)


def affinity_queue(records: TurnRecords, runner: str) -> type[AffinityQueue]:
    """The :class:`AffinityQueue` class of runner id ``runner``."""
    return type("AffinityQueue", (AffinityQueue,), {"records": records, "runner": runner})


class TurnWorker(BoundedDequeue, SimpleWorker):
    """RQ's in-process worker for the turns queue: a killed runner takes its turn with
    it (no forked work horse outlives it); its reaper thread takes turns back. It waits
    for a turn at most :data:`~foundation.redis.client.DEQUEUE_TIMEOUT` seconds at a time,
    on a connection of its own whose socket timeout covers that wait.

    Args:
        runner: the runner its jobs use; the other arguments are RQ's ``SimpleWorker``'s.
    """

    def __init__(self, *args: Any, runner: TurnRunner, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.runner = runner

    def execute_job(self, job: Any, queue: Queue) -> None:
        with running_with(self.runner):
            super().execute_job(job, queue)

    def request_stop(self, signum: Any, frame: Any) -> None:
        """RQ's warm shutdown (no new turn); a live turn gets ``drain_seconds`` more,
        then :meth:`TurnRunner.drain` interrupts it (a timer thread). The runner's
        liveness key goes at once: its work items' next turns are anyone's."""
        with contextlib.suppress(redis.RedisError):
            self.runner.records.gone(self.runner.runner_id)
        if self.get_state() == WorkerStatus.BUSY:
            seconds = self.runner.runner_settings.drain_seconds
            log.info("runner %s stopping: the live turn may run %g s more", self.name,
                     seconds)
            timer = threading.Timer(seconds, self.runner.drain)
            timer.daemon = True
            timer.name = "turn-drain"
            timer.start()
        super().request_stop(signum, frame)


def harden_process() -> None:
    """Keep the harness (same uid) out of this process: not dumpable, so its
    ``/proc/PID/environ`` (the-loop's secrets) and memory are unreadable to it, and a
    child subreaper, so a process the harness leaves behind (double fork, ``setsid``) is
    reparented here and stopped after the turn (:func:`stop_orphans`), before git runs
    with a token. Linux ``prctl(2)``; elsewhere nothing is done."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        log.warning("prctl is not available: the harness is not kept out of the runner")


def stop_orphans() -> list[int]:
    """SIGKILL every live descendant of this process (between turns a runner has none of
    its own: what is there was left by a harness). Returns their pids."""
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc/self").exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = list(children.get(me, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    pending = set(found)
    for _ in range(20):  # reap them (they are our children now): no zombies left
        for pid in list(pending):
            with contextlib.suppress(ChildProcessError, OSError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    pending.discard(pid)
                    continue
            if not Path(f"/proc/{pid}").exists():
                pending.discard(pid)
        if not pending:
            break
        time.sleep(0.05)
    if found:
        log.warning("stopped %d process(es) a harness left behind", len(found))
    return found


def work(runner: TurnRunner, *, burst: bool = False, name: str | None = None,
         logging_level: str = "INFO") -> bool:
    """Work the turns queue in this process with a :class:`TurnReaper` beside it (the
    process hardened first: :func:`harden_process`).

    Returns:
        whether any job was performed.
    """
    harden_process()
    connection = blocking(runner.records.redis, DEQUEUE_TIMEOUT)
    queue_class = affinity_queue(runner.records, runner.runner_id)
    queue = queue_class(runner.records.queue.name, connection=connection)
    worker = TurnWorker([queue], connection=connection, name=name, runner=runner,
                        queue_class=queue_class)
    reaper = TurnReaper(runner.records, runner.host, runner=runner.runner_id,
                        alive_ttl=runner.runner_settings.lease)
    reaper.beat()
    reaper.reap()
    reaper.start()
    log.info("runner %s on queue %s (harness %s)", worker.name, queue.name,
             runner.harness.name)
    try:
        return bool(worker.work(burst=burst, logging_level=logging_level,
                                with_scheduler=False))
    finally:
        reaper.stop()


def serve(build: Callable[[], TurnRunner], processes: int, *, burst: bool = False,
          logging_level: str = "INFO") -> int:
    """``the-loop runner``: ``processes`` runner processes (each :func:`work`), started
    with ``fork``; SIGTERM/SIGINT are passed on (each finishes its turn's report and
    stops). Returns the exit status (0 when every process exited 0)."""
    if processes <= 1:
        work(build(), burst=burst, logging_level=logging_level)
        return 0
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    children = [ctx.Process(target=_child, args=(build, burst, logging_level),
                            name=f"the-loop-runner-{i + 1}") for i in range(processes)]
    for child in children:
        child.start()

    def forward(signum: int, frame: Any) -> None:
        for child in children:
            if child.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for child in children:
        child.join()
    return 0 if all(c.exitcode == 0 for c in children) else 1


def _child(build: Callable[[], TurnRunner], burst: bool, logging_level: str) -> None:
    work(build(), burst=burst, logging_level=logging_level)
