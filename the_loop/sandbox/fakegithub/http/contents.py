"""Repository contents: read a file or list a directory at a ref, write a file (one
commit), and read a blob. A git-backed repository is read with git; an in-memory one
from its stored files. Served at the API root and under ``/api/v3``."""

from __future__ import annotations

import base64
import re
from typing import Any

from flask import Blueprint, Response, jsonify, request

from graph.ports import IntegrationError
from the_loop.sandbox.fakegithub.git import blob_sha
from the_loop.sandbox.fakegithub.http.common import (
    api_base,
    b64_lines,
    created,
    error,
    fake,
    invalid_request,
    json_body,
    lookup,
    not_found,
)
from the_loop.sandbox.fakegithub.http.shapes import content_json, listed_json
from the_loop.sandbox.fakegithub.store import Repo

__all__ = ["bp"]

bp = Blueprint("contents", __name__)


@bp.get("/repos/<owner>/<name>/contents/", defaults={"path": ""})
@bp.get("/repos/<owner>/<name>/contents/<path:path>")
def get_contents(owner: str, name: str, path: str) -> Response:
    """"Get repository content" at ``?ref=`` (default branch): a file, or a directory's
    entries (files without their content)."""
    path = path.strip("/")
    with fake().lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        ref = request.args.get("ref") or r.default_branch
        if r.git_dir is not None:
            return git_contents(r, ref, path)
        text = r.files.get((ref, path))
        if text is not None:
            return jsonify(content_json(r, ref, path, text))
        entries = memory_listing(r, ref, path)
        if not entries:
            return not_found()
        return jsonify(entries)


def memory_listing(r: Repo, ref: str, path: str) -> list[dict[str, Any]]:
    """The entries of directory ``path`` at ``ref`` of an in-memory repository, by path
    (``[]``: not a directory there)."""
    prefix = f"{path}/" if path else ""
    entries: dict[str, dict[str, Any]] = {}
    for (file_ref, file_path), file_text in sorted(r.files.items()):
        if file_ref != ref or not file_path.startswith(prefix):
            continue
        head, sep, _ = file_path[len(prefix) :].partition("/")
        child = prefix + head
        if sep:
            entries.setdefault(
                child,
                {
                    "type": "dir",
                    "name": head,
                    "path": child,
                    "sha": blob_sha(child.encode()),
                    "size": 0,
                },
            )
        else:
            entries[child] = listed_json(r, ref, child, file_text)
    return list(entries.values())


def git_contents(r: Repo, ref: str, path: str) -> Response:
    """The contents endpoint of a git-backed repository, read with git at ``ref``."""
    gh = fake()
    text = gh.git_text(r, ref, path) if path else None
    if text is not None:
        return jsonify(content_json(r, ref, path, text))
    entries = gh.git_tree(r, ref, path)
    if not entries:
        return not_found()
    listing = []
    for kind, sha, child in entries:
        if kind == "tree":
            listing.append({"type": "dir", "name": child.rsplit("/", 1)[-1],
                            "path": child, "sha": sha, "size": 0})
        elif kind == "blob":
            listing.append(listed_json(r, ref, child, gh.git_text(r, ref, child) or ""))
    return jsonify(listing)


def blob_json(r: Repo, sha: str, data: bytes) -> dict[str, Any]:
    """GitHub's blob ``sha`` of ``r`` holding ``data`` (base64 in lines)."""
    return {
        "sha": sha,
        "node_id": f"B_{sha}",
        "size": len(data),
        "url": f"{api_base()}/repos/{r.full_name}/git/blobs/{sha}",
        "content": b64_lines(data),
        "encoding": "base64",
    }


@bp.get("/repos/<owner>/<name>/git/blobs/<sha>")
def get_blob(owner: str, name: str, sha: str) -> Response:
    """"Get a blob": git's object in a git-backed repository, else a stored file whose
    blob sha is ``sha``."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        if r.git_dir is not None:
            blob = gh.git_blob(r, sha) if re.fullmatch(r"[0-9a-f]{40}", sha) else None
            if blob is None:
                return not_found()
            return jsonify(blob_json(r, sha, blob))
        for text in r.files.values():
            data = text.encode("utf-8")
            if blob_sha(data) == sha:
                return jsonify(blob_json(r, sha, data))
        return not_found()


@bp.put("/repos/<owner>/<name>/contents/<path:path>")
def put_contents(owner: str, name: str, path: str) -> Response:
    """"Create or update file contents" on ``branch`` (default branch): 201 for a new
    file, 200 for an update; 422 without ``sha`` for an existing file, 409 for a ``sha``
    that is not the file's."""
    gh = fake()
    path = path.strip("/")
    body = json_body()
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("message"), str)
        or not isinstance(body.get("content"), str)
    ):
        return invalid_request()
    try:
        data = base64.b64decode(body["content"], validate=True)
        text = data.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return error(422, "content is not valid Base64")
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        branch = body.get("branch") or r.default_branch
        existed = gh.file(r.full_name, path, branch) is not None
        sha = body.get("sha")
        try:
            put = gh.put_file(r.full_name, path, branch, text, sha=sha or None,
                              message=body["message"])
        except IntegrationError as exc:
            if exc.status == 409:
                return error(409, f"{path} does not match {sha}")
            return error(422, 'Invalid request.\n\n"sha" wasn\'t supplied.')
        resp = jsonify(
            {
                "content": listed_json(r, branch, path, text),
                "commit": {
                    "sha": put["commit"],
                    "message": body["message"],
                    "url": f"{api_base()}/repos/{r.full_name}/git/commits/{put['commit']}",
                },
            }
        )
    return resp if existed else created(resp)
