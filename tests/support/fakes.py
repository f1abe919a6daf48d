"""An in-memory GitHub provider that records actions (Prow style), for graph and hook tests.

It satisfies :class:`graph.ports.Integration` with the same operation names and result
shapes as ``integrations.github.GitHubApi``; ``tests/integrations`` keeps the two honest.
"""

from __future__ import annotations

import itertools
from typing import Any

from graph.ports import NotFound, UnsupportedOperation


class FakeGitHub:
    name = "github"
    operations = frozenset(
        {
            "get-repository",
            "get-pull-request",
            "add-label",
            "remove-label",
            "ensure-label",
            "comment",
            "update-comment",
            "list-comments",
            "add-reaction",
            "get-file",
        }
    )

    def __init__(self) -> None:
        self.files: dict[tuple[str, str, str], str] = {}
        self.labels: dict[tuple[str, int], list[str]] = {}
        self.repo_labels: dict[str, set[str]] = {}
        self.comments: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.actions: list[str] = []
        self.pulls: dict[tuple[str, int], dict[str, Any]] = {}
        self._ids = itertools.count(1000)

    def put_file(self, repo: str, path: str, text: str, ref: str = "main") -> None:
        self.files[(repo, ref, path)] = text

    def call(self, op: str, **p: Any) -> dict[str, Any]:
        if op not in self.operations:
            raise UnsupportedOperation(op, integration="github", op=op)
        return getattr(self, "op_" + op.replace("-", "_"))(**p)

    def op_get_repository(self, repo: str) -> dict[str, Any]:
        return {"full_name": repo, "default_branch": "main"}

    def op_get_pull_request(self, repo: str, number: int) -> dict[str, Any]:
        try:
            return self.pulls[(repo, number)]
        except KeyError:
            raise NotFound(
                "no such pull request", integration="github", op="get-pull-request", status=404
            ) from None

    def op_add_label(self, repo: str, number: int, label: str) -> dict[str, Any]:
        labels = self.labels.setdefault((repo, number), [])
        if label not in labels:
            labels.append(label)
        self.actions.append(f"{repo}#{number}:add-label:{label}")
        return {"labels": list(labels)}

    def op_remove_label(self, repo: str, number: int, label: str) -> dict[str, Any]:
        labels = self.labels.setdefault((repo, number), [])
        if label in labels:
            labels.remove(label)
            self.actions.append(f"{repo}#{number}:remove-label:{label}")
        return {"labels": list(labels)}

    def op_ensure_label(
        self, repo: str, label: str, color: str = "ededed", description: str = ""
    ) -> dict[str, Any]:
        existing = self.repo_labels.setdefault(repo, set())
        created = label not in existing
        if created:
            existing.add(label)
            self.actions.append(f"{repo}:create-label:{label}")
        return {"label": label, "created": created}

    def op_comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        cid = next(self._ids)
        self.comments.setdefault((repo, number), []).append(
            {"id": cid, "user": "the-loop[bot]", "body": body}
        )
        self.actions.append(f"{repo}#{number}:comment:{cid}")
        return {"id": cid, "url": f"https://github.test/{repo}/issues/{number}#c{cid}"}

    def op_update_comment(self, repo: str, comment_id: int, body: str) -> dict[str, Any]:
        for comments in self.comments.values():
            for c in comments:
                if c["id"] == comment_id:
                    c["body"] = body
                    self.actions.append(f"{repo}:update-comment:{comment_id}")
                    return {"id": comment_id, "url": ""}
        raise NotFound("no such comment", integration="github", op="update-comment", status=404)

    def op_list_comments(self, repo: str, number: int) -> dict[str, Any]:
        return {"comments": [dict(c) for c in self.comments.get((repo, number), [])]}

    def op_add_reaction(self, repo: str, comment_id: int, content: str) -> dict[str, Any]:
        self.actions.append(f"{repo}:add-reaction:{comment_id}:{content}")
        return {"id": next(self._ids)}

    def op_get_file(self, repo: str, path: str, ref: str | None = None) -> dict[str, Any]:
        key = (repo, ref or "main", path)
        if key not in self.files:
            raise NotFound("no such file", integration="github", op="get-file", status=404)
        return {"path": path, "sha": "0" * 40, "ref": ref, "text": self.files[key]}
