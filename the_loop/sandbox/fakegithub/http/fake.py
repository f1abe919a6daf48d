"""The fake GitHub's HTTP-side state: :class:`HttpFakeState` is the state and the
operations of :class:`~the_loop.sandbox.fakegithub.state.FakeGitHub` plus what only HTTP
has (tokens and installations, OAuth and memberships, injected faults, the request log,
conditional requests and the primary rate limit). The blueprints read it through
:func:`~the_loop.sandbox.fakegithub.http.common.fake`; :class:`HttpFakeGitHub`
(:mod:`.served`) adds the Flask app that serves it."""

from __future__ import annotations

import collections
import random
import re
import secrets
import string
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeGuard

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey

from the_loop.sandbox.fakegithub.http.records import Chaos, Fault, RecordedRequest
from the_loop.sandbox.fakegithub.state import FakeGitHub

__all__ = ["BAD_JWT", "EXP_IN_PAST", "EXP_TOO_FAR", "IAT_IN_FUTURE", "INSTALLATION_TOKEN_TTL",
           "JWT_CLOCK_DRIFT", "JWT_MAX_LIFETIME", "HttpFakeState", "new_token"]

#: Seconds an installation access token is valid ("Generating an installation access
#: token for a GitHub App": "The installation access token will expire after 1 hour").
INSTALLATION_TOKEN_TTL = 3600.0
#: The furthest ahead a JWT's ``exp`` may be ("Generating a JSON Web Token (JWT) for a
#: GitHub App": "no more than 10 minutes into the future").
JWT_MAX_LIFETIME = 600
#: Seconds of clock drift allowed to a JWT's ``iat`` (the same page advises setting it 60
#: seconds in the past to allow for drift; GitHub refuses one ahead of its clock).
JWT_CLOCK_DRIFT = 60
#: GitHub's 401 messages for an App's JWT it does not take (as its API answers them).
BAD_JWT = "A JSON web token could not be decoded"
EXP_IN_PAST = ("'Expiration time' claim ('exp') must be a numeric value representing the "
               "future time at which the assertion expires")
EXP_TOO_FAR = "'Expiration time' claim ('exp') is too far in the future"
IAT_IN_FUTURE = ("'Issued at' claim ('iat') must be an Integer representing the time that "
                 "the assertion was issued")
_ALPHANUMERIC = string.ascii_letters + string.digits


def new_token(prefix: str) -> str:
    """A random token in GitHub's format: ``prefix`` (``ghp_`` a personal access token,
    ``ghs_`` an installation's, ``ghu_`` a user access token) and 36 alphanumerics
    ("Behind GitHub's new authentication token formats", GitHub blog, 2021)."""
    return prefix + "".join(secrets.choice(_ALPHANUMERIC) for _ in range(36))


def _public_key(pem: str | bytes) -> RSAPublicKey:
    """The RSA public key of ``pem`` (a public key, or a private key's public half).

    Raises:
        ValueError: ``pem`` is not an RSA key in PEM.
    """
    data = pem.encode("ascii") if isinstance(pem, str) else pem
    if b"PRIVATE KEY" in data:
        private = serialization.load_pem_private_key(data, password=None)
        if not isinstance(private, RSAPrivateKey):
            raise ValueError("the App's key must be an RSA key")
        return private.public_key()
    public = serialization.load_pem_public_key(data)
    if not isinstance(public, RSAPublicKey):
        raise ValueError("the App's key must be an RSA key")
    return public


class HttpFakeState(FakeGitHub):
    """The fake GitHub's state and operations, and what only its HTTP front has.

    Args:
        bot_login: login that installation tokens act as (author of their comments).
        user_login: the person's login (the default of :meth:`add_token`).
        tokens: people's tokens (personal access tokens): an iterable of tokens that act
            as ``user_login``, or a mapping ``{token: login}``. No other token is
            accepted (401 ``Bad credentials``); :meth:`add_token` registers more.
        app_id: if given, the JWT ``iss`` the App's endpoints accept.
        installations: if given, the only installation ids that can get a token (404).
        app_key: the App's key (PEM: its public key, or the private key, of which only
            the public half is kept); the App's endpoints take only a JWT signed with it
            (RS256). Without one they take no JWT (:meth:`set_app_key` sets it later).

    Authentication, as GitHub's ("Authenticating as a GitHub App", "Generating a JSON
    Web Token (JWT) for a GitHub App"): a JWT must be RS256-signed with the App's key,
    with ``iat`` not ahead of :attr:`clock` (:data:`JWT_CLOCK_DRIFT` allowed), ``exp``
    ahead of it by at most :data:`JWT_MAX_LIFETIME` seconds, and ``iss`` the App's id;
    installation tokens (``ghs_``, random) expire :attr:`installation_token_ttl` seconds
    after they were issued; people's tokens act as their login. :attr:`clock` (epoch
    seconds, default :func:`time.time`) is what both are checked against: a test moves
    it instead of waiting.

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
        tokens: Iterable[str] | Mapping[str, str] | None = None,
        app_id: int | None = None,
        installations: Iterable[int] | None = None,
        app_key: str | bytes | None = None,
    ) -> None:
        super().__init__(bot_login=bot_login, user_login=user_login)
        self.app_id = app_id
        self._app_key = None if app_key is None else _public_key(app_key)
        self._installations = None if installations is None else set(installations)
        self._issued: dict[str, int] = {}  # installation token -> installation id
        self._expires: dict[str, float] = {}  # installation token -> when (clock) it ends
        #: Epoch seconds now, as the fake reads its clock (JWTs, tokens' expiry).
        self.clock: Callable[[], float] = time.time
        #: Seconds an installation token is valid once issued.
        self.installation_token_ttl = INSTALLATION_TOKEN_TTL
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
        self._user_tokens: dict[str, str] = {}  # a person's token -> login
        self._members: dict[tuple[str, str | None], dict[str, str]] = {}  # -> login: state
        #: ETag -> when a body with it was first served (its Last-Modified).
        self._first_served: dict[str, datetime] = {}
        #: The primary limit per hour the fake reports: GitHub's for an installation of
        #: a GitHub Enterprise Cloud organization ("Rate limits for the REST API"), so
        #: long tests keep full speed; :meth:`set_rate_limit` brings it down.
        self.rate_limit = 15000
        self._rate_used: collections.Counter[str] = collections.Counter()
        self._rate_reset = int(datetime.now(UTC).timestamp()) + 3600
        people = tokens.items() if isinstance(tokens, Mapping) else (
            (token, user_login) for token in tokens or ())
        for token, login in people:
            self.add_token(login, token)

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

    # -- credentials ----------------------------------------------------------------

    def add_token(self, login: str | None = None, token: str | None = None) -> str:
        """Give ``login`` (default :attr:`user_login`) a token of their own, as a
        personal access token is: ``token``, or a new random ``ghp_...`` one. Requests
        with it act as ``login`` (the API's ``Authorization: token``; git's HTTP Basic
        password). Returns the token."""
        token = token or new_token("ghp_")
        with self.lock:
            self._user_tokens[token] = login or self.user_login
        return token

    def set_app_key(self, pem: str | bytes) -> None:
        """The App's key (see the ``app_key`` argument).

        Raises:
            ValueError: ``pem`` is not an RSA key in PEM.
        """
        key = _public_key(pem)
        with self.lock:
            self._app_key = key

    def app_jwt_refusal(self, token: str) -> str | None:
        """Why GitHub would refuse ``token`` as this App's JWT (its 401 message:
        :data:`BAD_JWT` for one that is not RS256-signed with the App's key or names no
        ``iss``, ``Integration not found`` for another App's, :data:`EXP_IN_PAST`,
        :data:`EXP_TOO_FAR`, :data:`IAT_IN_FUTURE`), or ``None`` when it is good."""
        with self.lock:
            key = self._app_key
        if key is None:
            return BAD_JWT
        try:
            claims = jwt.decode(token, key, algorithms=["RS256"], options={
                "verify_exp": False, "verify_iat": False, "verify_nbf": False,
                "verify_aud": False, "verify_iss": False})
        except jwt.InvalidTokenError:
            return BAD_JWT
        now = self.clock()
        exp, iat = claims.get("exp"), claims.get("iat")
        if not _number(exp) or exp <= now:
            return EXP_IN_PAST
        if exp > now + JWT_MAX_LIFETIME:
            return EXP_TOO_FAR
        if not _number(iat) or iat > now + JWT_CLOCK_DRIFT:
            return IAT_IN_FUTURE
        if "iss" not in claims:
            return BAD_JWT
        if self.app_id is not None and str(claims["iss"]) != str(self.app_id):
            return "Integration not found"
        return None

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
                self._expires.pop(token, None)
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
        ``{"message": "Injected fault"}``; a ``str`` is sent as it is, e.g. GitHub's HTML
        error page with ``{"Content-Type": "text/html"}``) instead of handling them.
        Faults queue in order.
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

    # -- for the routes and the request gate --------------------------------------------

    def log_request(self, recorded: RecordedRequest) -> int:
        """Append ``recorded`` to :attr:`requests`; returns its index (see
        :meth:`answered`)."""
        with self.lock:
            self._requests.append(recorded)
            return len(self._requests) - 1

    def answered(self, index: int, status: int) -> None:
        """Note ``status`` as the answer to logged request ``index`` (if the log still
        holds it: :meth:`clear_records` may have emptied it meanwhile)."""
        with self.lock:
            if index < len(self._requests):
                self._requests[index] = self._requests[index]._replace(status=status)

    def token_holder(self, credential: str) -> tuple[int | None, str | None]:
        """``(installation id, login)`` of an API token: the installation of an
        installation token the fake issued and has not revoked, before it expired; the
        login of a person's token (:meth:`add_token`, ``tokens=``, or a user access token
        of the OAuth flow); each ``None`` otherwise."""
        with self.lock:
            installation = self._issued.get(credential)
            if installation is not None and self._expires.get(credential, 0) <= self.clock():
                installation = None
            return installation, self._user_tokens.get(credential)

    def git_login(self, password: str) -> str | None:
        """The login a git smart HTTP password (a token) acts as: :attr:`bot_login` for
        a live installation token (not expired, revoked or suspended), the person's login
        for a person's token; ``None`` for anything else."""
        installation, login = self.token_holder(password)
        if installation is not None:
            return None if self.is_suspended(installation) else self.bot_login
        return login

    def has_installation(self, installation_id: int) -> bool:
        """Whether a token can be issued for ``installation_id`` (any, without
        ``installations=``)."""
        return self._installations is None or installation_id in self._installations

    def is_suspended(self, installation_id: int) -> bool:
        """Whether :meth:`suspend_installation` suspended ``installation_id``."""
        with self.lock:
            return installation_id in self._suspended

    def issue_token(self, installation_id: int) -> str:
        """A new installation token (``ghs_`` and 36 random alphanumerics) for
        ``installation_id``, valid :attr:`installation_token_ttl` seconds from now
        (:meth:`token_expires`), recorded in :attr:`token_requests`."""
        with self.lock:
            token = new_token("ghs_")
            self._issued[token] = installation_id
            self._expires[token] = self.clock() + self.installation_token_ttl
            self._token_requests.append(installation_id)
            return token

    def token_expires(self, token: str) -> float | None:
        """When installation token ``token`` expires (epoch seconds of :attr:`clock`), or
        ``None`` for a token the fake did not issue (or revoked)."""
        with self.lock:
            return self._expires.get(token)

    def first_served(self, etag: str) -> datetime:
        """When a body with ``etag`` was first served (now, to the second, the first
        time): its ``Last-Modified``."""
        with self.lock:
            return self._first_served.setdefault(etag, datetime.now(UTC).replace(
                microsecond=0))

    def count_request(self, who: str, *, counted: bool) -> tuple[int, int]:
        """Count one request of ``who`` (``installation:ID`` or a login) against the
        primary rate limit when ``counted`` (a 304 is not), renewing every budget when
        the hour is up.

        Returns:
            ``(used, reset)``: requests ``who`` made this hour, and when the hour ends
            (epoch seconds).
        """
        with self.lock:
            if datetime.now(UTC).timestamp() >= self._rate_reset:  # a new hour
                self._rate_used.clear()
                self._rate_reset = int(datetime.now(UTC).timestamp()) + 3600
            if counted:
                self._rate_used[who] += 1
            return self._rate_used[who], self._rate_reset

    def oauth_client_known(self, client_id: str) -> bool:
        """Whether :meth:`add_oauth_app` registered ``client_id``."""
        with self.lock:
            return client_id in self._oauth_apps

    @property
    def signed_in(self) -> str | None:
        """Who is signed in at the fake's web front (see :meth:`sign_in_as`)."""
        with self.lock:
            return self._signed_in

    def new_oauth_code(self, client_id: str, redirect_uri: str, login: str) -> str:
        """A one-time code of the OAuth web flow: ``login`` approved ``client_id``, which
        must send ``redirect_uri`` again (if at all) to exchange it."""
        code = f"code{self.next_id()}x{secrets.token_hex(8)}"
        with self.lock:
            self._codes[code] = (client_id, redirect_uri, login)
        return code

    def exchange_oauth_code(self, client_id: str, client_secret: str, code: str,
                            redirect_uri: str | None) -> dict[str, str]:
        """Exchange a code of :meth:`new_oauth_code` for a user access token (``ghu_...``),
        once.

        Returns:
            ``{"access_token", "token_type", "scope"}``, or GitHub's ``{"error"}``:
            ``incorrect_client_credentials``, ``bad_verification_code`` (unknown, used
            or another client's code) or ``redirect_uri_mismatch``.
        """
        with self.lock:
            if not client_id or self._oauth_apps.get(client_id) != client_secret:
                return {"error": "incorrect_client_credentials"}
            if code not in self._codes or self._codes[code][0] != client_id:
                return {"error": "bad_verification_code"}
            if redirect_uri and self._codes[code][1] != redirect_uri:
                return {"error": "redirect_uri_mismatch"}
            _, _, login = self._codes.pop(code)
            token = new_token("ghu_")
            self._user_tokens[token] = login
            return {"access_token": token, "token_type": "bearer", "scope": ""}

    def take_fault(self, method: str, path: str) -> Fault | None:
        """The fault to answer a ``method`` request of ``path`` with, if any: the first
        queued one that matches (used up after its ``times``), else possibly a random one
        of :meth:`chaos`; counted in :attr:`injected`."""
        with self.lock:
            return self._take_fault(method, path)

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


def _number(value: Any) -> TypeGuard[float]:
    """Whether a JWT claim is a number (a JSON number: not a boolean, not a string)."""
    return isinstance(value, int | float) and not isinstance(value, bool)
