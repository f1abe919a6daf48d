"""Ask GitHub to redeliver the App's webhook deliveries that never got through.

GitHub does not retry a failed delivery by itself. While the receiver was unreachable or
answered 503 (Redis down), every delivery GitHub tried failed; this finds them through the
App's delivery log and asks for each one again. Endpoints (GitHub docs, "REST API
endpoints for GitHub App webhooks"), authenticated as the App (a JWT signed with its
private key):

* ``GET /app/hook/deliveries?per_page=100[&cursor=...]`` -- newest first; each item has
  ``id, guid, delivered_at, redelivery, duration, status, status_code, event, action,
  installation_id, repository_id``; the next page is the ``Link: <...>; rel="next"`` URL
  (it carries a ``cursor``).
* ``POST /app/hook/deliveries/{delivery_id}/attempts`` -- 202 when the redelivery is
  queued. The redelivery keeps the ``guid`` (our ``X-GitHub-Delivery``), so a delivery the
  receiver had in fact queued is answered 200 and not processed twice.

A delivery (a ``guid``) needs redelivering when none of its attempts in the window was
delivered OK (``status == "OK"`` and ``status_code`` below 400).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import requests

from graph.errors import LoopError

if TYPE_CHECKING:
    from the_loop.settings import GitHubSettings

API_VERSION = "2022-11-28"
USER_AGENT = "the-loop (redeliver)"
_DURATION = re.compile(r"(\d+)\s*([smhdw])", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class RedeliverError(LoopError, RuntimeError):
    """GitHub refused a request; the message names the request, the status and the fix
    (never a response body or a credential)."""


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``6h``, ``2d``, ``1w`` or combinations (``1h30m``).

    Raises:
        ValueError: anything else, or a zero duration.
    """
    cleaned = text.strip().replace(" ", "")
    parts = _DURATION.findall(cleaned)
    if not parts or "".join(f"{n}{u}" for n, u in parts).lower() != cleaned.lower():
        raise ValueError(f"{text!r} is not a duration such as 30m, 6h, 2d or 1h30m")
    seconds = sum(int(n) * _UNITS[u.lower()] for n, u in parts)
    if seconds <= 0:
        raise ValueError("the duration must be longer than zero")
    return timedelta(seconds=seconds)


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


def missed(attempts: list[Mapping[str, Any]]) -> list[Missed]:
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
    """The App's webhook delivery log.

    Args:
        api_url: REST API root (``THE_LOOP_GITHUB_API_URL``).
        jwt: returns a fresh App JWT (PyGithub's ``Auth.AppAuth(...).token``).
        session: a ``requests.Session`` (default: a new one).
        timeout: seconds per request.
    """

    def __init__(self, api_url: str, jwt: Callable[[], str],
                 session: requests.Session | None = None, timeout: float = 15.0) -> None:
        self.api_url = api_url.rstrip("/")
        self._jwt = jwt
        self.session = session or requests.Session()
        self.timeout = timeout

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._jwt()}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": API_VERSION, "User-Agent": USER_AGENT}

    def _check(self, response: requests.Response, what: str) -> None:
        if response.status_code < 400:
            return
        hint = {
            401: "the App's JWT was refused: check THE_LOOP_GITHUB_APP_ID and the private key",
            403: "forbidden (or rate limited): try again later",
            404: "not found: is THE_LOOP_GITHUB_API_URL right, and is the webhook the App's?",
            422: "GitHub refused the request (validation failed)",
        }.get(response.status_code, "GitHub did not answer as expected")
        raise RedeliverError(f"{what}: HTTP {response.status_code} ({hint})")

    def pages(self, per_page: int = 100) -> Iterator[list[dict[str, Any]]]:
        """Pages of the delivery log, newest first, following ``Link: rel="next"``."""
        url: str | None = f"{self.api_url}/app/hook/deliveries"
        params: dict[str, Any] | None = {"per_page": per_page}
        while url:
            response = self.session.get(url, params=params, headers=self._headers(),
                                        timeout=self.timeout)
            self._check(response, "GET /app/hook/deliveries")
            page = response.json()
            if not isinstance(page, list):
                raise RedeliverError("GET /app/hook/deliveries: the answer is not a list")
            yield page
            url = response.links.get("next", {}).get("url")
            params = None  # the next URL carries per_page and the cursor

    def since(self, cutoff: datetime) -> list[dict[str, Any]]:
        """Every attempt delivered at or after ``cutoff`` (an aware datetime)."""
        found: list[dict[str, Any]] = []
        for page in self.pages():
            older = False
            for attempt in page:
                at = attempt.get("delivered_at")
                if at and parse_time(str(at)) < cutoff:
                    older = True
                    continue
                found.append(attempt)
            if older or not page:
                break
        return found

    def redeliver(self, delivery_id: int) -> None:
        """``POST /app/hook/deliveries/{delivery_id}/attempts`` (202: queued by GitHub)."""
        response = self.session.post(
            f"{self.api_url}/app/hook/deliveries/{int(delivery_id)}/attempts",
            headers=self._headers(), timeout=self.timeout)
        self._check(response, f"POST /app/hook/deliveries/{int(delivery_id)}/attempts")


@dataclass
class Report:
    """What one run found and did."""

    since: datetime
    checked: int
    missed: list[Missed]
    redelivered: list[str]
    errors: dict[str, str]


def redeliver_missed(log: AppHookDeliveries, window: timedelta, *, dry_run: bool = False,
                     now: datetime | None = None) -> Report:
    """Find the deliveries of the last ``window`` that never got through and (unless
    ``dry_run``) ask GitHub to redeliver each; a refusal is recorded, the rest go on."""
    cutoff = (now or datetime.now(UTC)) - window
    attempts = log.since(cutoff)
    found = missed(attempts)
    done: list[str] = []
    errors: dict[str, str] = {}
    if not dry_run:
        for m in found:
            try:
                log.redeliver(int(m.attempt["id"]))
                done.append(m.guid)
            except (RedeliverError, requests.RequestException) as exc:
                errors[m.guid] = str(exc) if isinstance(exc, RedeliverError) else \
                    f"request failed ({type(exc).__name__})"
    return Report(cutoff, len(attempts), found, done, errors)


def app_jwt_factory(settings: GitHubSettings) -> tuple[str, Callable[[], str]]:
    """``(api_url, jwt)`` from the App's settings (``THE_LOOP_GITHUB_API_URL``,
    ``THE_LOOP_GITHUB_APP_ID``, ``THE_LOOP_GITHUB_PRIVATE_KEY[_PATH]``).

    Raises:
        RedeliverError: no App credentials (a personal token cannot read the App's log).
    """
    from github import Auth
    if settings.app_id is None or not settings.private_key:
        raise RedeliverError(
            "the App's delivery log needs the App's credentials: set THE_LOOP_GITHUB_APP_ID "
            "and THE_LOOP_GITHUB_PRIVATE_KEY (or THE_LOOP_GITHUB_PRIVATE_KEY_PATH)")
    auth = Auth.AppAuth(settings.app_id, settings.private_key)
    return settings.api_url, lambda: auth.token


def age(at: datetime, now: datetime | None = None) -> str:
    """``3m``, ``2h``... since ``at``."""
    seconds = max(0, int(((now or datetime.now(UTC)) - at).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


__all__ = ["AppHookDeliveries", "Missed", "RedeliverError", "Report", "app_jwt_factory",
           "is_ok", "missed", "parse_duration", "redeliver_missed"]
