"""Agent turns in Redis: the orders the runtime places, the runner's record of each turn,
its one live turn per work item, the concurrency slots, and the report that hands a
turn's end back to the worker.

The runtime orders a turn through :class:`RunnerWork` (the worker's
:class:`graph.work.AgentWork`): one MULTI/EXEC writes the "ordered" marker, the work
item's turn record (``queued``) and the RQ job on the turns queue, so a turn is queued
exactly when it is recorded. The runner (:mod:`runner.service`) takes the job, holds the
work item's turn lock and its slots while the harness runs, and ends by putting a
:data:`foundation.events.TURN_EVENT` delivery into the work item's inbox
(:meth:`TurnRecords.report`): the worker then runs the node's exit chain, serialised with
every other delivery of the work item.

Keys (:class:`TurnKeys`; ``P`` the prefix, ``REF`` a work item or a task's record key,
:func:`record_key`), read and written by both the worker and the runner:

- ``P:turn:REF``            hash: the work item's outstanding or last turn record
- ``P:turns``               set of refs with a turn record (``the-loop sessions list``)
- ``P:turns:rounds``        hash: RQ job id of a waiting first turn -> "INST ROUND" (its
                            installation and round-robin round, :data:`_FAIR_SCRIPT`)
- ``P:turn:ordered:ID``     string "1": turn order ID was queued (ordering it again is a no-op)
- ``P:turn-lock:REF``       the one live turn of a work item (token; expires without a heartbeat)
- ``P:runner:slots``        sorted set: live turn ids -> lease expiry (the global cap)
- ``P:runner:slots:INST``   the same per installation (the per-installation cap)
- ``P:workspace:REF``       hash: the work item's branch and draft pull request
- ``P:alias:OWNER/REPO#N``  the work item a draft pull request belongs to
- ``P:turn-log:REF``        the tail of the last turn's log
- ``P:turn:retired:REF``    string "1": the done work item's workspace removal was queued
- ``P:turns:refs``          hash: RQ job id of a waiting job -> the record ref it is for
                            (read by :data:`_PICK_SCRIPT`; a job not in it is anyone's)
- ``P:affinity:REF``        string: the runner id (:func:`runner_id`) that last ran a turn of
                            REF, so holds its harness session and workspace on its disk
- ``P:runner:alive:ID``     string "1" while runner ID lives (renewed by its reaper thread,
                            expires :data:`ALIVE_TTL`-ish after its death)

Affinity (sessions that follow the work item): a runner takes a waiting job with
:meth:`TurnRecords.pick` (:data:`_PICK_SCRIPT`), which scans the turns queue from its
front -- the order :data:`_FAIR_SCRIPT` and the continuations' front pushes made:
continuations first, then first turns round-robin per installation -- and takes the first
job whose work item's affinity is this runner, none, or a runner whose liveness key is
gone. A job whose holder lives waits for that runner (its next free process); when the
holder dies its jobs become anyone's, and the runner that takes one finds no session in
its HOME: the harness reports ``resume-failed`` and the runner starts a fresh session
seeded with the node's artifacts (:meth:`runner.service.TurnRunner._turn`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import redis
from rq import Queue

from foundation.branches import branch_name
from foundation.events import TURN_EVENT
from foundation.inbox.enqueue import SEVEN_DAYS, DeliveryQueue
from foundation.inbox.record import DeliveryRecord
from foundation.redis.namespaces import KeySpace, owns
from graph.ports import RetryLater
from graph.work import TurnEnded, TurnOrder

log = logging.getLogger("the_loop.runner")

#: The RQ job every turn runs: ``runner.service.run_turn(ref, order_id)``.
TURN_FUNC = "runner.service.run_turn"
#: The RQ job that removes a done work item's workspace.
CLEANUP_FUNC = "runner.service.remove_workspace"
#: Turn record statuses besides a :class:`graph.work.TurnEnded` status.
QUEUED, RUNNING, INTERRUPTED = "queued", "running", "interrupted"
#: Bytes of a turn's log kept in Redis for ``the-loop sessions logs``.
LOG_TAIL_BYTES = 64 * 1024
#: The sender of the runner's reports (GitHub's shape of an App's bot user).
RUNNER_SENDER = {"login": "the-loop[bot]", "type": "Bot"}

_SLOT_SCRIPT = """
-- KEYS: the global slots, the installation's slots; ARGV: turn id, now, lease expiry,
-- global limit, installation limit. Take both or neither.
for i = 1, 2 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', ARGV[2]) end
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not held then
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 0 end
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
"""

_PICK_SCRIPT = """
-- Take the first waiting job this runner may run. KEYS: the RQ queue's list, RQ's
-- intermediate list of that queue, the job -> ref hash; ARGV: this runner's id, the
-- affinity key prefix, the liveness key prefix. A job is this runner's when its ref has no
-- affinity, the affinity is this runner, or the holder's liveness key is gone. The job
-- moves to the intermediate list as RQ's own LMOVE does. Returns the job id or false.
local queue, inter, refs = KEYS[1], KEYS[2], KEYS[3]
local me, aff, alive = ARGV[1], ARGV[2], ARGV[3]
local ids = redis.call('LRANGE', queue, 0, -1)
for _, job in ipairs(ids) do
  local ref = redis.call('HGET', refs, job)
  local mine = true
  if ref then
    local holder = redis.call('GET', aff .. ref)
    if holder and holder ~= me and redis.call('EXISTS', alive .. holder) == 1 then
      mine = false
    end
  end
  if mine then
    redis.call('LREM', queue, 1, job)
    redis.call('RPUSH', inter, job)
    if ref then redis.call('HDEL', refs, job) end
    return job
  end
end
if redis.call('HLEN', refs) > #ids then  -- jobs gone from the queue otherwise: forget them
  local waiting = {}
  for _, job in ipairs(ids) do waiting[job] = true end
  for _, job in ipairs(redis.call('HKEYS', refs)) do
    if not waiting[job] then redis.call('HDEL', refs, job) end
  end
end
return false
"""

_FAIR_SCRIPT = """
-- Place a first turn the RQ queue just pushed at its tail where round-robin across
-- installations puts it. KEYS: the RQ queue's list, the rounds hash; ARGV: job id,
-- installation. Waiting first turns carry a round (one installation's k-th waiting first
-- turn is in round k, a newcomer joins the lowest round waiting); the queue keeps them
-- by round, then arrival, behind the continuations at its front. Returns the round.
local queue, rounds, id, inst = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
redis.call('LREM', queue, -1, id)
local ids = redis.call('LRANGE', queue, 0, -1)
local waiting, at = {}, {}
local low, mine
for i, job in ipairs(ids) do
  waiting[job] = true
  local tag = redis.call('HGET', rounds, job)
  if tag then
    local who, round = string.match(tag, '^(.*) (%d+)$')
    round = tonumber(round)
    at[i] = round
    if low == nil or round < low then low = round end
    if who == inst and (mine == nil or round > mine) then mine = round end
  end
end
for _, job in ipairs(redis.call('HKEYS', rounds)) do  -- taken since: forget them
  if not waiting[job] then redis.call('HDEL', rounds, job) end
end
local round = mine and mine + 1 or low or 1
redis.call('HSET', rounds, id, inst .. ' ' .. round)
for i, job in ipairs(ids) do
  if at[i] and at[i] > round then
    redis.call('LINSERT', queue, 'BEFORE', job, id)
    return round
  end
end
redis.call('RPUSH', queue, id)
return round
"""


@owns("turn", "turns", "turn-lock", "runner:slots", "workspace", "alias", "turn-log",
      "affinity", "runner:alive")
@dataclass(frozen=True, slots=True)
class TurnKeys(KeySpace):
    """The turn protocol's key names of one deployment (see the module docstring). No I/O.

    Args:
        prefix: prefix of the-loop's keys (``THE_LOOP_REDIS_PREFIX``).
    """

    def turn(self, ref: str) -> str:
        """``P:turn:REF``: the work item's turn record (hash)."""
        return self.key("turn", ref)

    @property
    def turns(self) -> str:
        """``P:turns``: refs with a turn record."""
        return self.key("turns")

    @property
    def rounds(self) -> str:
        """``P:turns:rounds``: waiting first turns' installation and round (hash)."""
        return self.key("turns", "rounds")

    @property
    def job_refs(self) -> str:
        """``P:turns:refs``: waiting job id -> the record ref it is for (hash)."""
        return self.key("turns", "refs")

    def affinity(self, ref: str = "") -> str:
        """``P:affinity:REF``: the runner holding ``ref``'s session (``""``: the prefix)."""
        return self.key("affinity", ref)

    def runner_alive(self, runner: str = "") -> str:
        """``P:runner:alive:ID``: runner ``runner`` lives (``""``: the prefix)."""
        return self.key("runner:alive", runner)

    def turn_ordered(self, order_id: str) -> str:
        """``P:turn:ordered:ID``: turn order ``order_id`` was queued."""
        return self.key("turn", "ordered", order_id)

    def turn_retired(self, ref: str) -> str:
        """``P:turn:retired:REF``: the removal of ``ref``'s workspace was queued."""
        return self.key("turn", "retired", ref)

    def turn_lock(self, ref: str) -> str:
        """``P:turn-lock:REF``: the work item's one live turn."""
        return self.key("turn-lock", ref)

    def runner_slots(self, installation: int | None = None) -> str:
        """``P:runner:slots`` (global) or ``P:runner:slots:INST`` (one installation)."""
        if installation is None:
            return self.key("runner:slots")
        return self.key("runner:slots", str(installation))

    def workspace(self, ref: str) -> str:
        """``P:workspace:REF``: the work item's branch and draft pull request (hash)."""
        return self.key("workspace", ref)

    def alias(self, repository: str, number: int) -> str:
        """``P:alias:OWNER/REPO#N``: the work item pull request N belongs to."""
        return self.key("alias", f"{repository}#{number}")

    def turn_log(self, ref: str) -> str:
        """``P:turn-log:REF``: the tail of the work item's last turn log."""
        return self.key("turn-log", ref)


@dataclass(frozen=True)
class TurnContext:
    """What the runner needs of the work item beyond the order (from the delivery that
    ordered it; no untrusted text but the title, which only becomes a branch slug).

    Attributes:
        repository: ``OWNER/REPO``.
        number: the issue (or pull request) number.
        title: its title.
        default_branch: the repository's default branch.
        installation_id: the GitHub App installation, or ``None`` (token mode, local).
        branch: the work item's branch when one exists already.
        kind: ``"issue"`` or ``"pull_request"``: what the work item is (its draft pull
            request closes an issue, ``Closes #N``, and only refers to a pull request).
    """

    repository: str
    number: int
    title: str
    default_branch: str
    installation_id: int | None = None
    branch: str | None = None
    kind: str = "issue"

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(vars(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TurnContext:
        """Inverse of :meth:`to_dict`.

        Raises:
            KeyError, TypeError, ValueError: a malformed record.
        """
        inst = data.get("installation_id")
        return cls(str(data["repository"]), int(data["number"]), str(data.get("title") or ""),
                   str(data.get("default_branch") or "main"),
                   int(inst) if inst is not None else None, data.get("branch"),
                   str(data.get("kind") or "issue"))


def record_key(order: TurnOrder) -> str:
    """The turn record (and turn lock) a turn is kept under: the work item's ref for the
    node's own turns, ``<ref>/task/<id>`` for a task of a plan (its tasks run at once)."""
    return order.ref if order.task_id is None else f"{order.ref}/task/{order.task_id}"


def is_continuation(order: TurnOrder, status: str = QUEUED) -> bool:
    """Whether ``order`` resumes work already under way (taken before first turns).

    Args:
        order: the turn.
        status: the record's status it is queued with (``INTERRUPTED``: requeued).

    Returns:
        True for a repair, a changes-requested turn or an interrupted one: a turn
        after the first of its visit, one resuming a harness session, one with
        feedback, or one queued again.
    """
    return (status == INTERRUPTED or order.number > 1 or order.resume is not None
            or bool(order.feedback))


def runner_id(host: str, home_dir: str, explicit: str | None = None) -> str:
    """The id a runner's affinity records and liveness key name it by: ``explicit``
    (``THE_LOOP_RUNNER_ID``) or ``HOST-DIGEST``, the digest of its ``runner.homeDir``
    (where its sessions are: every process of one runner pod shares it; two runners on
    one host with their own HOMEs differ). No I/O."""
    if explicit:
        return explicit
    return f"{host}-{hashlib.sha256(home_dir.encode()).hexdigest()[:8]}"


def job_id(order_id: str, prefix: str) -> str:
    """The RQ job id of turn ``order_id`` of the deployment whose keys start ``prefix``
    (RQ ids are free text; a digest keeps them short and free of ``:``). RQ keeps a
    job's hash at ``rq:job:ID`` whatever the-loop's prefix, so the prefix is in the
    digest: two deployments sharing one Redis never take or delete each other's jobs."""
    return "turn-" + hashlib.sha256(f"{prefix}\n{order_id}".encode()).hexdigest()[:32]


def report_id(order_id: str, attempt: int) -> str:
    """The delivery id of the report of ``order_id``'s ``attempt`` (deterministic, so a
    report sent twice is one delivery; ``[A-Za-z0-9-]`` like GitHub's GUIDs)."""
    digest = hashlib.sha256(f"{order_id}\n{attempt}".encode()).hexdigest()[:32]
    return f"turn-{digest}"


class TurnRecords:
    """The runner's Redis records (see the module docstring).

    Args:
        connection: Redis client (decoded responses off: values are bytes).
        keys: the deployment's turn key names.
        queue: the RQ queue of turns (``RunnerSettings.queue``).
        job_timeout: RQ timeout of a turn job, seconds (the turn's own limits are
            shorter; this only bounds a runner that hangs).
    """

    def __init__(self, connection: redis.Redis, keys: TurnKeys, queue: str, *,
                 job_timeout: int = 4 * 3600) -> None:
        self.redis = connection
        self.keys = keys
        self.queue = Queue(queue, connection=connection)
        self.job_timeout = job_timeout
        self._slot = connection.register_script(_SLOT_SCRIPT)
        self._fair = connection.register_script(_FAIR_SCRIPT)
        self._pick = connection.register_script(_PICK_SCRIPT)

    # -- orders -------------------------------------------------------------------------

    def order(self, order: TurnOrder, context: TurnContext) -> bool:
        """Queue ``order`` unless it was queued before.

        Returns:
            True if queued now.

        Raises:
            redis.RedisError: Redis unreachable; nothing was written.
        """
        if self.redis.exists(self.keys.turn_ordered(order.id)):
            return False
        if context.branch is None:
            # The branch is named once, from the title the first order saw; later orders
            # (a turn report carries no title) keep it.
            branch = branch_name(context.number, context.title)
            self.redis.hsetnx(self.keys.workspace(order.ref), "branch", branch)
            context = replace(context, branch=_text(
                self.redis.hget(self.keys.workspace(order.ref), "branch") or branch))
        self._enqueue(order, context, attempt=1)
        log.info("turn %s ordered", order.id)
        return True

    def _enqueue(self, order: TurnOrder, context: TurnContext, *, attempt: int,
                 status: str = QUEUED) -> None:
        record = record_key(order)
        job = self.queue.create_job(
            TURN_FUNC, args=(record, order.id),
            job_id=f"{job_id(order.id, self.keys.prefix)}-{attempt}",
            timeout=self.job_timeout, result_ttl=0, failure_ttl=SEVEN_DAYS,
            description=f"the-loop turn {order.number} of {record} at {order.node}")
        key = self.keys.turn(record)
        with self.redis.pipeline() as pipe:
            # RQ opens the MULTI itself: its job goes first, the records join it.
            continuation = is_continuation(order, status)
            self._push(job, pipe, front=continuation, fair=not continuation,
                       installation=context.installation_id)
            pipe.set(self.keys.turn_ordered(order.id), "1", ex=SEVEN_DAYS)
            pipe.hdel(key, "host", "pid", "pgid", "started_at", "lease_until", "ended_at",
                      "detail", "cancel", "warnings", "runner")
            pipe.hset(key, mapping={
                "id": order.id, "ref": order.ref, "node": order.node,
                "number": order.number, "max_turns": order.max_turns, "status": status,
                "attempt": attempt, "session_id": order.session_id,
                "order": json.dumps(order.to_dict()),
                "context": json.dumps(context.to_dict()), "queued_at": time.time()})
            pipe.sadd(self.keys.turns, record)
            pipe.execute()

    def requeue(self, ref: str, *, reason: str) -> bool:
        """Queue ``ref``'s recorded turn again (an interrupted turn; ``the-loop sessions
        resume``); the next attempt resumes the same session.

        Returns:
            False when ``ref`` has no turn that may run again (none, or it ended).
        """
        record = self.get(ref)
        if record is None or record.get("status") not in (QUEUED, INTERRUPTED, RUNNING):
            return False
        order = TurnOrder.from_dict(json.loads(record["order"]))
        context = TurnContext.from_dict(json.loads(record["context"]))
        attempt = int(record.get("attempt") or 1) + 1
        self._enqueue(order, context, attempt=attempt, status=INTERRUPTED)
        self.redis.hset(self.keys.turn(ref), "detail", reason)
        log.warning("turn %s queued again (attempt %d): %s", order.id, attempt, reason)
        return True

    def retire(self, ref: str, repository: str, number: int) -> None:
        """The work item is done: queue the removal of its workspace on the runner
        (whose disk holds it); once per work item.

        Raises:
            redis.RedisError: Redis unreachable.
        """
        if not self.redis.set(self.keys.turn_retired(ref), "1", nx=True, ex=SEVEN_DAYS):
            return
        job = self.queue.create_job(
            CLEANUP_FUNC, args=(ref, repository, number),
            job_id="cleanup-" + hashlib.sha256(ref.encode()).hexdigest()[:32],
            result_ttl=0, failure_ttl=SEVEN_DAYS, timeout=600,
            description=f"the-loop: remove the workspace of {ref}")
        with self.redis.pipeline() as pipe:
            self.queue.enqueue_job(job, pipeline=pipe)
            pipe.hset(self.keys.job_refs, job.id, ref)  # the holder of its disk runs it
            pipe.execute()

    def enqueue_again(self, ref: str, *, front: bool = False) -> bool:
        """Queue ``ref``'s recorded turn's job again as it is (same attempt, status and
        flags: a turn waiting for a slot or for the work item's lock). A first turn goes
        to the end of its installation's line; a continuation to the queue's end, or
        with ``front`` to its front.

        Args:
            ref: the turn record's key.
            front: the turn waited for its work item's lock, which the previous turn's
                runner is about to release: a continuation keeps its place at the front.
                Not for a turn without a slot: at the front it would hold the head while
                its installation is at its cap, costing every free runner a wait.

        Returns:
            False when there is no queued or interrupted turn to queue.
        """
        record = self.get(ref)
        if record is None or record.get("status") not in (QUEUED, INTERRUPTED):
            return False
        order = TurnOrder.from_dict(json.loads(record["order"]))
        attempt = int(record.get("attempt") or 1)
        job = self.queue.create_job(
            TURN_FUNC, args=(ref, order.id),
            job_id=f"{job_id(order.id, self.keys.prefix)}-{attempt}",
            timeout=self.job_timeout, result_ttl=0, failure_ttl=SEVEN_DAYS,
            description=f"the-loop turn {order.number} of {ref} at {order.node}")
        context = TurnContext.from_dict(json.loads(record["context"]))
        with self.redis.pipeline() as pipe:
            continuation = is_continuation(order, record["status"])
            self._push(job, pipe, front=front and continuation, fair=not continuation,
                       installation=context.installation_id)
            pipe.execute()
        return True

    def _push(self, job: Any, pipe: Any, *, front: bool, fair: bool,
              installation: int | None) -> None:
        """Put RQ ``job`` on the turns queue in ``pipe`` (its MULTI).

        Args:
            job: the RQ job.
            pipe: the pipeline RQ opens the MULTI of.
            front: at the queue's front (a continuation: its session, and the model
                provider's prompt cache, is warm, and a reviewer waits on it, not on
                strangers).
            fair: a first turn: behind the continuations, oldest first per installation
                and round-robin across installations (:data:`_FAIR_SCRIPT`, in the same
                MULTI: RQ pushes it at the tail, the script moves it), so one busy
                installation does not starve the others.
            installation: the turn's installation; ``None`` (token mode) counts as
                installation 0, as the slots do.
        """
        self.queue.enqueue_job(job, pipeline=pipe, at_front=front)
        pipe.hset(self.keys.job_refs, job.id, job.args[0])
        if fair:
            self._fair(keys=[self.queue.key, self.keys.rounds],
                       args=[job.id, installation if installation is not None else 0],
                       client=pipe)

    def update_if(self, ref: str, order_id: str, **fields: Any) -> bool:
        """Set fields of ``ref``'s turn record only while it is turn ``order_id``'s (a
        late writer never overwrites the next turn's record).

        Returns:
            whether it was written.
        """
        key = self.keys.turn(ref)
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    if _text(pipe.hget(key, "id") or b"") != order_id:
                        pipe.reset()
                        return False
                    pipe.multi()
                    pipe.hset(key, mapping={k: _field(v) for k, v in fields.items()})
                    pipe.execute()
                    return True
                except redis.WatchError:
                    continue

    # -- records ------------------------------------------------------------------------

    def get(self, ref: str) -> dict[str, str] | None:
        """``ref``'s turn record as text fields, or ``None``."""
        raw = self.redis.hgetall(self.keys.turn(ref))
        if not raw:
            return None
        return {_text(k): _text(v) for k, v in raw.items()}

    def refs(self) -> list[str]:
        """Every work item with a turn record, sorted."""
        return sorted(_text(r) for r in self.redis.smembers(self.keys.turns))

    def update(self, ref: str, **fields: Any) -> None:
        """Set fields of ``ref``'s turn record."""
        self.redis.hset(self.keys.turn(ref), mapping={k: _field(v) for k, v in fields.items()})

    def request_cancel(self, ref: str) -> bool:
        """Ask the runner to stop ``ref``'s live turn (it reports it ``cancelled``).

        Returns:
            False when no turn is queued or running.
        """
        record = self.get(ref)
        if record is None or record.get("status") not in (QUEUED, RUNNING, INTERRUPTED):
            return False
        self.update(ref, cancel="1")
        return True

    # -- affinity: the runner that holds a work item's session -------------------------

    def pick(self, runner: str, connection: redis.Redis | None = None,
             queue_key: str | None = None) -> str | None:
        """Take the first waiting job of the turns queue that ``runner`` may run (see the
        module docstring, :data:`_PICK_SCRIPT`); it is moved to RQ's intermediate list,
        as RQ's own dequeue does.

        Args:
            runner: this runner's id (:func:`runner_id`).
            connection: the client to run it on (the worker's own; default ours).
            queue_key: the RQ queue's key (default the turns queue's).

        Returns:
            the RQ job id, or ``None`` when no waiting job is this runner's.

        Raises:
            redis.RedisError: Redis unreachable.
        """
        key = queue_key or self.queue.key
        job = self._pick(keys=[key, f"{key}:intermediate", self.keys.job_refs],
                         args=[runner, self.keys.affinity(), self.keys.runner_alive()],
                         client=connection or self.redis)
        return _text(job) if job else None

    def hold(self, ref: str, runner: str) -> None:
        """Record that ``runner`` runs a turn of ``ref``: its session and workspace are on
        that runner's disk, so ``ref``'s next turns wait for it while it lives."""
        self.redis.set(self.keys.affinity(ref), runner, ex=SEVEN_DAYS)

    def holder(self, ref: str) -> str | None:
        """The runner id holding ``ref``'s session, or ``None``."""
        value = self.redis.get(self.keys.affinity(ref))
        return _text(value) if value else None

    def alive(self, runner: str, ttl: int) -> None:
        """Runner ``runner`` lives for ``ttl`` more seconds (its heartbeat)."""
        self.redis.set(self.keys.runner_alive(runner), "1", ex=max(1, int(ttl)))

    def gone(self, runner: str) -> None:
        """Runner ``runner`` stops: its work items' turns are anyone's from now on."""
        self.redis.delete(self.keys.runner_alive(runner))

    def is_alive(self, runner: str) -> bool:
        """Whether runner ``runner``'s liveness key exists."""
        return bool(self.redis.exists(self.keys.runner_alive(runner)))

    # -- the live turn and the slots ----------------------------------------------------

    def lock(self, ref: str, lease: int) -> str | None:
        """Take ``ref``'s turn lock for ``lease`` seconds; its token, or ``None`` when
        another turn of the work item is live."""
        token = uuid.uuid4().hex
        ok = self.redis.set(self.keys.turn_lock(ref), token, nx=True, ex=lease)
        return token if ok else None

    def renew(self, ref: str, token: str, lease: int) -> bool:
        """Extend the lock (a heartbeat); False when it is no longer ours."""
        key = self.keys.turn_lock(ref)
        if _text(self.redis.get(key) or b"") != token:
            return False
        self.redis.expire(key, lease)
        self.update(ref, lease_until=time.time() + lease)
        return True

    def unlock(self, ref: str, token: str) -> None:
        """Release the lock if it is still ours."""
        key = self.keys.turn_lock(ref)
        if _text(self.redis.get(key) or b"") == token:
            self.redis.delete(key)

    def take_slot(self, turn_id: str, installation: int | None, lease: int, *,
                  limit: int, per_installation: int) -> bool:
        """Take a slot under the global cap and the installation's (both or neither);
        slots expire ``lease`` seconds after the last heartbeat."""
        now = time.time()
        inst = self.keys.runner_slots(installation if installation is not None else 0)
        return bool(self._slot(keys=[self.keys.runner_slots(), inst],
                               args=[turn_id, now, now + lease, limit, per_installation]))

    def release_slot(self, turn_id: str, installation: int | None) -> None:
        """Give the slots back."""
        inst = self.keys.runner_slots(installation if installation is not None else 0)
        with self.redis.pipeline() as pipe:
            pipe.zrem(self.keys.runner_slots(), turn_id)
            pipe.zrem(inst, turn_id)
            pipe.execute()

    # -- the work item's branch and pull request -----------------------------------------

    def workspace(self, ref: str) -> dict[str, str]:
        """``{branch, repository, pull, pull_body}`` of ``ref`` (empty before its first
        turn pushed; ``pull_body``: see :meth:`remember_pull_body`)."""
        raw = self.redis.hgetall(self.keys.workspace(ref))
        return {_text(k): _text(v) for k, v in raw.items()}

    def remember_workspace(self, ref: str, repository: str, branch: str,
                           pull: int | None) -> None:
        """Record the work item's branch and draft pull request, and make deliveries
        about that pull request the work item's (:meth:`owner_of`)."""
        with self.redis.pipeline() as pipe:
            pipe.hset(self.keys.workspace(ref), mapping={"branch": branch,
                                                         "repository": repository})
            if pull is not None:
                pipe.hset(self.keys.workspace(ref), "pull", pull)
                pipe.set(self.keys.alias(repository, pull), ref)
            pipe.execute()

    def remember_pull_body(self, ref: str, digest: str) -> None:
        """Record the digest of what the worker last wrote into the draft pull request's
        body (its ``pull_body`` field: :mod:`workers.pull_body` skips an unchanged one)."""
        self.redis.hset(self.keys.workspace(ref), "pull_body", digest)

    def owner_of(self, repository: str, number: int) -> str | None:
        """The work item whose draft pull request is ``repository#number``, or ``None``."""
        value = self.redis.get(self.keys.alias(repository, number))
        return _text(value) if value else None

    # -- reports ------------------------------------------------------------------------

    def report(self, inbox: DeliveryQueue, order: TurnOrder, context: TurnContext,
               ended: TurnEnded, *, attempt: int, branch: str | None) -> str:
        """Put the report of ``order``'s end into the work item's inbox (a delivery the
        worker processes in order with the work item's others).

        Returns:
            the report's delivery id.

        Raises:
            redis.RedisError: Redis unreachable (the caller retries; the id is the same).
        """
        delivery_id = report_id(order.id, attempt)
        turn = {**ended.to_dict(), "branch": branch}
        payload = {
            "action": "completed",
            "repository": {"full_name": context.repository,
                           "default_branch": context.default_branch},
            "issue": {"number": context.number},
            "sender": RUNNER_SENDER,
            "turn": turn,
        }
        if context.installation_id is not None:
            payload["installation"] = {"id": context.installation_id}
        body = json.dumps(payload).encode()
        inbox.put(DeliveryRecord(
            delivery_id=delivery_id, event=TURN_EVENT, action="completed",
            received_at=time.time(), installation_id=context.installation_id,
            repository=context.repository, work_item=order.ref, body=body))
        return delivery_id


class RunnerWork:
    """The worker's :class:`graph.work.AgentWork`: orders go to the runner's queue.

    Args:
        records: the turn records.
        context: the work item as the ordering delivery shows it.
        max_turns, cost_cap_usd: ``harness.maxTurns`` and ``harness.costCapUsd``.
    """

    def __init__(self, records: TurnRecords, context: TurnContext, *, max_turns: int,
                 cost_cap_usd: float | None) -> None:
        self.records = records
        self.context = context
        self.max_turns = max_turns
        self.cost_cap_usd = cost_cap_usd

    def order(self, order: TurnOrder) -> None:
        """Queue ``order`` (once per id).

        Raises:
            graph.ports.RetryLater: Redis is unreachable.
        """
        try:
            self.records.order(order, self.context)
        except redis.RedisError as exc:
            raise RetryLater(f"the turns queue is unreachable ({type(exc).__name__})",
                             integration="runner", op="order-turn") from exc


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _field(value: Any) -> str | int | float:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float | str):
        return value
    return json.dumps(value)
