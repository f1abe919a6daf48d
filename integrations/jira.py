"""Jira transports: ``api`` (REST v3 on Jira Cloud, v2 on Jira Data Center / Server)
and ``cli`` (a jira-cli binary).

Operations (both transports; ``issue`` is an issue key such as ``PROJ-12``)::

    add-comment(issue, body)       -> {"issue": str, "id": str | None}
    add-label(issue, label)        -> {"issue": str, "label": str}
    transition-issue(issue, name)  -> {"issue": str, "transition": str}

``api`` -- Jira REST API v3 (Cloud) or v2 (Data Center / Server) on a ``requests``
session whose adapter retries with urllib3's ``Retry`` (:func:`jira_retry`, an
:class:`integrations.retry.BoundedRetry`): GET/PUT/DELETE on 429/5xx, POST only on 429
(Jira refused it before acting, so no comment is posted twice), ``Retry-After`` honoured
up to ``max_wait`` seconds. Endpoints: "Add comment" (``POST
/rest/api/{2|3}/issue/{key}/comment``; the body an Atlassian Document Format document on
v3, the plain text on v2), "Edit issue" (``PUT /rest/api/{2|3}/issue/{key}`` with
``{"update": {"labels": [{"add": label}]}}``), "Get transitions" and "Transition issue"
(``GET``/``POST /rest/api/{2|3}/issue/{key}/transitions``; the transition is picked by
its name, or the name of the status it leads to, case-insensitively). Auth: HTTP basic
with the account's email and an API token (Cloud), or a bearer token when no user is
given (a Data Center personal access token).

Jira Data Center / Server serves the same resources under ``/rest/api/2`` ("Jira Server
platform REST API", version 2), where a comment's ``body`` is plain text (wiki markup),
not ADF, and authenticates a personal access token as ``Authorization: Bearer``. Jira
Cloud serves v2 as well, but v3 is its current API and the one that takes ADF.

Which version: the one the transport is given (``THE_LOOP_JIRA_API_VERSION``), else the
site is asked once, before the first operation: ``GET /rest/api/2/serverInfo`` ("Get
server info", served by both, anonymously too) names its ``deploymentType``: ``Cloud``
-> v3, ``Server`` or ``DataCenter`` -> v2. A site that cannot tell (a 4xx answer, no or
another ``deploymentType``) gets the fallback version (the settings' host rule); a
transient failure (no answer, 429, 5xx) fails the operation retriable and is asked again
next time.

``cli`` -- the community jira-cli (github.com/ankitpokhrel/jira-cli) argument shapes,
run with an argument array, no shell, bounded time and output::

    jira issue comment add --no-input -- PROJ-12 "comment body"
    jira issue edit --no-input --label=LABEL -- PROJ-12
    jira issue move -- PROJ-12 "In Progress"

The binary keeps its own configuration and token (``jira init``, ``JIRA_API_TOKEN``).
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import requests
from requests.adapters import HTTPAdapter

from graph.ports import (
    OPERATIONS,
    IntegrationError,
    Jira,
    JiraComment,
    JiraLabel,
    JiraTransition,
    NotFound,
    RateLimited,
    Transport,
    Unavailable,
    provider_text,
)
from integrations.cli import run_bounded
from integrations.retry import MAX_RATE_LIMIT_WAIT, BoundedRetry

__all__ = ["JiraApi", "JiraCli", "adf", "jira_retry"]

_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*-[1-9][0-9]*")

log = logging.getLogger("integrations.jira")

#: The REST versions the transport speaks: 2 (Data Center / Server), 3 (Cloud).
API_VERSIONS = (2, 3)
#: "Get server info" (both deployments serve it under v2) and its ``deploymentType``s.
SERVER_INFO = "/rest/api/2/serverInfo"
DEPLOYMENT_VERSIONS = {"cloud": 3, "server": 2, "datacenter": 2}


def jira_retry(retries: int = 3, max_wait: float = MAX_RATE_LIMIT_WAIT) -> BoundedRetry:
    """Jira's :class:`~integrations.retry.BoundedRetry`: GET/PUT/DELETE on 429/5xx, POST
    on 429 only (Jira refused it before acting), ``Retry-After`` honoured up to
    ``max_wait`` seconds; a 403 is an answer, never retried."""
    return BoundedRetry(
        total=retries,
        backoff_factor=0.5,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=frozenset({"GET", "HEAD", "PUT", "DELETE"}),
        rate_limit_methods=frozenset({"GET", "HEAD", "PUT", "DELETE", "POST", "PATCH"}),
        github_rate_limits=False,
        respect_retry_after_header=True,
        raise_on_status=False,
        max_wait=max_wait,
    )


def adf(text: str) -> dict[str, Any]:
    """Plain text as an Atlassian Document Format document: one paragraph per block of
    lines separated by a blank line, line breaks kept."""
    content: list[dict[str, Any]] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        nodes: list[dict[str, Any]] = []
        for i, line in enumerate(block.split("\n")):
            if i:
                nodes.append({"type": "hardBreak"})
            if line:
                nodes.append({"type": "text", "text": line})
        if nodes:
            content.append({"type": "paragraph", "content": nodes})
    return {"type": "doc", "version": 1, "content": content}


class _JiraBase(Transport):
    """The :class:`graph.ports.Jira` port; ``call`` comes from :class:`graph.ports.Transport`."""

    name = "jira"
    transport = "?"
    operations: frozenset[str] = frozenset(OPERATIONS["jira"])


class JiraApi(_JiraBase):
    """``api`` transport (Jira Cloud REST API v3, Jira Data Center / Server REST API v2).

    Args:
        base_url: the site, e.g. ``https://example.atlassian.net``.
        token: API token (never shown by ``repr``).
        user: the account's email for basic auth; ``None`` sends ``Bearer <token>``.
        api_version: ``3`` (Jira Cloud: ADF comment bodies), ``2`` (Data Center /
            Server: plain-text bodies), or ``None``: ask the site once
            (``serverInfo``, see the module docstring); the composition root passes
            :class:`foundation.settings.JiraSettings` ``api_version``.
        fallback_version: the version used when ``serverInfo`` cannot tell (the
            settings' ``site_api_version``: 3 for ``*.atlassian.net``, else 2).
        timeout: seconds per request.
        retries: urllib3 retries (see :func:`jira_retry`).
        session: a ready session (tests); its adapters are replaced.
    """

    transport = "api"

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        user: str | None = None,
        timeout: float = 15.0,
        retries: int = 3,
        max_wait: float = MAX_RATE_LIMIT_WAIT,
        session: requests.Session | None = None,
        api_version: int | None = 3,
        fallback_version: int = 3,
    ) -> None:
        parsed = urllib.parse.urlparse(base_url)
        if parsed.scheme not in ("https", "http") or not parsed.hostname:
            raise ValueError(
                "THE_LOOP_JIRA_URL must be the site's https:// URL, e.g. "
                "https://example.atlassian.net"
            )
        if api_version not in (None, *API_VERSIONS) or fallback_version not in API_VERSIONS:
            raise ValueError("THE_LOOP_JIRA_API_VERSION must be 2 or 3")
        #: The REST version in use; ``None`` until the site has been asked.
        self.api_version: int | None = api_version
        self.fallback_version = fallback_version
        self._asking = threading.Lock()
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._session = session or requests.Session()
        adapter = HTTPAdapter(max_retries=jira_retry(retries, max_wait))
        self._session.mount("https://", adapter)
        self._session.mount("http://", adapter)
        self._session.headers.update(
            {"Accept": "application/json", "User-Agent": "the-loop (requests)"}
        )
        if user:
            self._session.auth = (user, token)
        else:
            self._session.headers["Authorization"] = f"Bearer {token}"

    def __repr__(self) -> str:
        return f"JiraApi(base_url={self.base_url!r}, api_version={self.api_version})"

    def close(self) -> None:
        self._session.close()

    def version(self, op: str, key: str) -> int:
        """The REST version to speak: the one given, else the site's answer to
        ``GET /rest/api/2/serverInfo`` (asked once; ``deploymentType`` ``Cloud`` -> 3,
        ``Server``/``DataCenter`` -> 2), else ``fallback_version`` when the site cannot
        tell (4xx, no JSON, no or another ``deploymentType``), kept likewise.

        Args:
            op, key: the operation and issue asking (named in errors).

        Raises:
            Unavailable, RateLimited: no answer, 5xx or 429 (retriable; asked again on
                the next call).
        """
        if self.api_version is not None:
            return self.api_version
        with self._asking:
            if self.api_version is None:
                self.api_version = self._ask_site(op, key)
        return self.api_version

    def _ask_site(self, op: str, key: str) -> int:
        where = f"jira {op} on {key}: GET {SERVER_INFO} (choosing the REST version)"
        try:
            response = self._session.get(self.base_url + SERVER_INFO, timeout=self.timeout)
        except requests.RequestException as exc:
            raise Unavailable(f"{where} failed ({type(exc).__name__})",
                              integration=self.name, op=op) from None
        status = response.status_code
        if status == 429:
            retry_after = response.headers.get("Retry-After")
            raise RateLimited(f"{where}: HTTP 429 (rate limited)", integration=self.name,
                              op=op, status=status, retry_after=_seconds(retry_after))
        if status >= 500:
            raise Unavailable(f"{where}: HTTP {status}", integration=self.name, op=op,
                              status=status)
        deployment = ""
        if status < 400:
            try:
                data = response.json()
            except ValueError:
                data = None
            if isinstance(data, dict) and isinstance(data.get("deploymentType"), str):
                deployment = data["deploymentType"]
        version = DEPLOYMENT_VERSIONS.get(deployment.casefold())
        if version is not None:
            log.info("jira: the site is Jira %s: REST v%d", deployment, version)
            return version
        log.warning("jira: %s did not name a known deploymentType (HTTP %d); using REST v%d "
                    "(set THE_LOOP_JIRA_API_VERSION=2 or 3 to choose)", SERVER_INFO, status,
                    self.fallback_version)
        return self.fallback_version

    def _request(
        self, op: str, method: str, key: str, suffix: str = "", body: Any = None
    ) -> Any:
        url = (f"{self.base_url}/rest/api/{self.version(op, key)}/issue/"
               f"{urllib.parse.quote(key, safe='')}{suffix}")
        try:
            response = self._session.request(method, url, json=body, timeout=self.timeout)
        except requests.RequestException as exc:
            raise Unavailable(
                f"jira {op} on {key}: request failed ({type(exc).__name__})",
                integration=self.name, op=op,
            ) from None
        status = response.status_code
        if status >= 400:
            raise _http_error(op, key, status, response.headers.get("Retry-After"),
                              _jira_errors(response))
        if status == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def add_comment(self, issue: str, body: str) -> JiraComment:
        """``add-comment``: ``POST /rest/api/{2|3}/issue/{key}/comment``, the text as an
        ADF document on v3 (:func:`adf`), as the plain string on v2 (Data Center refuses
        an object body: "Can not deserialize instance of java.lang.String").

        Returns:
            ``{"issue": key, "id": str}`` -- the comment id.
        """
        op = "add-comment"
        key = _issue(op, issue)
        text = _text(op, "body", body)
        body_value: Any = adf(text) if self.version(op, key) == 3 else text
        data = self._request(op, "POST", key, "/comment", {"body": body_value}) or {}
        cid = data.get("id")
        return {"issue": key, "id": str(cid) if cid is not None else None}

    def add_label(self, issue: str, label: str,
                  replace_prefix: str | None = None) -> JiraLabel:
        """``add-label``: ``PUT /rest/api/{2|3}/issue/{key}`` with
        ``{"update": {"labels": [{"add": label}, {"remove": old}...]}}`` ("Edit issue";
        adding a present label is a no-op). With ``replace_prefix``, the issue's labels
        are read first (``GET /rest/api/{2|3}/issue/{key}?fields=labels``, "Get issue") and
        every other one starting with the prefix, case-insensitively, is removed.

        Returns:
            ``{"issue": key, "label": label}``
        """
        op = "add-label"
        key = _issue(op, issue)
        name = _label(op, label)
        changes: list[dict[str, str]] = [{"add": name}]
        if replace_prefix:
            data = self._request(op, "GET", key, "?fields=labels") or {}
            present = (data.get("fields") or {}).get("labels") or []
            prefix = replace_prefix.casefold()
            changes += [{"remove": str(old)} for old in present
                        if str(old).casefold().startswith(prefix)
                        and str(old).casefold() != name.casefold()]
        self._request(op, "PUT", key, "", {"update": {"labels": changes}})
        return {"issue": key, "label": name}

    def transition_issue(self, issue: str, name: str) -> JiraTransition:
        """``transition-issue``: ``GET /rest/api/{2|3}/issue/{key}/transitions``, pick the
        transition called ``name`` (or leading to the status ``name``; case-insensitive),
        ``POST`` it.

        Returns:
            ``{"issue": key, "transition": str}`` -- the transition's name as Jira spells it.

        Raises:
            IntegrationError: no such transition from the issue's current status (the
                message lists the available ones; not retriable).
        """
        op = "transition-issue"
        key = _issue(op, issue)
        wanted = _text(op, "name", name).strip().casefold()
        data = self._request(op, "GET", key, "/transitions") or {}
        transitions = [t for t in data.get("transitions") or [] if isinstance(t, dict)]
        chosen = next(
            (t for t in transitions if str(t.get("name", "")).casefold() == wanted), None
        ) or next(
            (
                t
                for t in transitions
                if str((t.get("to") or {}).get("name", "")).casefold() == wanted
            ),
            None,
        )
        if chosen is None:
            names = ", ".join(repr(t.get("name")) for t in transitions) or "none"
            raise IntegrationError(
                f"jira {op} on {key}: no transition {name!r} from its current status "
                f"(available: {names})",
                integration=self.name, op=op,
                reason=f"no transition {name!r} from the current status (available: {names})",
            )
        self._request(op, "POST", key, "/transitions", {"transition": {"id": str(chosen["id"])}})
        return {"issue": key, "transition": str(chosen.get("name"))}


class JiraCli(_JiraBase):
    """``cli`` transport: a jira-cli compatible binary (argument shapes in the module
    docstring).

    Args:
        binary: executable name on ``PATH`` or a path.
        env: the complete environment it runs with (the composition root hands it the
            process's, :meth:`foundation.settings.Settings.child_env`; ``None``: an empty
            one).
        timeout: seconds per run.
        max_output: bytes of output accepted per run.
    """

    transport = "cli"

    def __init__(
        self,
        binary: str = "jira",
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        max_output: int = 1024 * 1024,
    ) -> None:
        self.binary = binary
        self._env = dict(env or {})
        self._env.setdefault("NO_COLOR", "1")
        self.timeout = timeout
        self.max_output = max_output

    def __repr__(self) -> str:
        return f"JiraCli(binary={self.binary!r})"

    def _run(self, op: str, key: str, args: list[str]) -> None:
        result = run_bounded(
            [self.binary, *args], timeout=self.timeout, max_output=self.max_output,
            env=self._env,
        )
        where = f"jira {op} on {key} (cli: {self.binary})"
        if result.error is not None:
            raise IntegrationError(
                f"{where}: cannot run it ({result.error}): install jira-cli or set "
                "THE_LOOP_JIRA_CLI_BINARY", integration=self.name, op=op,
            )
        if result.timed_out:
            raise Unavailable(f"{where}: no answer within {self.timeout:g} s (killed)",
                                   integration=self.name, op=op)
        if result.overflow:
            raise IntegrationError(f"{where}: output larger than {self.max_output} bytes",
                                   integration=self.name, op=op)
        if result.returncode != 0:
            stderr = result.stderr.decode("utf-8", "replace")
            if re.search(r"\b404\b|not found|does not exist", stderr, re.IGNORECASE):
                raise NotFound(f"{where}: not found (exit {result.returncode})",
                               integration=self.name, op=op, status=404)
            raise IntegrationError(f"{where}: exit {result.returncode}",
                                   integration=self.name, op=op,
                                   retriable=bool(re.search(r"\b(429|5\d\d)\b", stderr)))

    def add_comment(self, issue: str, body: str) -> JiraComment:
        """``add-comment``: ``jira issue comment add --no-input -- KEY BODY``.

        Returns:
            ``{"issue": key, "id": None}`` (jira-cli does not print the comment id).
        """
        op = "add-comment"
        key = _issue(op, issue)
        text = _text(op, "body", body)
        self._run(op, key, ["issue", "comment", "add", "--no-input", "--", key, text])
        return {"issue": key, "id": None}

    def add_label(self, issue: str, label: str,
                  replace_prefix: str | None = None) -> JiraLabel:
        """``add-label``: ``jira issue edit --no-input --label=LABEL -- KEY``
        (``replace_prefix`` is not applied: jira-cli cannot list the issue's labels
        without printing the whole issue; older labels stay)."""
        op = "add-label"
        key = _issue(op, issue)
        name = _label(op, label)
        if name.startswith("-"):  # jira-cli reads --label=-x as "remove x"
            raise _bad(op, "the cli transport cannot add a label starting with '-'")
        self._run(op, key, ["issue", "edit", "--no-input", f"--label={name}", "--", key])
        return {"issue": key, "label": name}

    def transition_issue(self, issue: str, name: str) -> JiraTransition:
        """``transition-issue``: ``jira issue move -- KEY NAME``."""
        op = "transition-issue"
        key = _issue(op, issue)
        state = _text(op, "name", name).strip()
        self._run(op, key, ["issue", "move", "--", key, state])
        return {"issue": key, "transition": state}


#: Longest text of Jira's error answer carried in a message.
MAX_ERROR_TEXT = 300


class JiraErrors(NamedTuple):
    """What Jira said of a refusal ("Status codes": ``{"errorMessages": [...], "errors":
    {"field": "message"}}``), each one safe line (:func:`graph.ports.provider_text`:
    bounded to :data:`MAX_ERROR_TEXT`, no control characters).

    Attributes:
        fields: the ``errors`` object, ``field: message; ...`` -- quoted in the error's
            message (it names the issue's fields, not the request).
        reason: the ``errorMessages`` then the ``errors`` -- the error's ``reason`` only
            (free text that may quote the request stays out of the message).
    """

    fields: str = ""
    reason: str = ""


def _jira_errors(response: requests.Response) -> JiraErrors:
    """Jira's error answer as :class:`JiraErrors` (empty when it is not Jira's JSON)."""
    try:
        data = response.json()
    except ValueError:
        return JiraErrors()
    if not isinstance(data, dict):
        return JiraErrors()
    messages = data.get("errorMessages")
    said = [str(m) for m in messages] if isinstance(messages, list) else []
    errors = data.get("errors")
    fields = [f"{k}: {v}" for k, v in errors.items()] if isinstance(errors, dict) else []
    return JiraErrors(provider_text("; ".join(fields), MAX_ERROR_TEXT),
                      provider_text("; ".join(said + fields), MAX_ERROR_TEXT))


def _http_error(op: str, key: str, status: int, retry_after: str | None,
                errors: JiraErrors = JiraErrors()) -> IntegrationError:  # noqa: B008
    """The error of Jira's answer ``status`` to ``op`` on ``key``: its message quotes
    ``errors.fields``; its ``reason`` is ``errors.reason`` (:func:`_jira_errors`)."""
    message = f"jira {op} on {key} failed: HTTP {status}"
    if errors.fields:
        message += f" (Jira: {errors.fields})"
    if status == 404:
        return NotFound(message + " (no such issue, or not visible to this account)",
                        integration="jira", op=op, status=status, reason=errors.reason)
    if status == 429:
        message += " (rate limited" + (f"; retry-after {retry_after}" if retry_after else "") + ")"
        return RateLimited(message, integration="jira", op=op, status=status,
                           retry_after=_seconds(retry_after), reason=errors.reason)
    if status >= 500:
        return Unavailable(message, integration="jira", op=op, status=status, reason=errors.reason)
    if status in (401, 403):
        message += (" (check THE_LOOP_JIRA_USER and THE_LOOP_JIRA_TOKEN, and the account's "
                    "permission on the project)")
    elif status == 400:
        message += " (rejected: see the issue's fields and workflow)"
    return IntegrationError(message, integration="jira", op=op, status=status, reason=errors.reason)


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _issue(op: str, issue: Any) -> str:
    if not isinstance(issue, str) or not _KEY.fullmatch(issue.strip()):
        raise _bad(op, f"issue must be an issue key such as PROJ-12, got {issue!r}")
    return issue.strip().upper()


def _label(op: str, label: Any) -> str:
    name = _text(op, "label", label).strip()
    if any(c.isspace() for c in name):
        raise _bad(op, "a Jira label cannot contain spaces")
    return name


def _text(op: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(op, f"{name} must be a non-empty string")
    return value


def _bad(op: str, detail: str) -> IntegrationError:
    return IntegrationError(f"jira {op}: bad parameters ({detail})", integration="jira", op=op)


if TYPE_CHECKING:  # mypy checks that both transports implement the port

    def _implement_the_port(api: JiraApi, cli: JiraCli) -> tuple[Jira, Jira]:
        return api, cli
