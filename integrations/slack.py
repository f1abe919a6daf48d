"""Slack transports: ``sdk`` (a bot token, ``chat.postMessage``) and ``webhook`` (an
incoming webhook URL). Both are built on slack-sdk and implement one operation::

    post-message(channel, text, blocks=None, effect=None) -> {"ok": True, "ts": str | None}

A worker that dies during a post must not post twice on the re-run. The outbox
(:mod:`graph.effects`) records the post ``pending`` before the call; on the re-run:

* ``sdk``: the message carries the effect id in its message metadata (Slack API, "Message
  metadata": ``metadata={"event_type": "the_loop_effect", "event_payload": {"effect":
  ID}}`` on ``chat.postMessage``), and :meth:`SlackSdk.find_effect` reads the channel back
  with ``conversations.history`` (``include_all_metadata=true``, ``oldest`` = the time the
  effect was first recorded, less :data:`CLOCK_SKEW`); a direct message's conversation is
  found with ``conversations.open`` (``users=``). A message found is the post: it is not
  made again. Scopes: ``chat:write``, and to read back ``im:write`` + ``im:history`` (direct
  messages) or ``channels:history``/``groups:history`` (channels).
* ``webhook``: an incoming webhook cannot be read back, so a pending post cannot be
  reconciled. It is at most once (:attr:`SlackWebhook.at_most_once`): a post whose
  outcome is unknown (the worker died, or the connection broke before Slack answered) is
  not made again; one Slack refused with an HTTP answer is (see docs/integrations.md).

Retries are slack-sdk's own retry handlers: connection errors
(``ConnectionErrorRetryHandler``) and 429 rate limits, honouring ``Retry-After``
(:class:`BoundedRateLimitRetryHandler`: slack-sdk's ``RateLimitErrorRetryHandler``, but a
``Retry-After`` longer than ``max_wait`` seconds is not slept in the worker; the call fails
retriable instead).

The token and the webhook URL are secrets: neither appears in ``repr``, an error message or
a log line. slack-sdk logs request URLs and headers at DEBUG, so its clients get a logger
of their own that stops at INFO.
"""

from __future__ import annotations

import functools
import logging
import re
import urllib.error
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
)
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.webhook import WebhookClient

from graph.ports import (
    OPERATIONS,
    IntegrationError,
    RateLimited,
    Slack,
    SlackMessage,
    Transport,
    Unavailable,
)
from integrations.retry import MAX_RATE_LIMIT_WAIT

__all__ = ["CLOCK_SKEW", "EVENT_TYPE", "BoundedRateLimitRetryHandler", "SlackSdk",
           "SlackWebhook", "retry_handlers"]

#: The message metadata ``event_type`` of the-loop's posts (Slack API, "Message metadata":
#: an alphanumeric string with underscores); ``event_payload.effect`` is the effect id.
EVENT_TYPE = "the_loop_effect"
#: Seconds before the effect's recorded time that the read-back starts (``oldest``), for
#: the difference between the worker's clock and Slack's.
CLOCK_SKEW = 120.0
#: ``conversations.history`` pages read back at most (200 messages each).
_HISTORY_PAGES = 5


_sdk_log = logging.getLogger("the_loop.integrations.slack.sdk")
_sdk_log.setLevel(logging.INFO)  # slack-sdk's DEBUG lines carry URLs and headers
_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: Slack error codes worth retrying later.
_RETRIABLE = frozenset(
    {"ratelimited", "rate_limited", "internal_error", "service_unavailable", "fatal_error",
     "request_timeout"}
)
_AUTH = frozenset({"invalid_auth", "not_authed", "token_revoked", "token_expired",
                   "account_inactive", "no_permission", "missing_scope"})
_CHANNEL = frozenset({"channel_not_found", "not_in_channel", "is_archived",
                      "channel_is_archived", "user_not_found"})


class BoundedRateLimitRetryHandler(RateLimitErrorRetryHandler):
    """slack-sdk's 429 handler (sleeps ``Retry-After``), but only for waits up to
    ``max_wait`` seconds."""

    def __init__(self, max_retry_count: int = 2, max_wait: float = MAX_RATE_LIMIT_WAIT) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.max_wait = max_wait

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if not super()._can_retry(state=state, request=request, response=response, error=error):
            return False
        assert response is not None
        return retry_after(response) <= self.max_wait


def retry_after(response: HttpResponse) -> float:
    """Seconds of a response's ``Retry-After`` (slack-sdk header values are lists)."""
    for name, value in response.headers.items():
        if name.lower() == "retry-after":
            raw: Any = value[0] if isinstance(value, list | tuple) and value else value
            try:
                return float(raw)
            except (TypeError, ValueError):
                return 1.0
    return 1.0


def retry_handlers(
    max_retries: int = 2, max_wait: float = MAX_RATE_LIMIT_WAIT
) -> list[RetryHandler]:
    """Connection errors and (bounded) rate limits, each retried up to ``max_retries``."""
    return [
        ConnectionErrorRetryHandler(max_retry_count=max_retries),
        BoundedRateLimitRetryHandler(max_retry_count=max_retries, max_wait=max_wait),
    ]


class _SlackBase(Transport):
    """The :class:`graph.ports.Slack` port; ``call`` comes from :class:`graph.ports.Transport`."""

    name = "slack"
    transport = "?"
    operations: frozenset[str] = frozenset(OPERATIONS["slack"])

    @staticmethod
    def _check(channel: Any, text: Any, blocks: Any) -> None:
        if not isinstance(channel, str) or not channel.strip():
            raise _bad("post-message", f"channel must be a channel or user id, got {channel!r}")
        if not isinstance(text, str) or not text.strip():
            raise _bad("post-message", "text must be a non-empty string")
        if blocks is not None and (
            not isinstance(blocks, list | tuple) or not all(isinstance(b, dict) for b in blocks)
        ):
            raise _bad("post-message", "blocks must be a list of Block Kit objects")


class SlackSdk(_SlackBase):
    """``sdk`` transport: ``chat.postMessage`` with a bot token (``xoxb-...``).

    Args:
        token: the bot token (never shown by ``repr``).
        base_url: Slack's Web API root (tests point it at a loopback server).
        timeout: seconds per request.
        max_retries: retries per handler (connection errors, rate limits).
    """

    transport = "sdk"
    #: ``find-effect``: a pending post is looked for before it is made again.
    operations: frozenset[str] = frozenset(OPERATIONS["slack"]) | {"find-effect"}

    def __init__(
        self,
        token: str,
        *,
        base_url: str | None = None,
        timeout: int = 30,
        max_retries: int = 2,
        max_wait: float = MAX_RATE_LIMIT_WAIT,
    ) -> None:
        self._client = WebClient(
            token=token,
            base_url=base_url or WebClient.BASE_URL,
            timeout=timeout,
            logger=_sdk_log,
            retry_handlers=retry_handlers(max_retries, max_wait),
        )

    def __repr__(self) -> str:
        return "SlackSdk(token=<hidden>)"

    def post_message(
        self, channel: str, text: str, blocks: Sequence[dict[str, Any]] | None = None,
        effect: str | None = None,
    ) -> SlackMessage:
        """``post-message``: ``chat.postMessage`` to ``channel`` (a channel id, or a user
        id for a direct message from the bot). ``text`` is the notification fallback when
        ``blocks`` are given.

        Args:
            effect: the outbox's effect id, sent as the message's metadata
                (``event_type`` :data:`EVENT_TYPE`, ``event_payload: {"effect": ID}``;
                Slack API, chat.postMessage ``metadata``) so :meth:`find_effect` knows
                the message again.

        Returns:
            ``{"ok": True, "ts": str}`` -- the message timestamp (its id in the channel).

        Raises:
            IntegrationError: Slack refused it (its error code in ``codes``); retriable
                for rate limits, 5xx and network failures.
        """
        op = "post-message"
        self._check(channel, text, blocks)
        metadata = ({"event_type": EVENT_TYPE, "event_payload": {"effect": effect}}
                    if effect else None)
        response = self._api(op, channel, lambda: self._client.chat_postMessage(
            channel=channel, text=text, blocks=list(blocks) if blocks is not None else None,
            metadata=metadata))
        ts = response.get("ts")
        return {"ok": True, "ts": str(ts) if ts else None}

    def find_effect(self, *, operation: str, effect: str, params: Mapping[str, Any],
                    since: float | None = None) -> dict[str, Any]:
        """The message an earlier attempt of effect ``effect`` posted, if it is there.

        ``conversations.history`` of ``params["channel"]`` (for a user id, the direct
        message conversation ``conversations.open`` returns) from ``since`` (Unix seconds,
        the effect's first recorded time) less :data:`CLOCK_SKEW`, with
        ``include_all_metadata=true``; up to 5 pages of 200 messages, newest first (Slack
        API, conversations.history, conversations.open).

        Returns:
            ``{"found": True, "result": {"ok": True, "ts": str, "reused": True}}``, or
            ``{"found": False}`` (also for an operation other than ``post-message``).

        Raises:
            IntegrationError: Slack refused the read (e.g. ``missing_scope``: the app
                needs ``im:history``/``channels:history`` to read its posts back).
        """
        op = "post-message"
        channel = params.get("channel")
        if operation != op or not isinstance(channel, str) or not channel.strip():
            return {"found": False}
        conversation = channel
        if channel[:1] in ("U", "W"):  # a user id: the bot's direct message conversation
            opened = self._api(op, channel, lambda: self._client.conversations_open(
                users=channel))
            conversation = str((opened.get("channel") or {}).get("id") or channel)
        oldest = f"{max(0.0, (since or 0.0) - CLOCK_SKEW):.6f}" if since else None
        cursor: str | None = None
        for _page in range(_HISTORY_PAGES):
            history = self._api(op, channel, functools.partial(
                self._client.conversations_history, channel=conversation, oldest=oldest,
                inclusive=True, include_all_metadata=True, limit=200, cursor=cursor))
            for message in history.get("messages") or ():
                metadata = message.get("metadata") or {}
                payload = metadata.get("event_payload") or {}
                if metadata.get("event_type") == EVENT_TYPE and payload.get("effect") == effect:
                    return {"found": True,
                            "result": {"ok": True, "ts": str(message.get("ts")), "reused": True}}
            cursor = (history.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return {"found": False}

    def _api(self, op: str, channel: str, request: Callable[[], Any]) -> Any:
        """``request()`` (a slack-sdk call) with its failures as :class:`IntegrationError`."""
        try:
            return request()
        except SlackApiError as exc:
            status = getattr(exc.response, "status_code", None)
            code = _code(exc.response.get("error") if exc.response is not None else None)
            raise _api_error(op, channel, status, code, retry_after_s=_header_retry(exc)) from None
        except (SlackClientError, urllib.error.URLError, OSError) as exc:
            raise Unavailable(
                f"slack {op} to {channel}: request failed ({type(exc).__name__})",
                integration=self.name, op=op,
            ) from None


class SlackWebhook(_SlackBase):
    """``webhook`` transport: an incoming webhook URL (a secret: not shown by ``repr``).

    An incoming webhook posts to the one channel it was created for: ``channel`` is
    checked but not sent, and the result has no ``ts`` (Slack answers plain ``ok``). Its
    posts cannot be read back (Slack API, "Sending messages using incoming webhooks": the
    URL only accepts posts), so ``post-message`` is at most once.
    """

    transport = "webhook"
    #: An incoming webhook cannot be read back: a post whose outcome is unknown is not
    #: made again (the outbox's ``at_most_once``, :mod:`graph.effects`).
    at_most_once: frozenset[str] = frozenset({"post-message"})

    def __init__(
        self,
        url: str,
        *,
        timeout: int = 30,
        max_retries: int = 2,
        max_wait: float = MAX_RATE_LIMIT_WAIT,
    ) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("https", "http") or not parsed.hostname:
            raise ValueError(
                "THE_LOOP_SLACK_WEBHOOK_URL must be the https:// URL of a Slack incoming webhook"
            )
        self._client = WebhookClient(
            url, timeout=timeout, logger=_sdk_log,
            retry_handlers=retry_handlers(max_retries, max_wait),
        )

    def __repr__(self) -> str:
        return "SlackWebhook(url=<hidden>)"

    def post_message(
        self, channel: str, text: str, blocks: Sequence[dict[str, Any]] | None = None,
        effect: str | None = None,
    ) -> SlackMessage:
        """``post-message`` through the webhook (to the webhook's own channel); ``effect``
        is accepted and not sent (nothing could read it back).

        Returns:
            ``{"ok": True, "ts": None}``
        """
        op = "post-message"
        self._check(channel, text, blocks)
        try:
            response = self._client.send(
                text=text, blocks=list(blocks) if blocks is not None else None
            )
        except (SlackClientError, urllib.error.URLError, OSError) as exc:
            raise Unavailable(
                f"slack {op} (webhook): request failed ({type(exc).__name__})",
                integration=self.name, op=op,
            ) from None
        if response.status_code != 200:
            retry = None
            for name, value in (response.headers or {}).items():
                if name.lower() == "retry-after":
                    retry = value[0] if isinstance(value, list | tuple) else value
            raise _api_error(op, "the webhook's channel", response.status_code,
                             _code(response.body), retry_after_s=retry, webhook=True)
        return {"ok": True, "ts": None}


def _header_retry(exc: SlackApiError) -> str | None:
    headers = getattr(exc.response, "headers", None) or {}
    for name, value in headers.items():
        if name.lower() == "retry-after":
            return value[0] if isinstance(value, list | tuple) else str(value)
    return None


def _code(value: Any) -> str | None:
    text = value.strip() if isinstance(value, str) else ""
    return text if _CODE.fullmatch(text) else None


def _api_error(
    op: str,
    where: str,
    status: int | None,
    code: str | None,
    *,
    retry_after_s: str | None = None,
    webhook: bool = False,
) -> IntegrationError:
    message = f"slack {op} to {where} failed: HTTP {status}" + (f" ({code})" if code else "")
    codes = (code,) if code else ()
    if status == 429 or code in ("ratelimited", "rate_limited"):
        message += " -- rate limited"
        if retry_after_s:
            message += f", retry after {retry_after_s} s"
        try:
            wait = float(retry_after_s) if retry_after_s else None
        except ValueError:
            wait = None
        return RateLimited(message, integration="slack", op=op, status=status, codes=codes,
                           retry_after=wait, reason=code or "")
    if (status is not None and status >= 500) or code in _RETRIABLE:
        return Unavailable(message, integration="slack", op=op, status=status, codes=codes,
                           reason=code or "")
    if code in _AUTH or (status in (401, 403) and not webhook):
        message += " -- check THE_LOOP_SLACK_TOKEN and the app's scopes (chat:write)"
    elif webhook and status in (403, 404, 410):
        message += (
            " -- the webhook was revoked or its channel archived: set a new "
            "THE_LOOP_SLACK_WEBHOOK_URL"
        )
    elif code in _CHANNEL:
        message += " -- invite the app to the channel, or check the channel/user id"
    return IntegrationError(message, integration="slack", op=op, status=status, codes=codes,
                            reason=code or "")


def _bad(op: str, detail: str) -> IntegrationError:
    return IntegrationError(f"slack {op}: bad parameters ({detail})", integration="slack", op=op)


if TYPE_CHECKING:  # mypy checks that both transports implement the port

    def _implement_the_port(sdk: SlackSdk, webhook: SlackWebhook) -> tuple[Slack, Slack]:
        return sdk, webhook
