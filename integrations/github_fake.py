"""The in-memory fake GitHub: the :class:`graph.ports.GitHub` port over plain dicts,
recording every write as a Prow-style action string (``o/r#1:add-label:x``).

For graph, hook and worker tests, and for local development without a GitHub (``the-loop``
run against a fake). It implements every GitHub operation with the same parameters and
result shapes as the real transports (:class:`integrations.github_ops.GitHubOperations`);
``tests/integrations/test_github_fake_contract.py`` runs the same cases against both.

State is plain dicts, so tests can seed and inspect it directly:
``files[(repo, ref, path)]``, ``labels[(repo, number)]``, ``repo_labels[repo]``,
``comments[(repo, number)]``, ``pulls[(repo, number)]`` (the ``get-pull-request`` result),
``pull_files[(repo, number)]``, ``requested[(repo, number)]``, ``reviews[(repo, number)]``,
``permissions[(repo, login)]``, ``check_runs[id]``; ``actions`` lists the writes.
Seeding: :meth:`FakeGitHub.add_file`, :meth:`~FakeGitHub.add_pull`,
:meth:`~FakeGitHub.add_review`, :meth:`~FakeGitHub.set_permission`.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

from graph.ports import OPERATIONS, IntegrationError, NotFound, Transport
from integrations.github_ops import PERMISSIONS


def blob_sha(text: str) -> str:
    """Git's blob sha of ``text`` (what GitHub reports as a file's ``sha``)."""
    data = text.encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _not_found(op: str, what: str) -> NotFound:
    return NotFound(f"no such {what}", integration="github", op=op, status=404)


class FakeGitHub(Transport):
    """Every GitHub operation, in memory (see the module docstring)."""

    name = "github"
    transport = "fake"
    operations = frozenset(OPERATIONS["github"])

    def __init__(self) -> None:
        self.files: dict[tuple[str, str, str], str] = {}
        self.labels: dict[tuple[str, int], list[str]] = {}
        self.repo_labels: dict[str, set[str]] = {}
        self.comments: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.actions: list[str] = []
        self.pulls: dict[tuple[str, int], dict[str, Any]] = {}
        self.pull_files: dict[tuple[str, int], list[str]] = {}
        self.requested: dict[tuple[str, int], list[str]] = {}
        self.reviews: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.permissions: dict[tuple[str, str], str] = {}
        self.check_runs: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1000)

    # -- seeding ----------------------------------------------------------------------

    def add_file(self, repo: str, path: str, text: str, ref: str = "main") -> None:
        """Seed ``path`` on ``ref`` with ``text``."""
        self.files[(repo, ref, path)] = text

    def add_pull(
        self,
        repo: str,
        number: int,
        *,
        head_sha: str,
        head_ref: str,
        base_ref: str = "main",
        state: str = "open",
        files: list[str] | tuple[str, ...] = (),
    ) -> None:
        self.pulls[(repo, number)] = {
            "number": number,
            "head_sha": head_sha,
            "head_ref": head_ref,
            "base_ref": base_ref,
            "state": state,
        }
        self.pull_files[(repo, number)] = list(files)

    def add_review(
        self, repo: str, number: int, user: str, state: str = "APPROVED", *,
        commit_id: str | None = None,
    ) -> int:
        rid = next(self._ids)
        head = self.pulls.get((repo, number), {}).get("head_sha")
        self.reviews.setdefault((repo, number), []).append(
            {"id": rid, "user": user, "state": state, "commit_id": commit_id or head}
        )
        return rid

    def set_permission(self, repo: str, login: str, role: str) -> None:
        self.permissions[(repo, login.lower())] = role

    # -- operations -------------------------------------------------------------------

    def get_repository(self, repo: str) -> dict[str, Any]:
        return {"full_name": repo, "default_branch": "main"}

    def get_pull_request(self, repo: str, number: int) -> dict[str, Any]:
        try:
            return self.pulls[(repo, number)]
        except KeyError:
            raise _not_found("get-pull-request", "pull request") from None

    def add_label(self, repo: str, number: int, label: str) -> dict[str, Any]:
        labels = self.labels.setdefault((repo, number), [])
        if label not in labels:
            labels.append(label)
        self.actions.append(f"{repo}#{number}:add-label:{label}")
        return {"labels": list(labels)}

    def remove_label(self, repo: str, number: int, label: str) -> dict[str, Any]:
        labels = self.labels.setdefault((repo, number), [])
        if label not in labels:
            return {"labels": None}  # GitHub's 404 for a label not on the issue
        labels.remove(label)
        self.actions.append(f"{repo}#{number}:remove-label:{label}")
        return {"labels": list(labels)}

    def ensure_label(
        self, repo: str, label: str, color: str = "ededed", description: str = ""
    ) -> dict[str, Any]:
        existing = self.repo_labels.setdefault(repo, set())
        created = label not in existing
        if created:
            existing.add(label)
            self.actions.append(f"{repo}:create-label:{label}")
        return {"label": label, "created": created}

    def comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        cid = next(self._ids)
        self.comments.setdefault((repo, number), []).append(
            {"id": cid, "user": "the-loop[bot]", "body": body}
        )
        self.actions.append(f"{repo}#{number}:comment:{cid}")
        return {"id": cid, "url": f"https://github.test/{repo}/issues/{number}#c{cid}"}

    def update_comment(self, repo: str, comment_id: int, body: str) -> dict[str, Any]:
        for comments in self.comments.values():
            for c in comments:
                if c["id"] == comment_id:
                    c["body"] = body
                    self.actions.append(f"{repo}:update-comment:{comment_id}")
                    return {"id": comment_id, "url": ""}
        raise _not_found("update-comment", "comment")

    def list_comments(self, repo: str, number: int) -> dict[str, Any]:
        return {"comments": [dict(c) for c in self.comments.get((repo, number), [])]}

    def add_reaction(self, repo: str, comment_id: int, content: str) -> dict[str, Any]:
        self.actions.append(f"{repo}:add-reaction:{comment_id}:{content}")
        return {"id": next(self._ids)}

    def get_file(self, repo: str, path: str, ref: str | None = None) -> dict[str, Any]:
        key = (repo, ref or "main", path.strip("/"))
        if key not in self.files:
            raise _not_found("get-file", "file")
        text = self.files[key]
        return {"path": key[2], "sha": blob_sha(text), "ref": ref, "text": text}

    def put_file(
        self,
        repo: str,
        path: str,
        branch: str,
        text: str,
        sha: str | None = None,
        message: str | None = None,
    ) -> dict[str, Any]:
        key = (repo, branch, path.strip("/"))
        current = self.files.get(key)
        if current is not None and sha is None:
            raise IntegrationError("sha wasn't supplied", integration="github", op="put-file",
                                   status=422)
        if sha is not None and (current is None or blob_sha(current) != sha):
            raise IntegrationError("stale sha", integration="github", op="put-file",
                                   status=409)
        self.files[key] = text
        self.actions.append(f"{repo}:put-file:{branch}:{key[2]}")
        commit = hashlib.sha1(f"{key}:{next(self._ids)}".encode(),
                              usedforsecurity=False).hexdigest()
        return {"path": key[2], "sha": blob_sha(text), "commit": commit}

    def list_pull_files(self, repo: str, number: int) -> dict[str, Any]:
        if (repo, number) not in self.pulls and (repo, number) not in self.pull_files:
            raise _not_found("list-pull-files", "pull request")
        return {"files": list(self.pull_files.get((repo, number), []))}

    def request_reviewers(
        self, repo: str, number: int, reviewers: list[str]
    ) -> dict[str, Any]:
        if (repo, number) not in self.pulls:
            raise _not_found("request-reviewers", "pull request")
        requested = self.requested.setdefault((repo, number), [])
        for login in reviewers:
            if login not in requested:
                requested.append(login)
            self.actions.append(f"{repo}#{number}:request-reviewers:{login}")
        return {"requested": list(requested)}

    def get_permission(self, repo: str, login: str) -> dict[str, Any]:
        role = self.permissions.get((repo, login.lower()), "none")
        return {"permission": role if role in PERMISSIONS else "none"}

    def list_reviews(self, repo: str, number: int) -> dict[str, Any]:
        if (repo, number) not in self.pulls:
            raise _not_found("list-reviews", "pull request")
        return {"reviews": [dict(r) for r in self.reviews.get((repo, number), [])]}

    def create_check_run(
        self,
        repo: str,
        head_sha: str,
        name: str,
        status: str,
        conclusion: str | None = None,
        title: str | None = None,
        summary: str | None = None,
    ) -> dict[str, Any]:
        cid = next(self._ids)
        self.check_runs[cid] = {
            "id": cid, "repo": repo, "head_sha": head_sha, "name": name,
            "status": "completed" if conclusion else status, "conclusion": conclusion,
            "title": title, "summary": summary,
        }
        self.actions.append(f"{repo}:create-check-run:{name}")
        return {"id": cid}

    def update_check_run(
        self,
        repo: str,
        check_run_id: int,
        status: str | None = None,
        conclusion: str | None = None,
        title: str | None = None,
        summary: str | None = None,
    ) -> dict[str, Any]:
        run = self.check_runs.get(check_run_id)
        if run is None or run["repo"] != repo:
            raise _not_found("update-check-run", "check run")
        for key, value in (("status", status), ("conclusion", conclusion), ("title", title),
                           ("summary", summary)):
            if value is not None:
                run[key] = value
        if conclusion is not None:
            run["status"] = "completed"
        self.actions.append(f"{repo}:update-check-run:{check_run_id}")
        return {"id": check_run_id}

    def list_check_runs(
        self, repo: str, head_sha: str, name: str | None = None
    ) -> dict[str, Any]:
        latest: dict[str, dict[str, Any]] = {}
        for run in self.check_runs.values():
            if run["repo"] == repo and run["head_sha"] == head_sha and name in (None, run["name"]):
                latest[run["name"]] = run
        runs = sorted(latest.values(), key=lambda r: r["id"])
        return {"check_runs": [{k: r[k] for k in ("id", "name", "status", "conclusion")}
                               for r in runs]}
