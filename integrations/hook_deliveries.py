"""The App's webhook delivery log: which deliveries never got through, and asking GitHub
to send one again. Shared by the operator's ``the-loop redeliver`` (:mod:`the_loop.redeliver`)
and the worker's reconciler (:mod:`workers.reconcile`).

Endpoints (GitHub docs, "REST API endpoints for GitHub App webhooks"), authenticated as the
App (a JWT signed with its private key; :meth:`integrations.github.GitHubClients.for_app`):

* ``GET /app/hook/deliveries?per_page=100[&cursor=...]`` ("List deliveries for an app
  webhook") -- newest first; each item has ``id, guid, delivered_at, redelivery, duration,
  status, status_code, event, action, installation_id, repository_id``; the next (older)
  page is the ``Link: <...>; rel="next"`` URL, which carries a ``cursor``.
* ``POST /app/hook/deliveries/{delivery_id}/attempts`` ("Redeliver a delivery for an app
  webhook") -- 202 when the redelivery is queued. The redelivery keeps the ``guid`` (the
  ``X-GitHub-Delivery`` header), so a delivery the receiver had in fact queued is answered
  200 and not processed twice (:mod:`foundation.inbox.enqueue`).

GitHub does not redeliver a failed delivery by itself, and redelivers only deliveries of
the past 3 days ("Handling failed webhook deliveries", "Redelivering webhooks"):
:data:`REDELIVERY_WINDOW`. A delivery (a ``guid``) failed when none of its attempts was
delivered OK (``status == "OK"`` and ``status_code`` below 400, :func:`is_ok`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from graph.errors import LoopError
from graph.ports import IntegrationError

if TYPE_CHECKING:
    from integrations.github import GitHubAppApi

__all__ = ["REDELIVERY_WINDOW", "AppHookDeliveries", "Missed", "RedeliverError", "is_ok",
           "missed", "parse_time"]

#: How old a delivery GitHub still redelivers ("Redelivering webhooks": the past 3 days).
REDELIVERY_WINDOW = timedelta(days=3)


class RedeliverError(LoopError, RuntimeError):
    """GitHub refused a request; the message names the request, the status and the fix
    (never a response body or a credential).

    Attributes:
        status: GitHub's HTTP status, ``None`` when GitHub could not be reached.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def passing(self) -> bool:
        """Whether asking again later may work: unreachable, rate limited or a 5xx."""
        return self.status is None or self.status in (403, 429) or self.status >= 500


def parse_time(value: str) -> datetime:
    """GitHub's ISO 8601 timestamps (``2019-06-03T00:57:16Z``)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def is_ok(attempt: Mapping[str, Any]) -> bool:
    """Whether one attempt was delivered: GitHub says ``OK`` and the answer was < 400."""
    code = attempt.get("status_code")
    return attempt.get("status") == "OK" and isinstance(code, int) and 0 < code < 400


@dataclass(frozen=True)
class Missed:
    """One delivery (``guid``) whose attempts in the window all failed; ``attempt`` is the
    most recent of them (the one to redeliver)."""

    guid: str
    attempt: Mapping[str, Any]
    attempts: int

    def to_dict(self) -> dict[str, Any]:
        a = self.attempt
        return {"guid": self.guid, "id": a.get("id"), "event": a.get("event"),
                "action": a.get("action"), "status": a.get("status"),
                "status_code": a.get("status_code"), "delivered_at": a.get("delivered_at"),
                "installation_id": a.get("installation_id"),
                "repository_id": a.get("repository_id"), "attempts": self.attempts}


def missed(attempts: Sequence[Mapping[str, Any]]) -> list[Missed]:
    """The deliveries none of whose ``attempts`` (a delivery log window) got through,
    oldest first."""
    by_guid: dict[str, list[Mapping[str, Any]]] = {}
    for attempt in attempts:
        by_guid.setdefault(str(attempt.get("guid")), []).append(attempt)
    out = []
    for guid, tries in by_guid.items():
        if any(is_ok(t) for t in tries):
            continue
        latest = max(tries, key=lambda t: (str(t.get("delivered_at")), int(t.get("id") or 0)))
        out.append(Missed(guid, latest, len(tries)))
    return sorted(out, key=lambda m: str(m.attempt.get("delivered_at")))


class AppHookDeliveries:
    """The App's webhook delivery log, read through the integrations' GitHub client.

    Args:
        api: the client acting as the App (:meth:`integrations.github.GitHubClients.for_app`,
            built by :func:`the_loop.wiring.github_app` from the same settings as the
            worker's client: ``cli-config.yaml``'s integrations block, a GitHub Enterprise
            Server base URL, PyGithub's retries and pacing).
        per_page: attempts per page (GitHub's most, 100, unless a test wants pages).
    """

    def __init__(self, api: GitHubAppApi, *, per_page: int = 100) -> None:
        self.api = api
        self.per_page = per_page

    @staticmethod
    def _refused(what: str, exc: IntegrationError) -> RedeliverError:
        if exc.status is None:
            return RedeliverError(f"{what}: GitHub is unreachable ({exc}); check "
                                  "THE_LOOP_GITHUB_API_URL (integrations.github.api.baseUrl)")
        hint = {
            401: "the App's JWT was refused: check THE_LOOP_GITHUB_APP_ID and the private key",
            403: "forbidden (or rate limited): try again later",
            404: "not found: is THE_LOOP_GITHUB_API_URL right, and is the webhook the App's?",
            422: "GitHub refused the request (validation failed)",
        }.get(exc.status, "GitHub did not answer as expected")
        return RedeliverError(f"{what}: HTTP {exc.status} ({hint})", exc.status)

    def pages(self) -> Iterator[list[dict[str, Any]]]:
        """Pages of the delivery log, newest first, following ``Link: rel="next"``.

        Raises:
            RedeliverError: GitHub refused or could not be reached.
        """
        pages = self.api.hook_delivery_pages(self.per_page)
        while True:
            try:
                page = next(pages)
            except StopIteration:
                return
            except IntegrationError as exc:
                raise self._refused("GET /app/hook/deliveries", exc) from None
            yield page

    def since(self, cutoff: datetime) -> list[dict[str, Any]]:
        """Every attempt delivered at or after ``cutoff`` (an aware datetime)."""
        return self.window(cutoff)[0]

    def window(self, cutoff: datetime, *, max_pages: int | None = None
               ) -> tuple[list[dict[str, Any]], bool]:
        """The attempts delivered at or after ``cutoff`` (an aware datetime), reading at
        most ``max_pages`` pages (``None``: as many as it takes).

        Returns:
            ``(attempts, complete)``: newest first; ``complete`` is ``False`` when the
            page limit stopped it before it reached ``cutoff`` or the log's end.

        Raises:
            RedeliverError: GitHub refused or could not be reached.
        """
        found: list[dict[str, Any]] = []
        for read, page in enumerate(self.pages(), start=1):
            older = False
            for attempt in page:
                at = attempt.get("delivered_at")
                if at and parse_time(str(at)) < cutoff:
                    older = True
                    continue
                found.append(attempt)
            if older or not page:
                return found, True
            if max_pages is not None and read >= max_pages:
                return found, False
        return found, True

    def redeliver(self, delivery_id: int) -> None:
        """``POST /app/hook/deliveries/{delivery_id}/attempts`` (202: queued by GitHub).

        Raises:
            RedeliverError: GitHub refused or could not be reached.
        """
        try:
            self.api.redeliver_hook_delivery(int(delivery_id))
        except IntegrationError as exc:
            raise self._refused(
                f"POST /app/hook/deliveries/{int(delivery_id)}/attempts", exc) from None
