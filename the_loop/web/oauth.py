""""Sign in with GitHub": the GitHub App's web application flow, then a membership check.

GitHub docs, "Generating a user access token for a GitHub App" (the web application
flow): send the person to ``{web}/login/oauth/authorize?client_id=...&redirect_uri=
...&state=...``; GitHub sends them back to ``redirect_uri`` with ``code`` and ``state``;
``POST {web}/login/oauth/access_token`` (``client_id``, ``client_secret``, ``code``,
``redirect_uri``; ``Accept: application/json``) answers ``{"access_token": ...}`` — or,
with status 200 still, ``{"error": ...}``.

With that user token: ``GET /user`` ("Get the authenticated user") gives the login;
``GET /user/memberships/orgs/{org}`` ("Get an organization membership for the
authenticated user") and ``GET /orgs/{org}/teams/{team_slug}/memberships/{username}``
("Get team membership for a user") say whether the person is an ``active`` member of
an allowed organization or team (the App needs the organization permission "Members:
read"). The user token is used for those calls only, then dropped: it is never stored,
logged or put in the session.
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING

from foundation.settings import DashboardSettings
from graph.errors import LoopError

if TYPE_CHECKING:
    import requests

TIMEOUT = 10.0
_ACCEPT = "application/vnd.github+json"


class OAuthError(LoopError, RuntimeError):
    """Signing in with GitHub failed; the message is the-loop's own words (never a
    response body or a token)."""


class GitHubOAuth:
    """The web flow and the membership check of one deployment.

    Args:
        settings: :attr:`foundation.settings.Settings.dashboard` (client id and secret,
            GitHub's web and API roots, the allowed organizations and teams).
        session: the HTTP session (a fresh ``requests.Session`` by default).
    """

    def __init__(self, settings: DashboardSettings,
                 session: requests.Session | None = None) -> None:
        import requests  # only where "Sign in with GitHub" is configured: not on the hot path

        self.settings = settings
        self.http = session or requests.Session()
        self._errors = requests.RequestException

    @property
    def redirect_uri(self) -> str:
        """``THE_LOOP_PUBLIC_URL/ui/auth/github/callback`` (the App's callback URL)."""
        return f"{self.settings.public_url}/ui/auth/github/callback"

    def authorize_url(self, state: str) -> str:
        """Where to send the person: GitHub's authorize page for this App."""
        query = urllib.parse.urlencode({
            "client_id": self.settings.github_client_id, "redirect_uri": self.redirect_uri,
            "state": state, "allow_signup": "false"})
        return f"{self.settings.github_web_url}/login/oauth/authorize?{query}"

    def exchange(self, code: str) -> str:
        """The user access token for ``code``.

        Raises:
            OAuthError: GitHub refused the code (expired, used, wrong client) or could
                not be reached.
        """
        try:
            answer = self.http.post(
                f"{self.settings.github_web_url}/login/oauth/access_token",
                data={"client_id": self.settings.github_client_id,
                      "client_secret": self.settings.github_client_secret,
                      "code": code, "redirect_uri": self.redirect_uri},
                headers={"Accept": "application/json"}, timeout=TIMEOUT)
        except self._errors as exc:
            raise OAuthError(f"GitHub could not be reached ({type(exc).__name__})") from None
        try:
            data = answer.json()
        except ValueError:
            data = {}
        token = data.get("access_token") if isinstance(data, dict) else None
        if answer.status_code != 200 or not isinstance(token, str) or not token:
            error = data.get("error") if isinstance(data, dict) else None
            known = error if error in ("bad_verification_code", "incorrect_client_credentials",
                                       "redirect_uri_mismatch") else "refused"
            raise OAuthError(f"GitHub did not exchange the sign-in code ({known}); sign in "
                             "again")
        return token

    def _get(self, token: str, path: str) -> requests.Response:
        try:
            return self.http.get(f"{self.settings.github_api_url}{path}", timeout=TIMEOUT,
                                 headers={"Authorization": f"token {token}",
                                          "Accept": _ACCEPT})
        except self._errors as exc:
            raise OAuthError(f"GitHub could not be reached ({type(exc).__name__})") from None

    def login(self, token: str) -> str:
        """The login of the person ``token`` acts for.

        Raises:
            OAuthError: GitHub refused the token.
        """
        answer = self._get(token, "/user")
        data = answer.json() if answer.status_code == 200 else None
        login = data.get("login") if isinstance(data, dict) else None
        if not isinstance(login, str) or not login:
            raise OAuthError(f"GitHub did not say who signed in (status {answer.status_code})")
        return login

    def allowed(self, token: str, login: str) -> bool:
        """Whether ``login`` is an active member of an allowed organization or team
        (``THE_LOOP_UI_GITHUB_MEMBERS``; any 404 or other answer: not a member).

        Raises:
            OAuthError: GitHub could not be reached.
        """
        quote = urllib.parse.quote
        for entry in self.settings.github_members:
            org, _, team = entry.partition("/")
            path = (f"/orgs/{quote(org)}/teams/{quote(team)}/memberships/{quote(login)}"
                    if team else f"/user/memberships/orgs/{quote(org)}")
            answer = self._get(token, path)
            if answer.status_code != 200:
                continue
            try:
                data = answer.json()
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("state") == "active":
                return True
        return False

    def sign_in(self, code: str) -> tuple[str, bool]:
        """Exchange ``code``, find the login and check the membership.

        Returns:
            ``(login, allowed)``.

        Raises:
            OAuthError: as :meth:`exchange`, :meth:`login`, :meth:`allowed`.
        """
        token = self.exchange(code)
        login = self.login(token)
        return login, self.allowed(token, login)
