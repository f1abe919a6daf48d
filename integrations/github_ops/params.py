"""Parameter checks and answer shapes shared by the GitHub operation areas.

Each check takes the operation name ``op`` and raises the not-retriable
:class:`graph.ports.IntegrationError` "github OP: bad parameters (...)" naming the
parameter; each shape turns GitHub's JSON into the port's result type.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from graph.ports import IntegrationError, PullRequest, User


def _repo_path(op: str, repo: str) -> str:
    if not isinstance(repo, str):
        raise _bad(op, f"repo must be 'OWNER/NAME', got {repo!r}")
    owner, _, name = repo.partition("/")
    if not owner or not name or "/" in name or any(c.isspace() for c in repo):
        raise _bad(op, f"repo must be 'OWNER/NAME', got {repo!r}")
    if not re.fullmatch(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+", repo):
        raise _bad(op, f"repo must be 'OWNER/NAME', got {repo!r}")
    return f"/repos/{repo}"


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _login(user: Any) -> str:
    if isinstance(user, dict) and isinstance(user.get("login"), str):
        return user["login"]
    return "ghost"


def fields(op: str, data: Any, **types: type) -> dict[str, Any]:
    """``data`` (a JSON object) when each named field has its type, else the error saying
    which are missing (never the answer's text)."""
    if isinstance(data, dict) and all(
            isinstance(data.get(k), t) and not isinstance(data.get(k), bool)
            for k, t in types.items()):
        return data
    raise IntegrationError(f"github {op}: no {' and '.join(types)} in GitHub's answer",
                           integration="github", op=op)


def _account(op: str, data: Any) -> User:
    """GitHub's user JSON as ``{"login", "id", "type"}``."""
    found = fields(op, data, login=str, id=int)
    return {"login": found["login"], "id": found["id"], "type": str(found.get("type") or "User")}


def _user_id(user: Any) -> int | None:
    uid = user.get("id") if isinstance(user, dict) else None
    return uid if isinstance(uid, int) and not isinstance(uid, bool) else None


def _label_names(data: Any) -> list[str]:
    if isinstance(data, dict):  # tolerate a {"labels": [...]} envelope
        data = data.get("labels", [])
    return [item["name"] for item in data or [] if isinstance(item, dict) and "name" in item]


def _pull(pr: Any) -> PullRequest:
    """The :class:`~graph.ports.PullRequest` of GitHub's pull request JSON."""
    return {
        "number": pr["number"],
        "head_sha": pr["head"]["sha"],
        "head_ref": pr["head"]["ref"],
        "base_ref": pr["base"]["ref"],
        "state": pr["state"],
        "draft": bool(pr.get("draft", False)),
        "html_url": str(pr.get("html_url") or ""),
        "head_repo": _head_repo(pr["head"]),
        "maintainer_can_modify": pr.get("maintainer_can_modify") is True,
        "merged": pr.get("merged") is True,
        "merged_by": (_login(pr["merged_by"]) if isinstance(pr.get("merged_by"), dict)
                      else None),
        "node_id": str(pr.get("node_id") or ""),
        "body": pr.get("body") if isinstance(pr.get("body"), str) else "",
    }


def _head_repo(head: Any) -> str | None:
    """``head.repo.full_name`` (``null`` when the fork was deleted)."""
    repo = head.get("repo") if isinstance(head, dict) else None
    name = repo.get("full_name") if isinstance(repo, dict) else None
    return name if isinstance(name, str) else None


def _branch(op: str, name: str, value: Any) -> str:
    text = _text(op, name, value)
    if ":" in text or any(c.isspace() for c in text) or text.startswith(("-", "/")):
        raise _bad(op, f"{name} must be a branch name of the repository, got {value!r}")
    return text


def _flag(op: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _bad(op, f"{name} must be true or false, got {value!r}")
    return value


def _bad(op: str, detail: str) -> IntegrationError:
    return IntegrationError(f"github {op}: bad parameters ({detail})", integration="github", op=op)


def _number(op: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        if isinstance(value, str) and value.isdigit() and int(value) >= 1:
            return int(value)
        raise _bad(op, f"{name} must be a positive integer, got {value!r}")
    return value

def _text(op: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(op, f"{name} must be a non-empty string, got {value!r}")
    return value
