"""The fake GitHub with its HTTP front: :class:`HttpFakeGitHub` is the state and the
operations of :class:`~the_loop.sandbox.fakegithub.state.FakeGitHub` plus what only HTTP
has (tokens and installations, OAuth and memberships, injected faults, the request log,
conditional requests and the primary rate limit) and the Flask app that serves it all
(:func:`the_loop.sandbox.fakegithub.http.factory.create_app`)."""

from __future__ import annotations

import collections
import random
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from the_loop.sandbox.fakegithub.http.factory import create_app
from the_loop.sandbox.fakegithub.http.records import Chaos, Fault, RecordedRequest
from the_loop.sandbox.fakegithub.state import FakeGitHub

__all__ = ["HttpFakeGitHub"]


class HttpFakeGitHub(FakeGitHub):
    """The fake GitHub's state and operations plus the Flask app that serves them.

    Args:
        bot_login: login that installation tokens act as (author of their comments).
        user_login: login that any other token acts as.
        tokens: if given, the only non-installation tokens accepted (others get 401).
        app_id: if given, the JWT ``iss`` the access-token endpoint accepts.
        installations: if given, the only installation ids that can get a token (404).

    Seeding and reading are :class:`~the_loop.sandbox.fakegithub.state.FakeGitHub`'s. Besides:
    :attr:`requests`, :attr:`token_requests`, :meth:`clear_records`; faults:
    :meth:`fail_next`, :meth:`chaos` (counted in :attr:`injected`); installations:
    :meth:`suspend_installation`, :meth:`expire_tokens`; renames: ``rename_repo``.

    Conditional requests and the primary rate limit, as GitHub answers them ("Best
    practices for using the REST API": use conditional requests; "Rate limits for the REST
    API"): every successful ``GET`` carries an ``ETag`` (a digest of the body) and a
    ``Last-Modified`` (when that body was first served); a ``GET`` whose
    ``If-None-Match`` matches (or, without one, whose ``If-Modified-Since`` is not older)
    is answered ``304 Not Modified`` with no body. Every API answer carries
    ``x-ratelimit-limit``/``-remaining``/``-used``/``-reset``/``-resource``; each request
    but a 304 counts against the caller's budget (per installation, else per login),
    renewed every hour: :meth:`set_rate_limit` sets it.
    """

    #: Files larger than this (bytes) come back from the contents API with
    #: ``encoding: "none"`` and no content, as GitHub does above 1 MB.
    contents_inline_limit = 1024 * 1024

    def __init__(
        self,
        *,
        bot_login: str = "the-loop[bot]",
        user_login: str = "octocat",
        tokens: Iterable[str] | None = None,
        app_id: int | None = None,
        installations: Iterable[int] | None = None,
    ) -> None:
        super().__init__(bot_login=bot_login, user_login=user_login)
        self._tokens = None if tokens is None else set(tokens)
        self.app_id = app_id
        self._installations = None if installations is None else set(installations)
        self._issued: dict[str, int] = {}  # installation token -> installation id
        self._faults: list[Fault] = []
        self._chaos: Chaos | None = None
        self._injected: collections.Counter[str] = collections.Counter()
        self._requests: list[RecordedRequest] = []
        self._token_requests: list[int] = []
        #: One-time codes of the manifest flow -> ``{"manifest", "owner"}``.
        self.manifests: dict[str, dict[str, Any]] = {}
        self._suspended: set[int] = set()
        self._oauth_apps: dict[str, str] = {}  # client id -> client secret
        self._signed_in: str | None = None  # who approves at the authorize page
        self._codes: dict[str, tuple[str, str, str]] = {}  # code -> (client, redirect, login)
        self._user_tokens: dict[str, str] = {}  # user access token -> login
        self._members: dict[tuple[str, str | None], dict[str, str]] = {}  # -> login: state
        #: ETag -> when a body with it was first served (its Last-Modified).
        self._first_served: dict[str, datetime] = {}
        #: The primary limit per hour the fake reports: GitHub's for an installation of
        #: a GitHub Enterprise Cloud organization ("Rate limits for the REST API"), so
        #: long tests keep full speed; :meth:`set_rate_limit` brings it down.
        self.rate_limit = 15000
        self._rate_used: collections.Counter[str] = collections.Counter()
        self._rate_reset = int(datetime.now(UTC).timestamp()) + 3600
        self.app = create_app(self)

    # -- the primary rate limit ---------------------------------------------------------

    def set_rate_limit(self, *, remaining: int, reset_in: float = 3600.0,
                       who: str | None = None) -> None:
        """Make ``x-ratelimit-remaining`` ``remaining`` for ``who`` (``installation:ID``
        or a login; ``None``: every caller seen so far and the installations' default),
        resetting ``reset_in`` seconds from now."""
        with self.lock:
            self._rate_reset = int(datetime.now(UTC).timestamp() + reset_in)
            for key in ([who] if who else [*self._rate_used, "installation:1"]):
                self._rate_used[key] = max(0, self.rate_limit - remaining)

    # -- installations ----------------------------------------------------------------

    def suspend_installation(self, installation_id: int, suspended: bool = True) -> None:
        """Suspend (or unsuspend) an installation: its tokens stop working (401 "Bad
        credentials") and no new one is issued (403 "This installation has been
        suspended"), as GitHub answers a suspended App installation."""
        with self.lock:
            if suspended:
                self._suspended.add(installation_id)
            else:
                self._suspended.discard(installation_id)

    def expire_tokens(self, installation_id: int | None = None) -> int:
        """Revoke the installation tokens issued so far (of one installation, or all)
        before their hour is up, as GitHub does when a token is revoked or the App's
        permissions change; they then get 401. Returns how many were revoked."""
        with self.lock:
            dead = [t for t, i in self._issued.items()
                    if installation_id is None or i == installation_id]
            for token in dead:
                del self._issued[token]
            return len(dead)

    # -- OAuth and memberships ----------------------------------------------------------

    def add_oauth_app(self, client_id: str, client_secret: str) -> None:
        """Register an OAuth client (a GitHub App's client id and secret)."""
        with self.lock:
            self._oauth_apps[client_id] = client_secret

    def sign_in_as(self, login: str | None) -> None:
        """Who is signed in at the fake's web front: the authorize page approves for
        ``login`` (``None``: it answers ``error=access_denied``)."""
        with self.lock:
            self._signed_in = login

    def add_member(self, org: str, login: str, team: str | None = None, *,
                   state: str = "active") -> None:
        """Make ``login`` a member of ``org`` (or of its team ``team``, a slug) with
        membership ``state`` (``active`` or ``pending``)."""
        with self.lock:
            self._members.setdefault((org.casefold(), team.casefold() if team else None),
                                     {})[login.casefold()] = state

    def membership(self, org: str, login: str, team: str | None = None) -> str | None:
        """The membership state of ``login`` in ``org`` (or its team), or ``None``."""
        with self.lock:
            return self._members.get((org.casefold(), team.casefold() if team else None),
                                     {}).get(login.casefold())

    # -- faults -----------------------------------------------------------------------

    def fail_next(
        self,
        path_regex: str,
        status: int,
        headers: dict[str, str] | None = None,
        *,
        body: Any = None,
        method: str | None = None,
        times: int = 1,
        after: bool = False,
    ) -> None:
        """Answer the next ``times`` requests whose path matches ``path_regex``
        (``re.search``; the path includes any ``/api/v3`` prefix) and, if given, whose
        method is ``method``, with ``status``, ``headers`` and JSON ``body`` (default
        ``{"message": "Injected fault"}``) instead of handling them. Faults queue in order.
        With ``after=True`` the request is handled (a write lands) and the fault replaces
        its answer: the client sees an error for something that happened.
        """
        with self.lock:
            self._faults.append(
                Fault(
                    re.compile(path_regex),
                    status,
                    dict(headers or {}),
                    {"message": "Injected fault"} if body is None else body,
                    method.upper() if method else None,
                    times,
                    after,
                )
            )

    def chaos(
        self,
        rate: float,
        *,
        after_rate: float = 0.0,
        statuses: tuple[tuple[int, dict[str, str]], ...] = (
            (502, {}),
            (403, {"retry-after": "1"}),
            (429, {"retry-after": "1"}),
        ),
        seed: int | None = None,
        path_regex: str = r"^(?!.*/access_tokens)",
    ) -> None:
        """Fail a random fraction ``rate`` of the requests matching ``path_regex`` (default:
        all but the installation-token endpoint) with one of ``statuses`` (default: 502,
        a secondary rate limit -- 403 with ``retry-after`` -- and 429); of those faults, a
        share ``after_rate`` is injected after handling (the answer is lost, the write
        landed). ``rate=0`` turns it off. Counts are in :attr:`injected`."""
        with self.lock:
            self._chaos = Chaos(rate, after_rate, statuses, random.Random(seed),
                                 re.compile(path_regex)) if rate > 0 else None

    @property
    def injected(self) -> dict[str, int]:
        """Faults injected so far: ``{"<status>": n, "<status>-after": n}``."""
        with self.lock:
            return dict(self._injected)

    # -- reading ----------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Copy of every request received, in order (faulted ones included)."""
        with self.lock:
            return list(self._requests)

    @property
    def token_requests(self) -> list[int]:
        """Installation ids for which an access token was issued, in order."""
        with self.lock:
            return list(self._token_requests)

    def clear_records(self) -> None:
        """Forget recorded actions, requests and token requests (state stays)."""
        with self.lock:
            self.clear_actions()
            self._requests.clear()
            self._token_requests.clear()

    # -- internals (call with the lock held) ------------------------------------------

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self._faults:
            if (fault.method is None or fault.method == method) and fault.pattern.search(path):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                self._injected[f"{fault.status}{'-after' if fault.after else ''}"] += 1
                return fault
        chaos = self._chaos
        if chaos is not None and chaos.pattern.search(path) and chaos.rng.random() < chaos.rate:
            status, headers = chaos.rng.choice(chaos.statuses)
            after = chaos.rng.random() < chaos.after_rate
            self._injected[f"{status}{'-after' if after else ''}"] += 1
            message = ("You have exceeded a secondary rate limit. Please wait a few minutes "
                       "before you try again." if status in (403, 429) else "Server Error")
            return Fault(chaos.pattern, status, dict(headers), {"message": message}, None, 1,
                         after)
        return None
