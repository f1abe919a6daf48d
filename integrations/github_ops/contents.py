"""Repository contents: read a file (through its blob when it is large) and commit one."""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from typing import Any

from graph.ports import Committed, File, IntegrationError, NotFound
from integrations.github_ops.params import _bad, _repo_path, _text
from integrations.github_ops.transport import RestTransport


class ContentOperations(RestTransport):
    """``get-file``, ``put-file``."""

    def get_file(self, repo: str, path: str, ref: str | None = None) -> File:
        """``get-file``: ``GET /repos/{owner}/{repo}/contents/{path}?ref=`` ("Get repository
        content"). Files of 1-100 MB, for which that endpoint returns no content, are read
        through ``GET /repos/{owner}/{repo}/git/blobs/{file_sha}`` ("Get a blob").

        Args:
            path: file path in the repository (a leading ``/`` is ignored).
            ref: branch, tag or commit sha; ``None`` means the default branch.

        Returns:
            ``{"path": str, "sha": str, "ref": ref, "text": str}`` -- ``sha`` is the blob
            sha, ``ref`` echoes the argument, ``text`` is the UTF-8-decoded content.

        Raises:
            NotFound: no such path or ref, or the path is a directory, symlink or submodule.
            IntegrationError: the file is not UTF-8 text (not retriable).
        """
        op = "get-file"
        clean = _text(op, "path", path).strip("/")
        if not clean:
            raise NotFound(
                f"github {op}: {repo}: the repository root is a directory, not a file",
                integration=self.name,
                op=op,
                status=None,
            )
        if ref is not None:
            ref = _text(op, "ref", ref)
        base = _repo_path(op, repo)
        target = f"{repo}:{clean}" + (f"@{ref}" if ref else "")
        query = {"ref": ref} if ref is not None else None
        content = self._request(
            op, "GET", f"{base}/contents/{urllib.parse.quote(clean)}", target=target, query=query
        ).data
        if not isinstance(content, dict) or content.get("type") != "file":
            kind = "directory" if isinstance(content, list) else (content or {}).get("type")
            raise NotFound(
                f"github {op}: {target} is a {kind}, not a file",
                integration=self.name,
                op=op,
                status=None,
            )
        if content.get("encoding") == "base64":
            raw_b64, sha = content.get("content"), content["sha"]
        else:  # "none": a file larger than 1 MB; fetch the blob instead
            blob = self._request(
                op, "GET", f"{base}/git/blobs/{content['sha']}", target=target
            ).data
            raw_b64, sha = blob.get("content"), blob["sha"]
        try:
            text = base64.b64decode(raw_b64 or "").decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise IntegrationError(
                f"github {op}: {target} is not UTF-8 text", integration=self.name, op=op
            ) from None
        return {"path": content["path"], "sha": sha, "ref": ref, "text": text}

    def put_file(
        self,
        repo: str,
        path: str,
        branch: str,
        text: str,
        sha: str | None = None,
        message: str | None = None,
    ) -> Committed:
        """``put-file``: ``PUT /repos/{owner}/{repo}/contents/{path}`` ("Create or update
        file contents"): one commit on ``branch`` that sets ``path`` to ``text``.

        Args:
            sha: the blob sha the caller read (``get-file``); GitHub refuses the write with
                409 when the file has changed since (a precondition). ``None`` creates the
                file (GitHub answers 422 when it already exists).
            message: the commit message (default ``the-loop: update <path>``).

        Returns:
            ``{"path": str, "sha": str, "commit": str}`` -- the new blob sha and the commit.

        Raises:
            IntegrationError: status 409 (stale ``sha``) or 422, not retriable. Never
                retried on 5xx either: a retried write could land on top of itself.
        """
        op = "put-file"
        clean = _text(op, "path", path).strip("/")
        where = _text(op, "branch", branch)
        if not isinstance(text, str):
            raise _bad(op, f"text must be a string, got {type(text).__name__}")
        if sha is not None:
            sha = _text(op, "sha", sha)
        msg = message if message is not None else f"the-loop: update {clean}"
        msg = _text(op, "message", msg)
        body: dict[str, Any] = {
            "message": msg,
            "content": base64.b64encode(text.encode("utf-8")).decode("ascii"),
            "branch": where,
        }
        if sha is not None:
            body["sha"] = sha
        target = f"{repo}:{clean}@{where}"
        url = f"{_repo_path(op, repo)}/contents/{urllib.parse.quote(clean)}"
        data = self._request(op, "PUT", url, target=target, body=body).data
        return {
            "path": data["content"]["path"],
            "sha": data["content"]["sha"],
            "commit": data["commit"]["sha"],
        }
