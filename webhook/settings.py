"""Receiver settings, read once from the environment at start-up.

The environment is an argument (``from_env(env)``) so tests pass a dict and no global
state is read behind their back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from graph.errors import LoopError

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ReceiverSettings", "SettingsError"]

# GitHub caps webhook payloads at 25 MB ("Webhook events and payloads" docs); 25 MiB
# leaves headroom for form encoding.
DEFAULT_MAX_BODY_BYTES = 25 * 1024 * 1024
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_QUEUE = "the-loop"
DEFAULT_PREFIX = "the-loop"


class SettingsError(LoopError, ValueError):
    """A setting is missing or invalid; the message names the variable and the fix.

    Messages never contain secret values.
    """


def _redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (for repr and messages)."""
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
    """Settings of the webhook receiver.

    Attributes:
        secrets: accepted webhook secrets as bytes, most recent first as configured
            (several during rotation). Never shown in repr.
        redis_url: Redis URL for the queue (``redis://host:port/db``); a password in it
            is masked in repr.
        queue_name: RQ queue name the deliveries go to.
        redis_prefix: prefix of the-loop's own Redis keys (``{prefix}:delivery:...``).
        max_body_bytes: largest accepted request body, in bytes.
    """

    secrets: tuple[bytes, ...] = field(repr=False)
    redis_url: str = field(default=DEFAULT_REDIS_URL, repr=False)
    queue_name: str = DEFAULT_QUEUE
    redis_prefix: str = DEFAULT_PREFIX
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __repr__(self) -> str:
        return (
            f"ReceiverSettings(secrets=<{len(self.secrets)} hidden>, "
            f"redis_url={_redact_url(self.redis_url)!r}, queue_name={self.queue_name!r}, "
            f"redis_prefix={self.redis_prefix!r}, max_body_bytes={self.max_body_bytes})"
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ReceiverSettings:
        """Build settings from environment variables.

        Args:
            env: the environment, e.g. ``os.environ`` or a dict in tests. Variables:

                - ``THE_LOOP_WEBHOOK_SECRET`` (required): the GitHub App's webhook
                  secret; a comma-separated list accepts several during rotation.
                  Whitespace around entries is stripped and empty entries ignored.
                - ``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
                - ``THE_LOOP_QUEUE`` (default ``the-loop``): RQ queue name.
                - ``THE_LOOP_REDIS_PREFIX`` (default ``the-loop``): key prefix.
                - ``THE_LOOP_MAX_BODY_BYTES`` (default 26214400 = 25 MiB; GitHub caps
                  payloads at 25 MB, "Webhook events and payloads" docs).

        Returns:
            The settings.

        Raises:
            SettingsError: a required variable is missing/empty or a value is invalid;
                the message names the variable and how to set it, never a secret.
        """
        raw_secret = env.get("THE_LOOP_WEBHOOK_SECRET") or ""
        secrets = tuple(s.strip().encode("utf-8") for s in raw_secret.split(",") if s.strip())
        if not secrets:
            raise SettingsError(
                "THE_LOOP_WEBHOOK_SECRET is not set: set it to the webhook secret of the "
                "GitHub App (App settings > Webhook secret), e.g. "
                "`export THE_LOOP_WEBHOOK_SECRET=...`; during rotation list the new and "
                "the old secret separated by a comma"
            )
        redis_url = env.get("REDIS_URL") or DEFAULT_REDIS_URL
        if not redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise SettingsError(
                "REDIS_URL must be a redis://, rediss:// or unix:// URL, "
                "e.g. REDIS_URL=redis://127.0.0.1:6379/0"
            )
        # cli-config.yaml ($THE_LOOP_CONFIG) gives the defaults; the environment wins.
        from the_loop.config.deployment import cli_config_from_env
        from the_loop.config.loader import ConfigFileError

        try:
            deployment = cli_config_from_env(env)
        except ConfigFileError as exc:
            raise SettingsError(str(exc)) from None
        queue_name = _token(env, "THE_LOOP_QUEUE", deployment.queue.name or DEFAULT_QUEUE)
        prefix = _token(env, "THE_LOOP_REDIS_PREFIX", deployment.state.prefix or DEFAULT_PREFIX)
        raw_max = env.get("THE_LOOP_MAX_BODY_BYTES") or str(DEFAULT_MAX_BODY_BYTES)
        try:
            max_body = int(raw_max)
        except ValueError:
            max_body = 0
        if max_body <= 0:
            raise SettingsError(
                "THE_LOOP_MAX_BODY_BYTES must be a positive integer number of bytes, "
                f"e.g. THE_LOOP_MAX_BODY_BYTES={DEFAULT_MAX_BODY_BYTES} (25 MiB)"
            )
        return cls(
            secrets=secrets,
            redis_url=redis_url,
            queue_name=queue_name,
            redis_prefix=prefix,
            max_body_bytes=max_body,
        )


def _token(env: Mapping[str, str], name: str, default: str) -> str:
    value = (env.get(name) or default).strip()
    # Used in Redis key names: keep out whitespace and glob characters.
    if not value or any(c.isspace() or c in "*?[]{}" for c in value):
        raise SettingsError(
            f"{name} must be a non-empty name without spaces or *?[]{{}}, e.g. {name}={default}"
        )
    return value
