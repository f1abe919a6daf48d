"""The receiver's and the worker's settings: Redis, the RQ queue, the inbox of
deliveries and the worker's state (:class:`ReceiverSettings`, :class:`WorkerSettings`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from foundation.config.repository import DEFAULT_SPEC_DIR
from graph.context import DEFAULT_ENROLMENT_LABEL
from graph.signing import Signer

# GitHub caps webhook payloads at 25 MB ("Webhook events and payloads" docs); 25 MiB
# leaves headroom for form encoding.
DEFAULT_MAX_BODY_BYTES = 25 * 1024 * 1024
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

ENV_SECRET = "THE_LOOP_WEBHOOK_SECRET"

#: How long a done work item's event log is kept (``THE_LOOP_RETENTION``): 90 days.
DEFAULT_RETENTION = 90 * 86400.0

ENV_SENTINELS = "THE_LOOP_REDIS_SENTINELS"
ENV_SENTINEL_MASTER = "THE_LOOP_REDIS_SENTINEL_MASTER"
ENV_SENTINEL_PASSWORD = "THE_LOOP_REDIS_SENTINEL_PASSWORD"
ENV_SENTINEL_USERNAME = "THE_LOOP_REDIS_SENTINEL_USERNAME"
ENV_RECEIVER_REPLICAS = "THE_LOOP_RECEIVER_REPLICAS"
ENV_RECEIVER_REPLICAS_TIMEOUT = "THE_LOOP_RECEIVER_REPLICAS_TIMEOUT_MS"
#: Milliseconds the receiver's ``WAIT`` waits for its replicas by default.
DEFAULT_REPLICAS_TIMEOUT_MS = 500


@dataclass(frozen=True, slots=True)
class RedisSentinel:
    """Where the Redis primary is found when Redis Sentinel manages it
    (``THE_LOOP_REDIS_SENTINELS`` and ``THE_LOOP_REDIS_SENTINEL_MASTER``); the primary's
    own password, database and TLS come from ``REDIS_URL`` (its host and port are the
    Sentinels' answer). Used by :func:`foundation.redis.client.connect`.

    Attributes:
        hosts: the Sentinels' ``(host, port)``, in the order given.
        master: the name the Sentinels monitor the primary under (``sentinel monitor
            NAME ...``).
        username, password: the Sentinels' own credentials
            (``THE_LOOP_REDIS_SENTINEL_USERNAME`` / ``THE_LOOP_REDIS_SENTINEL_PASSWORD``,
            Sentinel's ``requirepass``/ACL), ``None`` when they need none; hidden from repr.
    """

    hosts: tuple[tuple[str, int], ...]
    master: str
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for repr and messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


@dataclass(frozen=True, slots=True)
class ReceiverSettings:
    """What the webhook receiver needs.

    Attributes:
        secrets: accepted webhook secrets as bytes, most recent first as configured
            (several during rotation). Never shown in repr. Empty outside the receiver
            when ``THE_LOOP_WEBHOOK_SECRET`` is unset.
        redis_url: Redis URL for the queue (``redis://host:port/db``); a password in it
            is masked in repr.
        queue_name: RQ queue name the deliveries go to.
        redis_prefix: prefix of the-loop's own Redis keys (``{prefix}:delivery:...``).
        max_body_bytes: largest accepted request body, in bytes.
        sentinel: the Sentinels that find the Redis primary, or ``None``: ``redis_url``'s
            host is the primary (:class:`RedisSentinel`).
        replicas: ``THE_LOOP_RECEIVER_REPLICAS``: how many replicas must acknowledge a
            delivery's write (Redis ``WAIT``) before it is answered 202 (default 0: the
            primary's own acknowledgement).
        replicas_timeout_ms: ``THE_LOOP_RECEIVER_REPLICAS_TIMEOUT_MS``: how long that
            ``WAIT`` waits, milliseconds (default 500); fewer acknowledgements by then
            answer 503.

    ``redis_url``, ``queue_name`` and ``redis_prefix`` are the values the worker gets
    too (:class:`WorkerSettings`): :meth:`Settings.from_env` reads them once.
    """

    secrets: tuple[bytes, ...] = field(repr=False)
    redis_url: str = field(default=DEFAULT_REDIS_URL, repr=False)
    queue_name: str = "the-loop"
    redis_prefix: str = "the-loop"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    sentinel: RedisSentinel | None = None
    replicas: int = 0
    replicas_timeout_ms: int = DEFAULT_REPLICAS_TIMEOUT_MS

    def __repr__(self) -> str:
        return (
            f"ReceiverSettings(secrets=<{len(self.secrets)} hidden>, "
            f"redis_url={redact_url(self.redis_url)!r}, queue_name={self.queue_name!r}, "
            f"redis_prefix={self.redis_prefix!r}, max_body_bytes={self.max_body_bytes}, "
            f"sentinel={self.sentinel!r}, replicas={self.replicas}, "
            f"replicas_timeout_ms={self.replicas_timeout_ms})"
        )


#: How long a done work item's event log is kept (``THE_LOOP_RETENTION``): 90 days.
DEFAULT_RETENTION = 90 * 86400.0


@dataclass(frozen=True)
class WorkerSettings:
    """What the RQ worker (and the commands working on its state) need.

    Attributes:
        redis_url: ``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
        sentinel: the Sentinels that find the Redis primary (:class:`RedisSentinel`), or
            ``None``: ``redis_url``'s host is the primary.
        queue: RQ queue name, ``THE_LOOP_QUEUE`` or ``queue.name`` (default ``the-loop``).
        prefix: key prefix of the-loop's own Redis keys, ``THE_LOOP_REDIS_PREFIX`` or
            ``state.prefix``.
        graph_path: ``THE_LOOP_GRAPH`` (default: the shipped ``graph/pdlc.yaml``).
        enrolment_label: ``THE_LOOP_ENROLMENT_LABEL`` (default ``the-loop``).
        spec_dir: ``THE_LOOP_SPEC_DIR`` template (default ``specs/{number}``).
        lock_timeout: seconds a work item lock lives if its holder dies,
            ``THE_LOOP_LOCK_TIMEOUT`` or ``state.lockTimeout`` (default 300). A live holder
            extends it every third of that; a worker's reaper takes back the lock of a
            dead ``the-loop worker`` as soon as that worker is known dead
            (``worker_ttl``), so this is a backstop.
        config_ttl: seconds repository config files are cached, ``THE_LOOP_CONFIG_TTL``
            or ``state.configTtl`` (default 300; a push to the default branch also
            refreshes them).
        bot_logins: ``THE_LOOP_BOT_LOGINS``, comma-separated logins whose events are the
            App's own (e.g. ``the-loop[bot]``): they never drive a gate, and their marked
            comments are the-loop's own besides the App's bot (learned from ``GET /app``;
            :class:`workers.identities.Accounts`).
        reactions: ``webhooks.ghWebhook.routing.reactions`` from cli-config.yaml:
            ``{enabled, started, completed, error}``.
        worker_ttl: seconds a ``the-loop worker`` that stopped heartbeating is still
            taken for alive, ``THE_LOOP_WORKER_TTL`` (default 30); after that its work
            item locks and its job are taken back and the job requeued.
        delivery_attempts: how many times one delivery is tried (a worker killed while
            handling it counts) before it is parked as a dead letter,
            ``THE_LOOP_DELIVERY_ATTEMPTS`` (default 5).
        delivery_backoff: seconds to wait before each retry, ``THE_LOOP_DELIVERY_BACKOFF``
            (comma-separated; the last repeats; default ``10,60,300,900``).
        reap_interval: seconds between the reaper's rounds (heartbeat, due retries,
            abandoned jobs), ``THE_LOOP_REAP_INTERVAL`` (default 5).
        dispatch_budget: seconds one wake-up job keeps taking work items off the ready
            list before it queues another wake-up and returns, so RQ's own duties (and
            a warm shutdown) get their turn, ``THE_LOOP_DISPATCH_BUDGET`` (default 10;
            keep it well under the wake-up job's RQ timeout, 300 s).
        reconcile_interval: seconds between two runs of the reconciler, which asks GitHub
            to redeliver the App's deliveries that failed or never reached Redis
            (:mod:`workers.reconcile`; one worker at a time), ``THE_LOOP_RECONCILE_INTERVAL``
            (a duration: ``10m``, ``1h`` or whole seconds; default 10 minutes).
        state_key: ``THE_LOOP_STATE_KEY``, the key of the local state files' seals
            (HMAC-SHA256; :class:`the_loop.stores.FileStateStore`), or ``None``: an
            unkeyed SHA-256 digest, which catches corruption but not a forger. A secret:
            hidden from repr.
        public_url: ``THE_LOOP_PUBLIC_URL`` (:class:`DashboardSettings`), so the status
            comment and the check run link to the work item's dashboard page; ``None``:
            no link.
        retention: seconds a done work item's event log is kept before it expires,
            ``THE_LOOP_RETENTION`` (a duration: ``90d``, ``72h``, ``30m``, ``3600s`` or
            whole seconds; default 90 days). ``the-loop state export`` saves one first.
        signer: the review-record signing key from ``THE_LOOP_SIGNING_KEY`` (PEM) or
            ``THE_LOOP_SIGNING_KEY_FILE`` (:mod:`foundation.signing`), a handle that never
            shows the key; ``None``: records are written unsigned and no check counts
            them.
    """

    redis_url: str = field(default=DEFAULT_REDIS_URL, repr=False)
    sentinel: RedisSentinel | None = None
    queue: str = "the-loop"
    prefix: str = "the-loop"
    graph_path: str | None = None
    enrolment_label: str = DEFAULT_ENROLMENT_LABEL
    spec_dir: str = DEFAULT_SPEC_DIR
    lock_timeout: int = 300
    config_ttl: int = 300
    bot_logins: frozenset[str] = frozenset()
    reactions: tuple[tuple[str, object], ...] = (
        ("enabled", True), ("started", "eyes"), ("completed", "hooray"), ("error", "confused"))
    worker_ttl: int = 30
    delivery_attempts: int = 5
    delivery_backoff: tuple[float, ...] = (10.0, 60.0, 300.0, 900.0)
    reap_interval: float = 5.0
    dispatch_budget: float = 10.0
    reconcile_interval: float = 600.0
    state_key: str | None = field(default=None, repr=False)
    public_url: str | None = None
    retention: float = DEFAULT_RETENTION
    signer: Signer | None = field(default=None, repr=False, compare=False)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        steps = self.delivery_backoff or (0.0,)
        return steps[min(max(attempt, 1), len(steps)) - 1]
