"""Who may read: bearer tokens and the dashboard's signed session cookie.

* **Bearer tokens** (``Authorization: Bearer TOKEN``): the token's SHA-256 is compared
  with every digest of ``THE_LOOP_API_TOKENS`` with :func:`hmac.compare_digest` (all of
  them, whatever matches: the time taken says nothing about which, or how much,
  matched). Only digests are held, in memory (:class:`foundation.settings.DashboardSettings`).
* **Session cookie** (``the_loop_session``): set after a sign-in on ``/ui/login`` (with a
  token, or "Sign in with GitHub", :mod:`the_loop.web.oauth`); ``Secure``, ``HttpOnly``,
  ``SameSite=Lax``, signed and time-stamped with ``itsdangerous`` under the session key,
  valid ``THE_LOOP_UI_SESSION_TTL`` seconds. It holds who signed in and how (a token
  session names its token by a digest prefix, so removing the token from
  ``THE_LOOP_API_TOKENS`` ends its sessions too), never a token.

Nothing here logs or returns a credential.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer

from foundation.settings import DashboardSettings

SESSION_COOKIE = "the_loop_session"
#: The short-lived cookie carrying the OAuth ``state`` between the redirect to GitHub
#: and the callback ("Authorizing GitHub Apps", GitHub docs: ``state`` guards against
#: cross-site request forgery).
OAUTH_COOKIE = "the_loop_oauth"
OAUTH_TTL = 600
_SESSION_SALT = "the-loop.dashboard.session"
_OAUTH_SALT = "the-loop.dashboard.oauth"
_TOKEN_ID = 16  # hex digits of a token's digest a session names it by


@dataclass(frozen=True)
class Principal:
    """Who is reading.

    Attributes:
        kind: ``token`` (a bearer token or a token sign-in) or ``github``.
        name: the GitHub login, or ``token …`` and the last four hex digits of the
            token's digest (enough to tell tokens apart, nothing to guess one by).
    """

    kind: str
    name: str


def token_digest(token: str) -> str:
    """SHA-256 hex of ``token``'s UTF-8 bytes (how tokens are held)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def cookie_options(ttl: int) -> dict[str, Any]:
    """The session cookie's attributes (Flask's ``set_cookie`` keywords)."""
    return {"max_age": ttl, "secure": True, "httponly": True, "samesite": "Lax", "path": "/"}


class Auth:
    """Checks credentials against one deployment's dashboard settings.

    Args:
        settings: :attr:`foundation.settings.Settings.dashboard`.
    """

    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        self._digests = tuple(settings.token_digests)
        key = settings.session_secret
        self._sessions = URLSafeTimedSerializer(key, salt=_SESSION_SALT) if key else None
        self._oauth = URLSafeTimedSerializer(key, salt=_OAUTH_SALT) if key else None

    @property
    def configured(self) -> bool:
        """Whether any way to sign in exists (a token, or "Sign in with GitHub")."""
        return bool(self._digests) or self.settings.oauth

    def _matching(self, digest: str) -> str | None:
        """The configured digest equal to ``digest``, compared with every one in constant
        time; ``None`` when none is."""
        found = None
        for known in self._digests:
            if hmac.compare_digest(known, digest):
                found = known
        return found

    def token(self, token: str | None) -> Principal | None:
        """The principal of a bearer token, or ``None`` when it is not configured."""
        if not token:
            return None
        found = self._matching(token_digest(token))
        return None if found is None else Principal("token", f"token …{found[-4:]}")

    def bearer(self, header: str | None) -> Principal | None:
        """The principal of an ``Authorization: Bearer TOKEN`` header (``token TOKEN`` is
        taken too, as GitHub takes it), or ``None``."""
        if not header:
            return None
        scheme, _, value = header.partition(" ")
        if scheme.lower() not in ("bearer", "token"):
            return None
        return self.token(value.strip())

    # -- the session cookie ---------------------------------------------------------------

    def session_value(self, principal: Principal, token: str | None = None) -> str:
        """The signed cookie value of a new session of ``principal`` (``token``: the one
        it signed in with, named by a digest prefix).

        Raises:
            RuntimeError: no session key (no webhook secret and no
                ``THE_LOOP_UI_SESSION_SECRET``).
        """
        if self._sessions is None:
            raise RuntimeError("no session key: set THE_LOOP_UI_SESSION_SECRET")
        data = {"k": principal.kind, "n": principal.name}
        if token is not None:
            data["t"] = token_digest(token)[:_TOKEN_ID]
        return str(self._sessions.dumps(data))

    def session(self, value: str | None) -> Principal | None:
        """The principal of a session cookie, or ``None`` (missing, forged, expired, or
        its token no longer configured)."""
        if not value or self._sessions is None:
            return None
        try:
            data = self._sessions.loads(value, max_age=self.settings.session_ttl)
        except BadSignature:  # SignatureExpired is one
            return None
        if not isinstance(data, dict) or data.get("k") not in ("token", "github"):
            return None
        if data["k"] == "token":
            prefix = str(data.get("t") or "")
            if len(prefix) != _TOKEN_ID or not any(
                    hmac.compare_digest(d[:_TOKEN_ID], prefix) for d in self._digests):
                return None
        elif not self.settings.oauth:
            return None  # "Sign in with GitHub" was turned off
        return Principal(str(data["k"]), str(data.get("n") or "?"))

    # -- the OAuth state ------------------------------------------------------------------

    def oauth_start(self, next_path: str) -> tuple[str, str]:
        """A fresh OAuth ``state`` and the signed cookie value that remembers it (and
        where to go after signing in).

        Raises:
            RuntimeError: no session key.
        """
        if self._oauth is None:
            raise RuntimeError("no session key: set THE_LOOP_UI_SESSION_SECRET")
        state = secrets.token_urlsafe(24)
        return state, str(self._oauth.dumps({"s": state, "n": next_path}))

    def oauth_finish(self, cookie: str | None, state: str | None) -> str | None:
        """Where to go after signing in when ``state`` is the one ``cookie`` remembers
        (and the cookie is under :data:`OAUTH_TTL` seconds old), else ``None``."""
        if not cookie or not state or self._oauth is None:
            return None
        try:
            data = self._oauth.loads(cookie, max_age=OAUTH_TTL)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not hmac.compare_digest(str(data.get("s")), state):
            return None
        return str(data.get("n") or "")
