"""GitHub's JSON for what more than one resource family answers with: users, repositories,
labels, issue comments and file contents, rendered from the fake's state with the API and
web roots of the current request (call them while Flask serves one, with the fake's lock
held where they read a repository)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from the_loop.sandbox.fakegithub.git import blob_sha
from the_loop.sandbox.fakegithub.http.common import api_base, b64_lines, fake, web_base
from the_loop.sandbox.fakegithub.store import Repo

__all__ = ["comment_json", "content_json", "issue_labels_json", "label_json", "listed_json",
           "repo_json", "user_json"]


def user_json(login: str, user_id: int | None = None) -> dict[str, Any]:
    """GitHub's "simple-user" (every required field of its OpenAPI schema): the
    account that has ``login`` now, or the one with ``user_id`` (a comment's author
    keeps their id when a new account takes the login)."""
    api = f"{api_base()}/users/{login}"
    web = web_base()
    account = fake().user(login)
    return {
        "login": login,
        "id": int(account["id"]) if user_id is None else user_id,
        "node_id": f"U_{login}",
        "avatar_url": f"{web}/avatars/{login}",
        "gravatar_id": "",
        "type": str(account["type"]),
        "site_admin": False,
        "url": api,
        "html_url": f"{web}/{login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
    }


def repo_json(r: Repo) -> dict[str, Any]:
    """GitHub's repository (the fields the-loop and the OpenAPI check read)."""
    owner, _, name = r.full_name.partition("/")
    return {
        "id": r.id,
        "node_id": f"R_{r.id}",
        "name": name,
        "full_name": r.full_name,
        "owner": user_json(owner),
        "private": r.private,
        "visibility": "private" if r.private else "public",
        "fork": False,
        "archived": False,
        "html_url": f"{web_base()}/{r.full_name}",
        "url": f"{api_base()}/repos/{r.full_name}",
        "default_branch": r.default_branch,
    }


def label_json(r: Repo, label: dict[str, Any]) -> dict[str, Any]:
    """GitHub's label, from a stored one (``{"id", "name", "color", "description"}``)."""
    quoted = urllib.parse.quote(label["name"], safe="")
    return {
        "id": label["id"],
        "node_id": f"LA_{label['id']}",
        "url": f"{api_base()}/repos/{r.full_name}/labels/{quoted}",
        "name": label["name"],
        "color": label["color"],
        "description": label["description"] or None,
        "default": False,
    }


def issue_labels_json(r: Repo, number: int) -> list[dict[str, Any]]:
    """The labels on issue or pull request ``number``, in the order they were put on."""
    return [label_json(r, r.labels[n.lower()]) for n in r.issue_labels.get(number, [])]


def comment_json(c: dict[str, Any]) -> dict[str, Any]:
    """GitHub's issue comment, from a stored one."""
    base = f"{api_base()}/repos/{c['repo']}/issues"
    return {
        "id": c["id"],
        "node_id": f"IC_{c['id']}",
        "url": f"{base}/comments/{c['id']}",
        "html_url": f"{web_base()}/{c['repo']}/issues/{c['number']}#issuecomment-{c['id']}",
        "issue_url": f"{base}/{c['number']}",
        "body": c["body"],
        "user": user_json(c["user"], c.get("user_id")),
        "created_at": c["created_at"],
        "updated_at": c["updated_at"],
        "author_association": "NONE",
    }


def content_json(r: Repo, ref: str, path: str, text: str) -> dict[str, Any]:
    """GitHub's "content-file" of ``path`` at ``ref``: base64 ``content`` in lines, or
    ``encoding: "none"`` and no content above the fake's ``contents_inline_limit``."""
    data = text.encode("utf-8")
    sha = blob_sha(data)
    inline = len(data) <= fake().contents_inline_limit
    url = f"{api_base()}/repos/{r.full_name}/contents/{path}?ref={ref}"
    return {
        "type": "file",
        "encoding": "base64" if inline else "none",
        "size": len(data),
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "content": b64_lines(data) if inline else "",
        "sha": sha,
        "url": url,
        "git_url": f"{api_base()}/repos/{r.full_name}/git/blobs/{sha}",
        "html_url": f"{web_base()}/{r.full_name}/blob/{ref}/{path}",
        "download_url": None,
        "_links": {"self": url},
    }


def listed_json(r: Repo, ref: str, path: str, text: str) -> dict[str, Any]:
    """:func:`content_json` without ``content`` and ``encoding``: a file as a directory
    listing or a contents write shows it."""
    item = content_json(r, ref, path, text)
    for key in ("content", "encoding"):
        item.pop(key)
    return item
