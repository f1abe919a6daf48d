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
           "minimal_repo_doc", "repo_json", "user_doc", "user_json"]


def user_json(login: str, user_id: int | None = None) -> dict[str, Any]:
    """GitHub's "simple-user" (every required field of its OpenAPI schema): the
    account that has ``login`` now, or the one with ``user_id`` (a comment's author
    keeps their id when a new account takes the login)."""
    account = fake().user(login)
    return user_doc(login, int(account["id"]) if user_id is None else user_id,
                    str(account["type"]), api_base(), web_base())


def user_doc(login: str, user_id: int, kind: str, api_root: str,
             web_root: str) -> dict[str, Any]:
    """:func:`user_json` from its parts, outside a request (``kind``: ``User``,
    ``Bot`` or ``Organization``; ``api_root``/``web_root``: the fake's API and web
    roots)."""
    api = f"{api_root}/users/{login}"
    return {
        "login": login,
        "id": user_id,
        "node_id": f"U_{login}",
        "avatar_url": f"{web_root}/avatars/{login}",
        "gravatar_id": "",
        "type": kind,
        "site_admin": False,
        "url": api,
        "html_url": f"{web_root}/{login}",
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


#: "minimal-repository"'s URL fields: name -> path under the repository's API URL.
_REPO_URLS = {
    "archive_url": "/{archive_format}{/ref}", "assignees_url": "/assignees{/user}",
    "blobs_url": "/git/blobs{/sha}", "branches_url": "/branches{/branch}",
    "collaborators_url": "/collaborators{/collaborator}",
    "comments_url": "/comments{/number}", "commits_url": "/commits{/sha}",
    "compare_url": "/compare/{base}...{head}", "contents_url": "/contents/{+path}",
    "contributors_url": "/contributors", "deployments_url": "/deployments",
    "downloads_url": "/downloads", "events_url": "/events", "forks_url": "/forks",
    "git_commits_url": "/git/commits{/sha}", "git_refs_url": "/git/refs{/sha}",
    "git_tags_url": "/git/tags{/sha}", "hooks_url": "/hooks",
    "issue_comment_url": "/issues/comments{/number}",
    "issue_events_url": "/issues/events{/number}", "issues_url": "/issues{/number}",
    "keys_url": "/keys{/key_id}", "labels_url": "/labels{/name}",
    "languages_url": "/languages", "merges_url": "/merges",
    "milestones_url": "/milestones{/number}",
    "notifications_url": "/notifications{?since,all,participating}",
    "pulls_url": "/pulls{/number}", "releases_url": "/releases{/id}",
    "stargazers_url": "/stargazers", "statuses_url": "/statuses/{sha}",
    "subscribers_url": "/subscribers", "subscription_url": "/subscription",
    "tags_url": "/tags", "teams_url": "/teams", "trees_url": "/git/trees{/sha}",
}


def minimal_repo_doc(r: Repo, owner: dict[str, Any], api_root: str,
                     web_root: str) -> dict[str, Any]:
    """GitHub's "minimal-repository" (every required field of its OpenAPI schema) of
    ``r``, owned by ``owner`` (a :func:`user_doc`), outside a request."""
    api = f"{api_root}/repos/{r.full_name}"
    return {
        "id": r.id, "node_id": f"R_{r.id}", "name": r.full_name.partition("/")[2],
        "full_name": r.full_name, "owner": owner, "private": r.private,
        "html_url": f"{web_root}/{r.full_name}", "description": None, "fork": False,
        "url": api, **{k: api + v for k, v in _REPO_URLS.items()},
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
