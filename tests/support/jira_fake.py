"""A Jira site behind ``responses``, Cloud or Data Center, that keeps its issues and refuses
what the real ones refuse.

:class:`integrations.jira.JiraApi` sends through ``requests``, so ``responses`` intercepts
it (``FakeJira(...).install(mock)``). The site answers the requests the transport makes
("Jira Cloud platform REST API" v3 and v2; "Jira Server platform REST API" v2):

* ``GET /rest/api/2/serverInfo`` -> ``{"baseUrl", "version", "deploymentType", ...}``
  (``deploymentType``: ``Cloud``, ``Server`` or ``DataCenter``);
* ``POST /rest/api/{v}/issue/{key}/comment`` -> 201 ``{"id", "body"}``; the body must be
  the plain string on v2 and an ADF document (``{"type": "doc", ...}``) on v3, else 400
  (:func:`refusal`);
* ``GET /rest/api/{v}/issue/{key}?fields=labels`` and ``PUT /rest/api/{v}/issue/{key}``
  (``update.labels`` ``add``/``remove``, or ``fields.labels``) -> 204;
* ``GET``/``POST /rest/api/{v}/issue/{key}/transitions`` -> the issue's transitions; the
  POST moves the issue to the transition's ``to`` status (204).

Cloud serves v2 and v3 and takes HTTP basic (the account's e-mail and API token); Data
Center / Server serves v2 only (v3 answers 404) and takes a personal access token as
``Authorization: Bearer``. Anything else is 401. ``seen`` lists ``(method, path, json)``.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import responses

#: "Get server info" as both deployments publish it.
SERVER_INFO = "/rest/api/2/serverInfo"
#: Jira's 400 to a v2 comment whose ``body`` is not a string (Data Center reads an
#: object as no text) and to a v3 comment whose ``body`` is not an ADF document.
V2_NOT_TEXT = {"errorMessages": [], "errors": {"comment": "Comment body can not be empty!"}}
V3_NOT_ADF = {"errorMessages": [], "errors": {"comment": "Comment body is not valid!"}}
TOO_LONG = {"errorMessages": [], "errors": {"comment": "The entered text is too long. It "
                                                      "exceeds the allowed limit of "
                                                      "32,767 characters."}}
NO_ISSUE = {"errorMessages": ["Issue does not exist or you do not have permission to see it."],
            "errors": {}}

_ROUTE = re.compile(r"/rest/api/(?P<v>[23])/(?:(?P<info>serverInfo)|issue/(?P<key>[^/?]+)"
                    r"(?P<rest>/comment|/transitions)?)$")

TRANSITIONS: tuple[dict[str, Any], ...] = (
    {"id": "11", "name": "To Do", "to": {"name": "To Do"}},
    {"id": "21", "name": "Start design", "to": {"name": "In Design"}},
    {"id": "31", "name": "Start work", "to": {"name": "In Progress"}},
)


def refusal(version: int, body: Any) -> dict[str, Any] | None:
    """Jira's 400 answer to an add-comment request ``body`` of the wrong form for REST
    ``version``, or ``None`` when the form is right."""
    value = body.get("body") if isinstance(body, dict) else None
    if version == 2 and not (isinstance(value, str) and value.strip()):
        return V2_NOT_TEXT
    if version == 3 and not (isinstance(value, dict) and value.get("type") == "doc"
                             and value.get("version") == 1
                             and isinstance(value.get("content"), list)):
        return V3_NOT_ADF
    return None


def adf_text(doc: dict[str, Any]) -> str:
    """An ADF document of paragraphs, text and hard breaks as its plain text."""
    return "\n\n".join(
        "".join("\n" if n["type"] == "hardBreak" else n.get("text", "")
                for n in block.get("content", []))
        for block in doc["content"])


@dataclass
class Issue:
    status: str = "To Do"
    labels: list[str] = field(default_factory=list)
    #: Each comment's text (a v3 ADF body is kept as its text).
    comments: list[str] = field(default_factory=list)
    #: The REST version each comment came through.
    comment_versions: list[int] = field(default_factory=list)
    #: The longest comment text it takes (Jira's limit is 32,767 characters); a longer
    #: one is refused with Jira's 400, :data:`TOO_LONG`.
    max_comment: int = 32767


@dataclass
class FakeJira:
    """A Jira site at ``base_url``.

    Args:
        deployment: ``Cloud``, ``Server`` or ``DataCenter`` (what serverInfo names).
        user, token: the credentials it accepts (``user`` ``None``: a bearer token).
        server_info: ``None`` answers serverInfo; an ``int`` answers that status instead.
    """

    base_url: str = "https://jira.example.com"
    deployment: str = "DataCenter"
    user: str | None = None
    token: str = "jira-token"
    server_info: int | None = None
    issues: dict[str, Issue] = field(default_factory=dict)
    seen: list[tuple[str, str, Any]] = field(default_factory=list)

    @property
    def versions(self) -> tuple[int, ...]:
        return (2, 3) if self.deployment == "Cloud" else (2,)

    def add_issue(self, key: str, **kw: Any) -> Issue:
        self.issues[key] = Issue(**kw)
        return self.issues[key]

    def install(self, mock: responses.RequestsMock) -> None:
        """Answer every ``base_url/rest/api/...`` request of ``mock``."""
        url = re.compile(re.escape(self.base_url) + r"/rest/api/.*")
        for method in ("GET", "POST", "PUT"):
            mock.add_callback(method, url, callback=self._answer,
                              content_type="application/json")

    def paths(self) -> list[str]:
        return [f"{method} {path}" for method, path, _ in self.seen]

    def _authorized(self, headers: Any) -> bool:
        given = headers.get("Authorization", "")
        if self.user is None:
            return bool(given == f"Bearer {self.token}")
        pair = base64.b64encode(f"{self.user}:{self.token}".encode()).decode()
        return bool(given == f"Basic {pair}")

    def _answer(self, request: Any) -> tuple[int, dict[str, str], str]:
        parts = urllib.parse.urlsplit(request.url)
        body = json.loads(request.body) if request.body else None
        self.seen.append((request.method, parts.path, body))
        status, reply = self._route(request.method, parts, body, request.headers)
        return status, {}, json.dumps(reply) if reply is not None else ""

    def _route(self, method: str, parts: Any, body: Any,
               headers: Any) -> tuple[int, Any]:
        route = _ROUTE.fullmatch(parts.path.removeprefix(
            urllib.parse.urlsplit(self.base_url).path))
        if route is None or int(route["v"]) not in self.versions:
            return 404, None
        version = int(route["v"])
        if route["info"]:
            if method != "GET":
                return 405, None
            if self.server_info is not None:
                return self.server_info, None
            return 200, {"baseUrl": self.base_url, "deploymentType": self.deployment,
                         "version": "1001.0.0" if self.deployment == "Cloud" else "9.12.4",
                         "serverTitle": "Jira"}
        if not self._authorized(headers):
            return 401, {"errorMessages": ["You are not authenticated."], "errors": {}}
        issue = self.issues.get(urllib.parse.unquote(route["key"]).upper())
        if issue is None:
            return 404, NO_ISSUE
        rest = route["rest"]
        if rest == "/comment" and method == "POST":
            refused = refusal(version, body)
            if refused is not None:
                return 400, refused
            value = body["body"]
            if len(value if version == 2 else adf_text(value)) > issue.max_comment:
                return 400, TOO_LONG
            issue.comments.append(value if version == 2 else adf_text(value))
            issue.comment_versions.append(version)
            return 201, {"id": str(10000 + len(issue.comments)), "body": value}
        if rest == "/transitions" and method == "GET":
            return 200, {"transitions": list(TRANSITIONS)}
        if rest == "/transitions" and method == "POST":
            wanted = str(((body or {}).get("transition") or {}).get("id"))
            chosen = next((t for t in TRANSITIONS if t["id"] == wanted), None)
            if chosen is None:
                return 400, {"errorMessages": [], "errors": {
                    "transition": "It seems that you have tried to perform a workflow "
                                  "operation that is not valid for the current state."}}
            issue.status = str(chosen["to"]["name"])
            return 204, None
        if rest is None and method == "GET":
            return 200, {"key": route["key"], "fields": {"labels": list(issue.labels)}}
        if rest is None and method == "PUT":
            return self._edit(issue, body or {})
        return 405, None

    def _edit(self, issue: Issue, body: dict[str, Any]) -> tuple[int, Any]:
        fields = body.get("fields") or {}
        if "labels" in fields:
            issue.labels = [str(label) for label in fields["labels"]]
        for change in (body.get("update") or {}).get("labels") or []:
            if "add" in change and change["add"] not in issue.labels:
                issue.labels.append(str(change["add"]))
            if "remove" in change and change["remove"] in issue.labels:
                issue.labels.remove(change["remove"])
        return 204, None
