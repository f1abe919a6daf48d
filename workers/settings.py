"""Worker settings: one frozen object built from the environment at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from graph.context import DEFAULT_ENROLMENT_LABEL, DEFAULT_SPEC_DIR


class SettingsError(ValueError):
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
            ``THE_LOOP_LOCK_TIMEOUT`` (default 300).
        config_ttl: seconds repository config files are cached, ``THE_LOOP_CONFIG_TTL``
            (default 300; a push to the default branch also refreshes them).
        bot_logins: ``THE_LOOP_BOT_LOGINS``, comma-separated logins whose events are the
            App's own (e.g. ``the-loop[bot]``).
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

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        """Build settings from ``env`` (default ``os.environ``).

        Raises:
            SettingsError: naming the variable and the expected form.
        """
        env = os.environ if env is None else env

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

        spec_dir = env.get("THE_LOOP_SPEC_DIR") or DEFAULT_SPEC_DIR
        try:
            spec_dir.format(number=1)
        except (KeyError, IndexError, ValueError):
            raise SettingsError(
                "THE_LOOP_SPEC_DIR may only use the placeholder {number}, e.g. specs/{number}"
            ) from None
        return cls(
            redis_url=env.get("REDIS_URL") or cls.redis_url,
            queue=env.get("THE_LOOP_QUEUE") or cls.queue,
            prefix=env.get("THE_LOOP_REDIS_PREFIX") or cls.prefix,
            graph_path=env.get("THE_LOOP_GRAPH") or None,
            enrolment_label=env.get("THE_LOOP_ENROLMENT_LABEL") or DEFAULT_ENROLMENT_LABEL,
            spec_dir=spec_dir,
            lock_timeout=integer("THE_LOOP_LOCK_TIMEOUT", 300),
            config_ttl=integer("THE_LOOP_CONFIG_TTL", 300),
            bot_logins=frozenset(
                s.strip().casefold() for s in env.get("THE_LOOP_BOT_LOGINS", "").split(",")
                if s.strip()
            ),
        )
