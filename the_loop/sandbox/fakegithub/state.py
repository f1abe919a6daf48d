"""The one fake GitHub: repositories, files, pull requests, labels, comments, reactions,
reviews, permissions and check runs in memory, behind the :class:`graph.ports.GitHub` port.

Every successful write is recorded in :attr:`FakeGitHub.actions` as a Prow-style string::

    OWNER/NAME#1:add-label:phase:requirements
    OWNER/NAME#1:remove-label:phase:requirements
    OWNER/NAME:create-label:phase:requirements
    OWNER/NAME#1:comment:<comment id>
    OWNER/NAME:update-comment:<comment id>
    OWNER/NAME:add-reaction:<comment id>:<content>
    OWNER/NAME:add-review-comment-reaction:<comment id>:<content>
    OWNER/NAME:put-file:<branch>:<path>
    OWNER/NAME#1:request-reviewers:<login>
    OWNER/NAME#1:request-team-reviewers:<team slug>
    OWNER/NAME#7:ready-for-review
    OWNER/NAME#7:enable-auto-merge:<merge method>
    OWNER/NAME#7:create-pull-request:<head branch>
    OWNER/NAME#7:update-pull-request
    OWNER/NAME#7:close-pull-request
    OWNER/NAME#7:merge-pull-request:<method>:<merged commit sha>
    OWNER/NAME:delete-branch:<branch>
    OWNER/NAME:create-check-run:<name>
    OWNER/NAME:update-check-run:<check run id>

Use it in-process as the GitHub integration of graph, hook and worker tests, or for local
development without a GitHub. The loopback HTTP fake of the end-to-end tests
(``the_loop/sandbox/fakegithub/http/``) is a thin Flask front over this same state, so there is
one state model; ``tests/integrations/test_github_fake_contract.py`` runs the same cases
through the real transport against that front and against this class directly.

Operations take the same parameters and return the same shapes as the real transports
(:class:`integrations.github_ops.GitHubOperations`). A repository springs into existence
the first time it is used (default branch ``main``; :meth:`FakeGitHub.add_repo` sets
another). Writes are made as :attr:`FakeGitHub.bot_login` unless :meth:`acting_as` says
otherwise (the HTTP front acts as the token's user).

Seeding (records no action): :meth:`~FakeGitHub.add_repo`, :meth:`~FakeGitHub.add_file`,
:meth:`~FakeGitHub.remove_file`, :meth:`~FakeGitHub.add_pull`,
:meth:`~FakeGitHub.set_pull_files`, :meth:`~FakeGitHub.add_review`,
:meth:`~FakeGitHub.set_permission`, :meth:`~FakeGitHub.add_repo_label`,
:meth:`~FakeGitHub.set_issue_labels`, :meth:`~FakeGitHub.add_comment`. Reading:
:attr:`~FakeGitHub.actions`, :meth:`~FakeGitHub.comments`, :meth:`~FakeGitHub.labels`,
:meth:`~FakeGitHub.repo_labels`, :meth:`~FakeGitHub.file`,
:meth:`~FakeGitHub.requested_reviewers`, :meth:`~FakeGitHub.check_runs`,
:meth:`~FakeGitHub.reactions`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from graph.ports import (
    OPERATIONS,
    PERMISSIONS,
    REACTIONS,
    Annotation,
    Annotations,
    App,
    CheckRun,
    CheckRunDetail,
    CheckRuns,
    Comment,
    Comments,
    Committed,
    Created,
    Deleted,
    EnsuredLabel,
    File,
    GitHub,
    IntegrationError,
    JobLog,
    Labels,
    Merged,
    NotFound,
    Permission,
    Posted,
    PullFiles,
    PullRequest,
    Repository,
    Review,
    Reviewers,
    Reviews,
    Transport,
    User,
)
from integrations.github_ops import CHECK_STATUSES
from the_loop.sandbox.fakegithub.git import (
    GIT,
    GIT_TIMEOUT,
    FakeGitError,
    MergeConflict,
    blob_sha,
    commit_files,
    git_env,
    merge_into,
    run_git,
    seed_git_repo,
)
from the_loop.sandbox.fakegithub.store import (
    ACTIONS_APP,
    BASE_PERMISSION,
    FakeStore,
    Repo,
    now,
)

# The git helpers and the state's parts live in ``git`` and ``store``; they stay importable
# from here, where the tests and the sandbox have always taken them.
__all__ = ["ANNOTATIONS_PER_REQUEST", "BASE_PERMISSION", "GIT", "GIT_TIMEOUT", "OUTPUT_LIMIT",
           "FakeGitError", "FakeGitHub", "Repo", "annotation", "blob_sha", "closed_by",
           "commit_files", "git_env", "now", "run_git", "seed_git_repo"]

#: GitHub's closing keywords followed by an issue of the same repository ("Linking a
#: pull request to an issue": close, closes, closed, fix, fixes, fixed, resolve,
#: resolves, resolved; any case; ``#N`` here, not another repository's ``OWNER/NAME#N``).
CLOSING = re.compile(r"(?<![\w/#-])(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#(\d+)\b",
                     re.IGNORECASE)


def closed_by(body: str | None) -> list[int]:
    """The issue numbers a pull request's body closes when it is merged into the default
    branch (:data:`CLOSING`), in order, each once."""
    return list(dict.fromkeys(int(n) for n in CLOSING.findall(body or "")))


def _not_found(op: str, what: str) -> NotFound:
    return NotFound(f"github {op}: no such {what}", integration="github", op=op, status=404)


def _refused(op: str, status: int, message: str, *codes: str) -> IntegrationError:
    """GitHub's refusal: ``message`` is its ``message`` (the error's ``reason``, as the
    real transports keep it)."""
    return IntegrationError(f"github {op}: {message}", integration="github", op=op,
                            status=status, codes=codes, reason=message)



class FakeGitHub(FakeStore, Transport):
    """Every GitHub operation over one in-memory state (see the module docstring).

    Args:
        bot_login: the login writes are made as (the App's bot).
        user_login: the login of a person (a pull request's default author).
    """

    name = "github"
    transport = "fake"
    #: The port's operations and ``get-app`` (the fake acts for an App).
    operations = frozenset(OPERATIONS["github"]) | {"get-app"}
    #: The App's id ``get-app`` answers (the HTTP front's ``app_id`` when it is set).
    app_id: int | None = None

    # -- operations: repositories and people ----------------------------------------------

    def get_repository(self, repo: str) -> Repository:
        r = self.repo(repo)
        return {"full_name": r.full_name, "default_branch": r.default_branch}

    def get_permission(self, repo: str, login: str) -> Permission:
        with self.lock:
            role, base = self.repo(repo).permissions.get(login.lower(), ("none", "none"))
        return {"permission": role if role in PERMISSIONS else base}

    def get_user(self, login: str) -> User:
        found = self.user(login)
        return {"login": str(found["login"]), "id": int(found["id"]), "type": str(found["type"])}

    def get_app(self) -> App:
        return {"id": self.app_id or 1, "slug": self.bot_login.removesuffix("[bot]")}

    # -- operations: labels ---------------------------------------------------------------

    def add_label(self, repo: str, number: int, label: str) -> Labels:
        with self.lock:
            r = self.repo(repo)
            name = self.add_repo_label(repo, label)["name"]
            current = r.issue_labels.setdefault(number, [])
            if name not in current:
                current.append(name)
            self.record(f"{r.full_name}#{number}:add-label:{name}")
            return {"labels": list(current)}

    def remove_label(self, repo: str, number: int, label: str) -> Labels:
        with self.lock:
            r = self.repo(repo)
            current = r.issue_labels.get(number, [])
            match = next((n for n in current if n.lower() == label.lower()), None)
            if match is None:
                return {"labels": None}  # GitHub's 404 for a label not on the issue
            current.remove(match)
            self.record(f"{r.full_name}#{number}:remove-label:{match}")
            return {"labels": list(current)}

    def ensure_label(self, repo: str, label: str, color: str = "ededed",
                     description: str = "") -> EnsuredLabel:
        with self.lock:
            r = self.repo(repo)
            existing = r.labels.get(label.lower())
            if existing is not None:
                return {"label": existing["name"], "created": False}
            created = self.add_repo_label(repo, label, color=color.lstrip("#"),
                                          description=description)
            self.record(f"{r.full_name}:create-label:{created['name']}")
            return {"label": created["name"], "created": True}

    # -- operations: comments and reactions -----------------------------------------------

    def comment(self, repo: str, number: int, body: str) -> Posted:
        with self.lock:
            c = self._new_comment(repo, number, body, self.actor)
            self.record(f"{c['repo']}#{number}:comment:{c['id']}")
        return {"id": c["id"], "url": self.comment_url(c)}

    def update_comment(self, repo: str, comment_id: int, body: str) -> Posted:
        with self.lock:
            c = self.find_comment(repo, comment_id)
            if c is None:
                raise _not_found("update-comment", "comment")
            c["body"], c["updated_at"] = body, now()
            self.record(f"{c['repo']}:update-comment:{comment_id}")
        return {"id": comment_id, "url": self.comment_url(c)}

    def list_comments(self, repo: str, number: int, since: str | None = None) -> Comments:
        return {"comments": [Comment(id=c["id"], user=c["user"], user_id=c.get("user_id"),
                                     body=c["body"])
                             for c in self.comments_on(repo, number)
                             if since is None or c["updated_at"] >= since]}

    def add_reaction(self, repo: str, comment_id: int, content: str) -> Created:
        """Adding the same reaction twice returns the existing one, as GitHub does. The
        comment need not be seeded (a delivery's comment is GitHub's, not the fake's); the
        HTTP front answers 404 for an unknown one."""
        if content not in REACTIONS:
            raise _refused("add-reaction", 422, f"content {content!r} is not a reaction",
                           "invalid")
        return self._react(self.reaction_store, "add-reaction", repo, comment_id, content)

    def add_review_comment_reaction(self, repo: str, comment_id: int,
                                    content: str) -> Created:
        """A reaction on pull request review comment ``comment_id`` (kept apart from issue
        comments' reactions, as GitHub's ids are); the same one twice is returned again."""
        op = "add-review-comment-reaction"
        if content not in REACTIONS:
            raise _refused(op, 422, f"content {content!r} is not a reaction", "invalid")
        return self._react(self.review_reaction_store, op, repo, comment_id, content)

    def _react(self, store: dict[int, list[dict[str, Any]]], op: str, repo: str,
               comment_id: int, content: str) -> Created:
        """The actor's ``content`` reaction on ``comment_id`` in ``store`` (issue comments'
        or review comments' reactions), made once: the same one again is returned again."""
        with self.lock:
            full_name = self.repo(repo).full_name
            existing = store.setdefault(comment_id, [])
            found = next((x for x in existing
                          if x["user"] == self.actor and x["content"] == content), None)
            if found is None:
                found = {"id": self.next_id(), "user": self.actor, "content": content,
                         "created_at": now()}
                existing.append(found)
            self.record(f"{full_name}:{op}:{comment_id}:{content}")
            return {"id": found["id"]}

    # -- operations: files ----------------------------------------------------------------

    def get_file(self, repo: str, path: str, ref: str | None = None) -> File:
        """A git-backed repository reads ``ref`` (a branch or a commit sha) from git."""
        with self.lock:
            r = self.repo(repo)
            clean = path.strip("/")
            if r.git_dir is not None:
                text = self.git_text(r, ref or r.default_branch, clean) if clean else None
            else:
                text = r.files.get((ref or r.default_branch, clean))
        if text is None:
            raise _not_found("get-file", "file")
        return {"path": clean, "sha": blob_sha(text), "ref": ref, "text": text}

    def put_file(self, repo: str, path: str, branch: str, text: str,
                 sha: str | None = None, message: str | None = None) -> Committed:
        """Refused as GitHub does: 422 when the file exists and no ``sha`` is given, 409
        when ``sha`` is not the file's current one."""
        with self.lock:
            r = self.repo(repo)
            clean = path.strip("/")
            if r.git_dir is not None:
                if self.branch_sha(r, branch) is None:
                    raise _refused("put-file", 422, f"Branch {branch} not found")
                current = self.git_text(r, branch, clean)
            else:
                current = r.files.get((branch, clean))
            if current is not None and not sha:
                raise _refused("put-file", 422, '"sha" wasn\'t supplied')
            if sha and (current is None or blob_sha(current) != sha):
                raise _refused("put-file", 409, f"{clean} does not match {sha}")
            if r.git_dir is not None:
                commit = commit_files(r.git_dir, branch, {clean: text},
                                      message=message or f"the-loop: update {clean}",
                                      author=(self.actor, f"{self.actor}@users.noreply"))
            else:
                r.files[(branch, clean)] = text
                commit = hashlib.sha1(f"{branch}:{clean}:{self.next_id()}".encode(),
                                      usedforsecurity=False).hexdigest()
                # The new commit can be read at its sha, as on GitHub: a snapshot of the
                # branch's files.
                for (ref, name), content in list(r.files.items()):
                    if ref == branch:
                        r.files[(commit, name)] = content
            self.record(f"{r.full_name}:put-file:{branch}:{clean}")
        return {"path": clean, "sha": blob_sha(text), "commit": commit}

    # -- operations: pull requests --------------------------------------------------------

    def pull_result(self, repo: str, number: int) -> PullRequest:
        """The :class:`~graph.ports.PullRequest` of stored pull request ``number``."""
        with self.lock:
            r = self.repo(repo)
            pr = r.pulls[number]
            return {"number": number, "head_sha": self.pull_head(r, pr),
                    "head_ref": pr["head_ref"], "base_ref": pr["base_ref"],
                    "state": pr["state"], "draft": bool(pr.get("draft", False)),
                    "head_repo": pr.get("head_repo") or r.full_name,
                    "maintainer_can_modify": bool(pr.get("maintainer_can_modify")),
                    "merged": bool(pr.get("merged")), "merged_by": pr.get("merged_by"),
                    "html_url": f"/{r.full_name}/pull/{number}",
                    "node_id": self.pull_node_id(pr), "body": str(pr.get("body") or "")}

    @staticmethod
    def pull_node_id(pr: dict[str, Any]) -> str:
        """The GraphQL global id of stored pull request ``pr`` (``PR_<id>``, the shape
        of GitHub's newer ids)."""
        return f"PR_{pr['id']}"

    def pull_by_node_id(self, node_id: str) -> tuple[Repo, int] | None:
        """``(repository, number)`` of the pull request whose node id is ``node_id``, or
        ``None``."""
        with self.lock:
            for r in self.repos.values():
                for number, pr in r.pulls.items():
                    if self.pull_node_id(pr) == node_id:
                        return r, number
        return None

    def get_pull_request(self, repo: str, number: int) -> PullRequest:
        with self.lock:
            if self.repo(repo).pulls.get(number) is None:
                raise _not_found("get-pull-request", "pull request")
            return self.pull_result(repo, number)

    def find_pull_request(self, repo: str, head: str) -> PullRequest | None:
        """The open pull request from branch ``head`` (lowest number), or ``None``."""
        with self.lock:
            r = self.repo(repo)
            numbers = sorted(n for n, pr in r.pulls.items()
                             if pr["head_ref"] == head and pr["state"] == "open")
            return self.pull_result(repo, numbers[0]) if numbers else None

    def create_pull_request(self, repo: str, head: str, base: str, title: str, body: str,
                            draft: bool = True) -> PullRequest:
        """Refused (422) as GitHub does: a head or base branch that does not exist (in an
        in-memory repository: that has no file), an open pull request from ``head``
        already, or no commits on ``head`` beyond ``base`` (git-backed repositories).
        The number is the next in the repository's issue and pull request sequence."""
        op = "create-pull-request"
        with self.lock:
            r = self.repo(repo)
            for branch in (head, base):
                if not self._branch_exists(r, branch):
                    raise _refused(op, 422, f"Validation Failed: branch {branch} not found",
                                   "invalid")
            if self.find_pull_request(repo, head) is not None:
                raise _refused(op, 422, f"A pull request already exists for "
                               f"{r.full_name.split('/')[0]}:{head}.", "custom")
            if r.git_dir is not None:
                ahead = run_git(r.git_dir, "merge-base", "--is-ancestor", f"refs/heads/{head}",
                                f"refs/heads/{base}", check=False)
                if ahead.returncode == 0:
                    raise _refused(op, 422, f"No commits between {base} and {head}", "custom")
            used = [*r.pulls, *r.issue_labels,
                    *(c["number"] for c in self.comment_store.values()
                      if c["repo"] == r.full_name)]
            number = max(used, default=0) + 1
            self.add_pull(repo, number, head_sha=self.branch_sha(r, head) or "0" * 40,
                          head_ref=head, base_ref=base, title=title, user=self.actor,
                          draft=draft, body=body)
            self.record(f"{r.full_name}#{number}:create-pull-request:{head}")
            return self.pull_result(repo, number)

    def update_pull_request(self, repo: str, number: int, title: str | None = None,
                            body: str | None = None) -> PullRequest:
        op = "update-pull-request"
        with self.lock:
            r = self.repo(repo)
            pr = r.pulls.get(number)
            if pr is None:
                raise _not_found(op, "pull request")
            if title is None and body is None:
                raise _refused(op, 422, "nothing to update")
            if title is not None:
                pr["title"] = title
            if body is not None:
                pr["body"] = body
            self.record(f"{r.full_name}#{number}:update-pull-request")
            return self.pull_result(repo, number)

    def close_pull_request(self, repo: str, number: int) -> PullRequest:
        """Close pull request ``number`` without merging it (``PATCH .../pulls/{n}``
        with ``state: closed``); closing a closed one changes nothing."""
        with self.lock:
            r = self.repo(repo)
            pr = r.pulls.get(number)
            if pr is None:
                raise _not_found("close-pull-request", "pull request")
            if pr["state"] == "open":
                pr["head_sha"] = self.pull_head(r, pr)
                pr["state"], pr["closed_at"] = "closed", now()
                self.record(f"{r.full_name}#{number}:close-pull-request")
            return self.pull_result(repo, number)

    def merge_pull_request(self, repo: str, number: int, sha: str,
                           merge_method: str = "squash") -> Merged:
        """Merge as GitHub's "Merge a pull request" answers: 409 "Head branch was
        modified" when the head is no longer ``sha``; 405 when the pull request is not
        open, is a draft, or does not merge cleanly (a git-backed repository merges for
        real, :func:`~the_loop.sandbox.fakegithub.git.merge_into`; an in-memory one
        honours a seeded ``mergeable: False``); 422 for a bad ``merge_method``. On success
        the pull request is ``closed``, ``merged``, ``merged_by`` the actor, and the
        answer is ``{"sha", "merged": True, "message"}``."""
        op = "merge-pull-request"
        with self.lock:
            r = self.repo(repo)
            pr = r.pulls.get(number)
            if pr is None:
                raise _not_found(op, "pull request")
            if merge_method not in ("merge", "squash", "rebase"):
                raise _refused(op, 422, f"Invalid merge_method {merge_method!r}", "invalid")
            if pr["state"] != "open" or pr.get("merged"):
                raise _refused(op, 405, "Pull Request is not mergeable")
            if pr.get("draft"):
                raise _refused(op, 405, "Pull Request is still a draft")
            head = self.pull_head(r, pr)
            if sha != head:
                raise _refused(op, 409, "Head branch was modified. Review and try the "
                               "merge again.")
            title = f"{pr['title']} (#{number})"
            if r.git_dir is not None:
                message = (f"{title}\n\n{pr.get('body') or ''}".strip() + "\n"
                           if merge_method == "squash" else
                           f"Merge pull request #{number} from {pr['head_ref']}\n\n"
                           f"{pr['title']}\n")
                try:
                    merged = merge_into(r.git_dir, pr["base_ref"], head, merge_method,
                                        message=message,
                                        committer=(self.actor, f"{self.actor}@users.noreply"))
                except MergeConflict:
                    raise _refused(op, 405, "Pull Request is not mergeable") from None
            else:
                if pr.get("mergeable") is False:
                    raise _refused(op, 405, "Pull Request is not mergeable")
                merged = hashlib.sha1(f"merge:{r.full_name}:{number}:{head}".encode(),
                                      usedforsecurity=False).hexdigest()
            pr.update(head_sha=head, state="closed", merged=True, merged_by=self.actor,
                      merge_commit_sha=merged, merged_at=now(), closed_at=now())
            self.record(f"{r.full_name}#{number}:{op}:{merge_method}:{merged}")
            return {"sha": merged, "merged": True,
                    "message": "Pull Request successfully merged"}

    def delete_branch(self, repo: str, branch: str) -> Deleted:
        """Delete ``branch`` (a git-backed repository's ref); ``{"deleted": False}`` when
        there is none (GitHub's 422 "Reference does not exist"). The default branch is
        refused (422), as GitHub does."""
        with self.lock:
            r = self.repo(repo)
            if branch == r.default_branch:
                raise _refused("delete-branch", 422, "Cannot delete the default branch")
            old = self.branch_sha(r, branch)
            if old is None:
                return {"deleted": False}
            assert r.git_dir is not None
            run_git(r.git_dir, "update-ref", "-d", f"refs/heads/{branch}", old)
            self.record(f"{r.full_name}:delete-branch:{branch}")
            return {"deleted": True}

    def list_pull_files(self, repo: str, number: int) -> PullFiles:
        with self.lock:
            pr = self.repo(repo).pulls.get(number)
            if pr is None:
                raise _not_found("list-pull-files", "pull request")
            paths: list[str] = []
            for f in pr["files"]:
                for key in ("filename", "previous_filename"):
                    value = f.get(key)
                    if value and value not in paths:
                        paths.append(value)
        return {"files": paths}

    def request_reviewers(self, repo: str, number: int, reviewers: list[str],
                          team_reviewers: list[str] | None = None) -> Reviewers:
        """GitHub refuses (422) a review request from the pull request's author."""
        with self.lock:
            r = self.repo(repo)
            pr = r.pulls.get(number)
            if pr is None:
                raise _not_found("request-reviewers", "pull request")
            if any(x.lower() == pr["user"].lower() for x in reviewers):
                raise _refused("request-reviewers", 422,
                               "review cannot be requested from the pull request author")
            for login in reviewers:
                if login not in pr["requested"]:
                    pr["requested"].append(login)
                self.record(f"{r.full_name}#{number}:request-reviewers:{login}")
            teams = pr.setdefault("requested_teams", [])
            for slug in team_reviewers or ():
                if slug not in teams:
                    teams.append(slug)
                self.record(f"{r.full_name}#{number}:request-team-reviewers:{slug}")
            return {"requested": list(pr["requested"]), "teams": list(teams)}

    def mark_pull_request_ready(self, repo: str, number: int) -> PullRequest:
        """Take pull request ``number`` out of draft (nothing changes when it is not
        one); GitHub refuses a closed one."""
        op = "mark-pull-request-ready"
        with self.lock:
            r = self.repo(repo)
            pr = r.pulls.get(number)
            if pr is None:
                raise _not_found(op, "pull request")
            if pr.get("draft"):
                if pr["state"] != "open":
                    raise _refused(op, 422, "Pull request is closed", "UNPROCESSABLE")
                pr["draft"] = False
                self.record(f"{r.full_name}#{number}:ready-for-review")
                self.marked_ready(r, number)
            return self.pull_result(repo, number)

    def marked_ready(self, r: Repo, number: int) -> None:
        """Called (with the lock held) when pull request ``number`` of ``r`` was just
        taken out of draft; the sandbox delivers ``pull_request.ready_for_review``."""

    def enable_auto_merge(self, repo: str, number: int, merge_method: str,
                          actor: str | None = None) -> dict[str, Any]:
        """Record GitHub's auto-merge request on pull request ``number`` (GraphQL's
        ``enablePullRequestAutoMerge``): ``{"merge_method": "MERGE"|"SQUASH"|"REBASE",
        "enabled_by": login}``, returned. Merging it is another matter (nothing here
        merges).

        Raises:
            NotFound: no such pull request. IntegrationError: a closed one (422).
        """
        op = "enable-auto-merge"
        with self.lock:
            r = self.repo(repo)
            pr = r.pulls.get(number)
            if pr is None:
                raise _not_found(op, "pull request")
            if pr["state"] != "open":
                raise _refused(op, 422, "Pull request is closed", "UNPROCESSABLE")
            pr["auto_merge"] = {"merge_method": merge_method,
                                "enabled_by": actor or self.actor, "enabled_at": now()}
            self.record(f"{r.full_name}#{number}:enable-auto-merge:{merge_method}")
            return dict(pr["auto_merge"])

    def list_reviews(self, repo: str, number: int) -> Reviews:
        with self.lock:
            pr = self.repo(repo).pulls.get(number)
            if pr is None:
                raise _not_found("list-reviews", "pull request")
            return {"reviews": [Review(id=v["id"], user=v["user"], state=v["state"],
                                       commit_id=v["commit_id"]) for v in pr["reviews"]]}

    # -- operations: check runs -----------------------------------------------------------

    def create_check_run(self, repo: str, head_sha: str, name: str, status: str,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None,
                         details_url: str | None = None, *, text: str | None = None,
                         annotations: Sequence[Mapping[str, Any]] | None = None,
                         check_suite_id: int | None = None,
                         external_id: str = "", app: str | None = None,
                         log: str | None = None) -> Created:
        """The port's operation, plus what "Create a check run" also takes: ``text``
        (``output.text``) and ``annotations`` (``output.annotations``, see
        :func:`annotation`); ``check_suite_id`` puts the run in that suite (the sandbox's
        CI makes GitHub Actions' suite first), else in App ``app``'s suite on
        ``head_sha`` (the fake's own App by default; made on first use, as GitHub does).
        ``log``: the plain-text log of an Actions job (see :meth:`download_job_logs`).

        Raises:
            IntegrationError: 422 for a status GitHub refuses, ``completed`` without a
                conclusion, a summary or text over 65535 characters, or an annotation
                GitHub refuses (more than 50 a request, a field missing or wrong).
        """
        run: dict[str, Any] = {"id": 0, "name": name, "head_sha": head_sha, "status": "queued",
                               "conclusion": None,
                               "output": {"title": None, "summary": None, "text": None},
                               "annotations": [], "details_url": details_url,
                               "external_id": external_id, "started_at": None,
                               "completed_at": None, "check_suite_id": None, "app": "",
                               "log": log}
        self._check_fields("create-check-run", run, status, conclusion, title, summary, text,
                           annotations)
        with self.lock:
            r = self.repo(repo)
            if check_suite_id is not None and check_suite_id in r.check_suites:
                suite = r.check_suites[check_suite_id]
            else:
                suite = self.check_suite_for(r, head_sha, app or self.app_info("")["slug"])
            run.update(id=self.next_id(), check_suite_id=suite["id"], app=suite["app"])
            r.check_runs[run["id"]] = run
            self.refresh_suite(r, suite["id"])
            self.record(f"{r.full_name}:create-check-run:{name}")
        return {"id": run["id"]}

    def update_check_run(self, repo: str, check_run_id: int, status: str | None = None,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None,
                         details_url: str | None = None, *, text: str | None = None,
                         annotations: Sequence[Mapping[str, Any]] | None = None,
                         log: str | None = None) -> Created:
        """The port's operation, plus ``text``, ``annotations`` and ``log`` as
        :meth:`create_check_run` takes them; annotations are added to the run's (GitHub
        docs, "Update a check run": "annotations are appended to the list of annotations
        that already exist for the check run"). Raises as
        :meth:`create_check_run` does, and :class:`NotFound` for an unknown run."""
        with self.lock:
            r = self.repo(repo)
            run = r.check_runs.get(check_run_id)
            if run is None:
                raise _not_found("update-check-run", "check run")
            updated = {**run, "output": dict(run["output"]),
                       "annotations": list(run["annotations"])}
            self._check_fields("update-check-run", updated, status, conclusion, title,
                               summary, text, annotations)
            if details_url is not None:
                updated["details_url"] = details_url
            if log is not None:
                updated["log"] = log
            run.update(updated)
            if run.get("check_suite_id") in r.check_suites:
                self.refresh_suite(r, run["check_suite_id"])
            self.record(f"{r.full_name}:update-check-run:{check_run_id}")
        return {"id": check_run_id}

    def list_check_runs(self, repo: str, head_sha: str, name: str | None = None
                        ) -> CheckRuns:
        """The latest run of each name on ``head_sha`` (GitHub's ``filter=latest``)."""
        return {"check_runs": [CheckRun(id=run["id"], name=run["name"], status=run["status"],
                                        conclusion=run["conclusion"])
                               for run in self.latest_check_runs(repo, head_sha, name)]}

    def get_check_run(self, repo: str, check_run_id: int) -> CheckRunDetail:
        """"Get a check run" (see the port)."""
        with self.lock:
            run = self.repo(repo).check_runs.get(check_run_id)
            if run is None:
                raise _not_found("get-check-run", "check run")
            output = run["output"]
            return {"id": run["id"], "name": run["name"], "head_sha": run["head_sha"],
                    "status": run["status"], "conclusion": run["conclusion"],
                    "details_url": run.get("details_url"), "app": run.get("app") or None,
                    "output": {"title": output.get("title"), "summary": output.get("summary"),
                               "text": output.get("text"),
                               "annotations_count": len(run.get("annotations") or ())}}

    def list_check_run_annotations(self, repo: str, check_run_id: int,
                                   limit: int = 50) -> Annotations:
        """"List check run annotations" (see the port)."""
        with self.lock:
            run = self.repo(repo).check_runs.get(check_run_id)
            if run is None:
                raise _not_found("list-check-run-annotations", "check run")
            stored = list(run.get("annotations") or ())
        found: list[Annotation] = [
            {"path": a["path"], "start_line": a["start_line"], "end_line": a["end_line"],
             "annotation_level": a["annotation_level"], "title": a.get("title"),
             "message": a["message"]} for a in stored[:max(1, limit)]]
        return {"annotations": found, "truncated": len(stored) > len(found)}

    def job_log(self, repo: str, job_id: int) -> str | None:
        """The plain-text log of check run ``job_id`` if it is an Actions job's (its App
        is ``github-actions``): the ``log`` it was given, else its ``output.text`` (the
        sandbox's CI writes the log's tail there); ``None`` otherwise."""
        with self.lock:
            r = self.lookup(repo)
            run = r.check_runs.get(job_id) if r is not None else None
            if run is None or run.get("app") != ACTIONS_APP["slug"]:
                return None
            log = run.get("log")
            if not isinstance(log, str):
                log = run["output"].get("text")
            return log if isinstance(log, str) else None

    def download_job_logs(self, repo: str, job_id: int, tail_bytes: int = 4096) -> JobLog:
        """"Download job logs for a workflow run" (see the port): 404 unless check run
        ``job_id`` is an Actions job's (:meth:`job_log`)."""
        log = self.job_log(repo, job_id)
        if log is None:
            raise _not_found("download-job-logs", "job")
        raw = log.encode("utf-8")
        return {"text": raw[-max(1, tail_bytes):].decode("utf-8", "replace"),
                "truncated": len(raw) > tail_bytes}

    @staticmethod
    def _check_fields(op: str, run: dict[str, Any], status: str | None,
                      conclusion: str | None, title: str | None, summary: str | None,
                      text: str | None = None,
                      annotations: Sequence[Mapping[str, Any]] | None = None) -> None:
        was = run["status"]
        if status is not None:
            if status not in CHECK_STATUSES:
                raise _refused(op, 422, "status is not a check run status (queued, "
                              "in_progress, completed)")
            run["status"] = status
        if conclusion is not None:
            run["conclusion"], run["status"] = conclusion, "completed"
        if run["status"] == "completed" and not run["conclusion"]:
            raise _refused(op, 422, '"conclusion" wasn\'t supplied')
        for field, value in (("summary", summary), ("text", text)):
            if value is not None and len(value) > OUTPUT_LIMIT:
                raise _refused(op, 422, f"output.{field} is longer than the maximum of "
                               f"{OUTPUT_LIMIT} characters")
        if title is not None or summary is not None or text is not None:
            run["output"] = {"title": title, "summary": summary, "text": text}
        if annotations:
            if len(annotations) > ANNOTATIONS_PER_REQUEST:
                raise _refused(op, 422, f"at most {ANNOTATIONS_PER_REQUEST} annotations a "
                               "request")
            run["annotations"] = [*run["annotations"],
                                  *(annotation(op, a) for a in annotations)]
        # GitHub sets started_at when the run is created (a queued one too), and again
        # when it starts; completed_at when it completes.
        stamp = now()
        if not run.get("started_at") or (was == "queued" and run["status"] != "queued"):
            run["started_at"] = stamp
        if run["status"] == "completed" and not run.get("completed_at"):
            run["completed_at"] = stamp


#: GitHub's limit on a check run's ``output.summary`` and ``output.text`` ("Create a check
#: run": "Maximum length: 65535 characters").
OUTPUT_LIMIT = 65535
#: Annotations one create or update may add ("The Checks API limits the number of
#: annotations to a maximum of 50 per API request").
ANNOTATIONS_PER_REQUEST = 50
#: ``annotation_level`` values GitHub takes.
ANNOTATION_LEVELS = frozenset({"notice", "warning", "failure"})


def annotation(op: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """One check run annotation as GitHub stores it (the shape "List check run
    annotations" answers, less ``blob_href``): ``path``, ``start_line``, ``end_line``,
    ``annotation_level`` and ``message`` required; ``start_column``, ``end_column``,
    ``title``, ``raw_details`` ``None`` when not given.

    Raises:
        IntegrationError: 422 naming the missing or wrong field.
    """
    def bad(field: str) -> IntegrationError:
        return _refused(op, 422, f"annotation {field} is missing or invalid")

    if not isinstance(given, Mapping):
        raise bad("object")
    for field in ("path", "message"):
        if not isinstance(given.get(field), str) or not given[field]:
            raise bad(field)
    for field in ("start_line", "end_line"):
        value = given.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise bad(field)
    if given["end_line"] < given["start_line"]:
        raise bad("end_line")
    if given.get("annotation_level") not in ANNOTATION_LEVELS:
        raise bad("annotation_level")
    for field in ("start_column", "end_column"):
        value = given.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise bad(field)
    for field in ("title", "raw_details"):
        if given.get(field) is not None and not isinstance(given[field], str):
            raise bad(field)
    return {"path": given["path"], "start_line": given["start_line"],
            "end_line": given["end_line"], "start_column": given.get("start_column"),
            "end_column": given.get("end_column"),
            "annotation_level": given["annotation_level"], "title": given.get("title"),
            "message": given["message"], "raw_details": given.get("raw_details")}


if TYPE_CHECKING:  # mypy checks that the fake implements the port

    def _implements_the_port(fake: FakeGitHub) -> GitHub:
        return fake
