"""Worker settings: one frozen object built from the environment at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from graph.context import DEFAULT_ENROLMENT_LABEL
from graph.errors import LoopError
from the_loop.config.repository import DEFAULT_SPEC_DIR


class SettingsError(LoopError, ValueError):
    """A setting has a bad value; the message names the environment variable and the fix."""


@dataclass(frozen=True)
class WorkerSettings:
    """Settings of the RQ worker side.

    Attributes:
        redis_url: ``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
        queue: RQ queue name, ``THE_LOOP_QUEUE`` (default ``the-loop``).
        prefix: key prefix of the-loop's own Redis keys, ``THE_LOOP_REDIS_PREFIX``.
        graph_path: ``THE_LOOP_GRAPH`` (default: the shipped ``graph/pdlc.yaml``).
        enrolment_label: ``THE_LOOP_ENROLMENT_LABEL`` (default ``the-loop``).
        spec_dir: ``THE_LOOP_SPEC_DIR`` template (default ``specs/{number}``).
        lock_timeout: seconds a work item lock lives if its holder dies,
            ``THE_LOOP_LOCK_TIMEOUT`` (default 300). A live holder extends it every third
            of that; a worker's reaper takes back the lock of a dead ``the-loop worker``
            as soon as that worker is known dead (``worker_ttl``), so this is a backstop.
        config_ttl: seconds repository config files are cached, ``THE_LOOP_CONFIG_TTL``
            (default 300; a push to the default branch also refreshes them).
        bot_logins: ``THE_LOOP_BOT_LOGINS``, comma-separated logins whose events are the
            App's own (e.g. ``the-loop[bot]``).
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

    ``cli-config.yaml`` (``$THE_LOOP_CONFIG``) gives defaults for queue and state settings;
    an environment variable, when set, wins.
    """

    redis_url: str = "redis://127.0.0.1:6379/0"
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

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        steps = self.delivery_backoff or (0.0,)
        return steps[min(max(attempt, 1), len(steps)) - 1]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        """Build settings from ``env`` (default ``os.environ``).

        Raises:
            SettingsError: naming the variable and the expected form.
        """
        env = os.environ if env is None else env
        from the_loop.config.deployment import cli_config_from_env
        from the_loop.config.loader import ConfigFileError

        try:
            # cli-config.yaml ($THE_LOOP_CONFIG) gives the defaults; the environment wins.
            deployment = cli_config_from_env(env)
        except ConfigFileError as exc:
            raise SettingsError(str(exc)) from None

        def integer(name: str, default: int) -> int:
            raw = env.get(name)
            if raw in (None, ""):
                return default
            try:
                value = int(raw)
            except ValueError:
                raise SettingsError(f"{name} must be a whole number of seconds") from None
            if value <= 0:
                raise SettingsError(f"{name} must be positive")
            return value

        def seconds(name: str, default: float) -> float:
            raw = env.get(name)
            if raw in (None, ""):
                return default
            try:
                value = float(raw)
            except ValueError:
                raise SettingsError(f"{name} must be a number of seconds") from None
            if not value > 0:
                raise SettingsError(f"{name} must be positive")
            return value

        def backoff(name: str, default: tuple[float, ...]) -> tuple[float, ...]:
            raw = env.get(name)
            if raw in (None, ""):
                return default
            try:
                steps = tuple(float(part) for part in raw.split(",") if part.strip())
            except ValueError:
                raise SettingsError(
                    f"{name} must be comma-separated seconds, e.g. 10,60,300") from None
            if not steps or any(not step >= 0 for step in steps):
                raise SettingsError(f"{name} must list seconds >= 0, e.g. 10,60,300")
            return steps

        spec_dir = env.get("THE_LOOP_SPEC_DIR") or DEFAULT_SPEC_DIR
        try:
            spec_dir.format(number=1)
        except (KeyError, IndexError, ValueError):
            raise SettingsError(
                "THE_LOOP_SPEC_DIR may only use the placeholder {number}, e.g. specs/{number}"
            ) from None
        return cls(
            redis_url=env.get("REDIS_URL") or cls.redis_url,
            queue=env.get("THE_LOOP_QUEUE") or deployment.queue.name,
            prefix=env.get("THE_LOOP_REDIS_PREFIX") or deployment.state.prefix,
            graph_path=env.get("THE_LOOP_GRAPH") or None,
            enrolment_label=env.get("THE_LOOP_ENROLMENT_LABEL") or DEFAULT_ENROLMENT_LABEL,
            spec_dir=spec_dir,
            lock_timeout=integer("THE_LOOP_LOCK_TIMEOUT", deployment.state.lock_timeout),
            config_ttl=integer("THE_LOOP_CONFIG_TTL", deployment.state.config_ttl),
            reactions=tuple(vars(deployment.routing.reactions).items()),
            bot_logins=frozenset(
                s.strip().casefold() for s in env.get("THE_LOOP_BOT_LOGINS", "").split(",")
                if s.strip()
            ),
            worker_ttl=integer("THE_LOOP_WORKER_TTL", 30),
            delivery_attempts=integer("THE_LOOP_DELIVERY_ATTEMPTS", 5),
            delivery_backoff=backoff("THE_LOOP_DELIVERY_BACKOFF", cls.delivery_backoff),
            reap_interval=seconds("THE_LOOP_REAP_INTERVAL", 5.0),
            dispatch_budget=seconds("THE_LOOP_DISPATCH_BUDGET", 10.0),
        )
