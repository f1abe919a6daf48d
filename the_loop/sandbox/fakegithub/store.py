"""The fake GitHub's state: repositories (:class:`Repo`), people, comments, reactions,
review comments and the recorded actions, with the seeding and reading helpers the tests
use and the reads the operations share. :class:`FakeStore` holds no port operation:
:class:`the_loop.sandbox.fakegithub.state.FakeGitHub` adds those on top of it (see that
module's docstring for the actions recorded and the whole seeding and reading surface).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from the_loop.sandbox.fakegithub.git import commit_files, run_git, seed_git_repo

__all__ = ["ACTIONS_APP", "BASE_PERMISSION", "FakeStore", "Repo", "now", "suite_verdict"]

#: GitHub Actions, the App whose check suites and check runs a workflow's jobs are: its
#: id, slug and name on github.com (a workflow job's check run names ``app.slug``
#: ``github-actions``; GitHub docs "REST API endpoints for check runs").
ACTIONS_APP = {"id": 15368, "slug": "github-actions", "name": "GitHub Actions",
               "owner": "github"}
#: The conclusions that decide a completed suite, the first one any run has wins.
_SUITE_ORDER = ("action_required", "cancelled", "timed_out", "failure")


def suite_verdict(runs: Iterable[dict[str, Any]]) -> tuple[str, str | None]:
    """``(status, conclusion)`` of a check suite from its runs' stored dicts: ``queued``
    with none or only queued runs, ``in_progress`` while any is not completed (and one
    has started), else ``completed``: the first of ``action_required``, ``cancelled``,
    ``timed_out``, ``failure`` any run concluded, else ``neutral`` when every run did,
    else ``success`` (``success``, ``neutral`` and ``skipped`` runs)."""
    runs = list(runs)
    if not runs or all(run["status"] == "queued" for run in runs):
        return "queued", None
    if any(run["status"] != "completed" for run in runs):
        return "in_progress", None
    seen = {run["conclusion"] for run in runs}
    for conclusion in _SUITE_ORDER:
        if conclusion in seen:
            return "completed", conclusion
    if seen <= {"neutral"}:
        return "completed", "neutral"
    return "completed", "success"


#: Repository role -> the coarse ``permission`` GitHub reports beside ``role_name``.
BASE_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}


def now() -> str:
    """The current time as GitHub writes it (``2024-01-01T12:00:00Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Repo:
    """One repository's state (the fake's lock guards it). With ``git_dir`` the files and
    branches live in that bare git repository instead of :attr:`files`."""

    full_name: str
    id: int
    default_branch: str = "main"
    private: bool = False
    git_dir: Path | None = None
    files: dict[tuple[str, str], str] = field(default_factory=dict)  # (ref, path) -> text
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    labels: dict[str, dict[str, Any]] = field(default_factory=dict)  # lower(name) -> label
    issue_labels: dict[int, list[str]] = field(default_factory=dict)  # number -> names
    permissions: dict[str, tuple[str, str]] = field(default_factory=dict)  # login -> roles
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)  # id -> check run
    check_suites: dict[int, dict[str, Any]] = field(default_factory=dict)  # id -> suite


class FakeStore:
    """One fake GitHub's state, guarded by :attr:`lock` (a re-entrant lock: an operation
    may call another under it).

    Args:
        bot_login: the login writes are made as (the App's bot).
        user_login: the login of a person (a pull request's default author).
    """

    def __init__(self, *, bot_login: str = "the-loop[bot]",
                 user_login: str = "octocat") -> None:
        self.bot_login = bot_login
        self.user_login = user_login
        self.lock = threading.RLock()
        self._ids = itertools.count(1001)
        self._local = threading.local()
        self.repos: dict[str, Repo] = {}  # lower(full name) -> repo
        self.comment_store: dict[int, dict[str, Any]] = {}  # id -> comment
        self.reaction_store: dict[int, list[dict[str, Any]]] = {}  # comment id -> reactions
        self.review_comment_store: dict[int, dict[str, Any]] = {}  # id -> review comment
        self.review_reaction_store: dict[int, list[dict[str, Any]]] = {}  # id -> reactions
        self.user_store: dict[str, dict[str, Any]] = {}  # casefolded login -> account
        self._actions: list[str] = []

    # -- identity and state -------------------------------------------------------------

    @contextlib.contextmanager
    def acting_as(self, login: str | None) -> Iterator[None]:
        """Make the writes of this thread as ``login`` (``None``: :attr:`bot_login`)."""
        before = getattr(self._local, "login", None)
        self._local.login = login
        try:
            yield
        finally:
            self._local.login = before

    @property
    def actor(self) -> str:
        """The login writes are made as, in this thread."""
        return getattr(self._local, "login", None) or self.bot_login

    def next_id(self) -> int:
        """A new id for a comment, label, review, check run, reaction or repository."""
        return next(self._ids)

    @staticmethod
    def default_user_id(login: str) -> int:
        """The id the fake gives the first account of ``login``: stable across runs and
        processes (a test can put it in a payload it builds)."""
        return zlib.crc32(login.casefold().encode()) % 10**8

    def user(self, login: str) -> dict[str, Any]:
        """The account that has ``login`` now, ``{"login", "id", "type"}``: the one
        seeded with :meth:`add_user` or :meth:`recreate_user`, else one made on first use
        with :meth:`default_user_id`."""
        with self.lock:
            found = self.user_store.get(login.casefold())
            if found is None:
                found = self.user_store[login.casefold()] = {
                    "login": login, "id": self.default_user_id(login),
                    "type": "Bot" if login.endswith("[bot]") else "User"}
            return found

    def user_id(self, login: str) -> int:
        """The id of the account that has ``login`` now (see :meth:`user`)."""
        return int(self.user(login)["id"])

    def lookup(self, repo: str) -> Repo | None:
        """Repository ``OWNER/NAME`` if it exists (case-insensitive), else ``None``."""
        return self.repos.get(repo.lower())

    def repo(self, repo: str) -> Repo:
        """Repository ``OWNER/NAME``, created (default branch ``main``) if it is new."""
        with self.lock:
            found = self.lookup(repo)
            if found is None:
                found = self.repos[repo.lower()] = Repo(repo, self.next_id())
            return found

    def record(self, action: str) -> None:
        """Append one action string (see the module docstring)."""
        with self.lock:
            self._actions.append(action)

    def clear_actions(self) -> None:
        """Forget the recorded actions (state stays)."""
        with self.lock:
            self._actions.clear()

    # -- seeding --------------------------------------------------------------------------

    def add_repo(self, full_name: str, *, default_branch: str = "main",
                 private: bool = False, git_dir: Path | None = None) -> None:
        """Create repository ``OWNER/NAME`` (idempotent; updates the default branch).

        Args:
            git_dir: a bare git repository that backs it (see :func:`seed_git_repo`):
                file reads come from it at a branch or sha, a pull request's head is its
                branch's tip, and the HTTP front serves git's smart HTTP protocol for it.
        """
        with self.lock:
            r = self.repo(full_name)
            r.default_branch, r.private = default_branch, private
            if git_dir is not None:
                r.git_dir = Path(git_dir)

    def rename_repo(self, old: str, new: str) -> Repo:
        """Rename (or transfer) repository ``old`` to ``new``, keeping its id and
        everything in it, as GitHub does; the old name is no longer served (GitHub
        redirects it; the fake answers 404, so a caller that kept it is caught)."""
        with self.lock:
            r = self.repos.pop(old.lower())
            r.full_name = new
            self.repos[new.lower()] = r
            self.record(f"rename-repo {old} {new}")
            return r

    def add_git_repo(self, full_name: str, root: Path, files: Mapping[str, str], *,
                     default_branch: str = "main") -> Path:
        """Create repository ``OWNER/NAME`` backed by a new bare git repository
        ``root/OWNER/NAME.git`` whose first commit on ``default_branch`` holds ``files``
        (e.g. ``README.md``, ``.the-loop/collaborators.yaml``). Returns the git directory."""
        git_dir = Path(root) / f"{full_name}.git"
        seed_git_repo(git_dir, files, default_branch=default_branch)
        self.add_repo(full_name, default_branch=default_branch, git_dir=git_dir)
        return git_dir

    def add_file(self, repo: str, path: str, text: str, ref: str | None = None) -> None:
        """Store ``text`` at ``path`` on ``ref`` (default branch when ``None``); in a git
        repository, one commit on branch ``ref``."""
        with self.lock:
            r = self.repo(repo)
            if r.git_dir is not None:
                commit_files(r.git_dir, ref or r.default_branch, {path.strip("/"): text},
                             message=f"add {path}", author=("Octo Cat", "octocat@example.com"))
                return
            r.files[(ref or r.default_branch, path.strip("/"))] = text

    def remove_file(self, repo: str, path: str, ref: str | None = None) -> None:
        """Delete ``path`` on ``ref`` (default branch when ``None``), if it is there."""
        with self.lock:
            r = self.repo(repo)
            if r.git_dir is not None:
                if self.git_text(r, ref or r.default_branch, path.strip("/")) is not None:
                    commit_files(r.git_dir, ref or r.default_branch, {path.strip("/"): None},
                                 message=f"remove {path}",
                                 author=("Octo Cat", "octocat@example.com"))
                return
            r.files.pop((ref or r.default_branch, path.strip("/")), None)

    # -- git-backed repositories ----------------------------------------------------------

    def branch_sha(self, repo: str | Repo, branch: str) -> str | None:
        """The tip of ``branch`` in a git-backed repository, or ``None`` (no such branch,
        or the repository is not git-backed)."""
        r = repo if isinstance(repo, Repo) else self.lookup(repo)
        if r is None or r.git_dir is None or not branch or branch.startswith("-"):
            return None
        done = run_git(r.git_dir, "rev-parse", "--verify", "-q",
                       f"refs/heads/{branch}^{{commit}}", check=False)
        return done.stdout.decode().strip() if done.returncode == 0 else None

    def git_object(self, r: Repo, ref: str, path: str) -> tuple[str, str] | None:
        """``(type, sha)`` of ``ref:path`` in ``r``'s git repository (type ``blob`` or
        ``tree``; ``path`` ``""`` is the root tree), or ``None``. ``ref`` is a branch
        name or a commit sha (``git rev-parse``)."""
        assert r.git_dir is not None
        if not ref or ref.startswith("-"):
            return None
        commit = self.branch_sha(r, ref) or ref
        spec = f"{commit}:{path}"
        kind = run_git(r.git_dir, "cat-file", "-t", spec, check=False)
        sha = run_git(r.git_dir, "rev-parse", "--verify", "-q", spec, check=False)
        if kind.returncode != 0 or sha.returncode != 0:
            return None
        return kind.stdout.decode().strip(), sha.stdout.decode().strip()

    def git_text(self, r: Repo, ref: str, path: str) -> str | None:
        """Text of file ``path`` at ``ref`` (a branch or sha) in ``r``'s git repository
        (``git cat-file blob``, what ``git show REF:PATH`` prints), or ``None``."""
        found = self.git_object(r, ref, path)
        if found is None or found[0] != "blob":
            return None
        assert r.git_dir is not None
        data = run_git(r.git_dir, "cat-file", "blob", found[1]).stdout
        return data.decode("utf-8", "replace")

    def git_tree(self, r: Repo, ref: str, path: str) -> list[tuple[str, str, str]] | None:
        """``[(type, sha, path), ...]`` of directory ``path`` at ``ref`` (``git ls-tree``),
        or ``None`` when it is not a directory there."""
        found = self.git_object(r, ref, path)
        if found is None or found[0] != "tree":
            return None
        assert r.git_dir is not None
        out = run_git(r.git_dir, "ls-tree", "-z", found[1]).stdout.decode("utf-8", "replace")
        entries = []
        for line in filter(None, out.split("\0")):
            meta, _, name = line.partition("\t")
            _mode, kind, sha = meta.split()
            entries.append((kind, sha, f"{path}/{name}" if path else name))
        return entries

    def git_blob(self, r: Repo, sha: str) -> bytes | None:
        """The content of blob ``sha`` in ``r``'s git repository, or ``None``."""
        assert r.git_dir is not None
        kind = run_git(r.git_dir, "cat-file", "-t", sha, check=False)
        if kind.returncode != 0 or kind.stdout.strip() != b"blob":
            return None
        return run_git(r.git_dir, "cat-file", "blob", sha).stdout

    def add_pull(
        self,
        repo: str,
        number: int,
        *,
        head_sha: str,
        head_ref: str,
        base_ref: str | None = None,
        state: str = "open",
        title: str = "A pull request",
        user: str | None = None,
        files: Iterable[str | tuple[str, str]] = (),
        draft: bool = False,
        body: str = "",
        head_repo: str | None = None,
        maintainer_can_modify: bool = False,
    ) -> None:
        """Create pull request ``number`` (base defaults to the default branch) changing
        ``files``. In a git-backed repository its head is ``head_ref``'s tip when that
        branch exists (``head_sha`` otherwise). ``head_repo`` names a fork holding
        ``head_ref`` (default: ``repo`` itself); ``maintainer_can_modify`` is whether that
        fork allows the base's maintainers to push to it."""
        with self.lock:
            r = self.repo(repo)
            r.pulls[number] = {
                "head_sha": head_sha,
                "head_ref": head_ref,
                "head_repo": head_repo or r.full_name,
                "maintainer_can_modify": maintainer_can_modify,
                "base_ref": base_ref or r.default_branch,
                "state": state,
                "title": title,
                "body": body,
                "draft": draft,
                "user": user or self.user_login,
                "id": self.next_id(),
                "files": [],
                "requested": [],
                "requested_teams": [],
                "reviews": [],
                "auto_merge": None,
            }
        self.set_pull_files(repo, number, files)

    def set_pull_files(self, repo: str, number: int,
                       files: Iterable[str | tuple[str, str]]) -> None:
        """The files pull request ``number`` changes: paths, or ``(path, previous_path)``
        for a rename."""
        with self.lock:
            pr = self._pull(repo, number, "set_pull_files")
            pr["files"] = []
            for f in files:
                path, previous = (f, None) if isinstance(f, str) else f
                entry = {"filename": path, "status": "renamed" if previous else "modified"}
                if previous:
                    entry["previous_filename"] = previous
                pr["files"].append(entry)

    def add_review(self, repo: str, number: int, user: str, state: str = "APPROVED", *,
                   commit_id: str | None = None, body: str = "") -> int:
        """Add a submitted review by ``user`` to pull request ``number``; returns its id."""
        with self.lock:
            pr = self._pull(repo, number, "add_review")
            review: dict[str, Any] = {
                "id": self.next_id(),
                "user": user,
                "state": state,
                "commit_id": commit_id or self.pull_head(repo, pr),
                "body": body,
                "submitted_at": now(),
            }
            pr["reviews"].append(review)
            return int(review["id"])

    def set_permission(self, repo: str, login: str, role: str, *,
                       permission: str | None = None) -> None:
        """Give ``login`` the repository role ``role`` (admin, maintain, write, triage,
        read, or a custom role name with its base ``permission``)."""
        with self.lock:
            base = permission or BASE_PERMISSION.get(role)
            if base is None:
                raise ValueError(f"custom role {role!r} needs permission=")
            self.repo(repo).permissions[login.lower()] = (role, base)

    def add_repo_label(self, repo: str, name: str, *, color: str = "ededed",
                       description: str = "") -> dict[str, Any]:
        """Create repository label ``name`` if it is new; returns it."""
        with self.lock:
            r = self.repo(repo)
            label = r.labels.get(name.lower())
            if label is None:
                label = {"id": self.next_id(), "name": name, "color": color,
                         "description": description}
                r.labels[name.lower()] = label
            return label

    def set_issue_labels(self, repo: str, number: int, labels: Iterable[str]) -> None:
        """Put exactly ``labels`` on issue/PR ``number`` (creating repository labels)."""
        with self.lock:
            names = [self.add_repo_label(repo, n)["name"] for n in labels]
            self.repo(repo).issue_labels[number] = list(dict.fromkeys(names))

    def add_user(self, login: str, *, user_id: int | None = None,
                 type_: str | None = None) -> int:
        """Seed the account of ``login`` (id ``user_id``, default
        :meth:`default_user_id`); returns its id."""
        with self.lock:
            self.user_store[login.casefold()] = {
                "login": login,
                "id": self.default_user_id(login) if user_id is None else user_id,
                "type": type_ or ("Bot" if login.endswith("[bot]") else "User")}
            return int(self.user_store[login.casefold()]["id"])

    def recreate_user(self, login: str) -> int:
        """A new account takes ``login`` (its former holder renamed or deleted theirs),
        as GitHub lets anyone do with a freed login; returns the new account's id. Earlier
        comments keep their author's id."""
        return self.add_user(login, user_id=10**8 + self.next_id())

    def add_comment(self, repo: str, number: int, body: str, *, user: str = "octocat") -> int:
        """Add a comment by ``user`` to issue/PR ``number``; returns its id."""
        return int(self._new_comment(repo, number, body, user)["id"])

    # -- reading --------------------------------------------------------------------------

    @property
    def actions(self) -> list[str]:
        """Copy of the successful writes, in order (see the module docstring)."""
        with self.lock:
            return list(self._actions)

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        """Comments on issue/PR ``number``, oldest first: ``[{"id", "user", "body"}]``."""
        with self.lock:
            return [{"id": c["id"], "user": c["user"], "body": c["body"]}
                    for c in self.comments_on(repo, number)]

    def comments_on(self, repo: str, number: int) -> list[dict[str, Any]]:
        """The stored comments on issue/PR ``number`` (all fields), oldest first."""
        with self.lock:
            r = self.lookup(repo)
            if r is None:
                return []
            return [c for c in self.comment_store.values()
                    if c["repo"] == r.full_name and c["number"] == number]

    def labels(self, repo: str, number: int) -> list[str]:
        """Label names on issue/PR ``number``."""
        with self.lock:
            r = self.lookup(repo)
            return list(r.issue_labels.get(number, [])) if r else []

    def repo_labels(self, repo: str) -> list[str]:
        """Label names defined in the repository."""
        with self.lock:
            r = self.lookup(repo)
            return [lbl["name"] for lbl in r.labels.values()] if r else []

    def file(self, repo: str, path: str, ref: str | None = None) -> str | None:
        """Text of ``path`` on ``ref`` (default branch when ``None``), or ``None``."""
        with self.lock:
            r = self.lookup(repo)
            if r is None:
                return None
            if r.git_dir is not None:
                return self.git_text(r, ref or r.default_branch, path.strip("/"))
            return r.files.get((ref or r.default_branch, path.strip("/")))

    def requested_reviewers(self, repo: str, number: int) -> list[str]:
        """Logins with a pending review request on pull request ``number``."""
        with self.lock:
            return list(self._pull(repo, number, "requested_reviewers")["requested"])

    def check_runs(self, repo: str) -> list[dict[str, Any]]:
        """Check runs of the repository, oldest first: ``{"id", "name", "head_sha",
        "status", "conclusion", "output": {"title", "summary", "text"}, "annotations",
        "details_url", "external_id", "started_at", "completed_at", "check_suite_id",
        "app"}`` (``app``: the App's slug; ``annotations``: GitHub's annotation objects,
        ``{"path", "start_line", "end_line", "start_column", "end_column",
        "annotation_level", "title", "message", "raw_details"}``, in the order given)."""
        with self.lock:
            r = self.lookup(repo)
            return [dict(c) for c in r.check_runs.values()] if r else []

    def check_suites(self, repo: str) -> list[dict[str, Any]]:
        """Check suites of the repository, oldest first: ``{"id", "head_sha",
        "head_branch", "before", "after", "app", "status", "conclusion", "created_at",
        "updated_at"}`` (``app``: the App's slug)."""
        with self.lock:
            r = self.lookup(repo)
            return [dict(c) for c in r.check_suites.values()] if r else []

    def app_info(self, slug: str) -> dict[str, Any]:
        """``{"id", "slug", "name", "owner"}`` of the App ``slug``: :data:`ACTIONS_APP`,
        else the fake's own App (id :attr:`app_id` or 1, its slug from
        :attr:`bot_login`)."""
        if slug == ACTIONS_APP["slug"]:
            return dict(ACTIONS_APP)
        own = self.bot_login.removesuffix("[bot]")
        return {"id": getattr(self, "app_id", None) or 1, "slug": own, "name": own,
                "owner": self.user_login}

    def check_suite_for(self, r: Repo, head_sha: str, app: str, *,
                        head_branch: str | None = None, before: str | None = None,
                        new: bool = False) -> dict[str, Any]:
        """The check suite of App ``app`` (a slug) on ``head_sha``: the latest one, or a
        new one (``new``, or none yet), as GitHub makes one per App and push ("a check
        suite is created automatically when you create a check run"). A new suite's
        ``head_branch`` is ``head_branch``, else a branch whose tip is ``head_sha``
        (``None`` when none is)."""
        with self.lock:
            if not new:
                for suite in reversed(r.check_suites.values()):
                    if suite["head_sha"] == head_sha and suite["app"] == app:
                        return suite
            if head_branch is None and r.git_dir is not None:
                tips = [b for b, sha in self._branch_tips(r).items() if sha == head_sha]
                head_branch = next((b for b in tips if b != r.default_branch),
                                   tips[0] if tips else None)
            stamp = now()
            suite = {"id": self.next_id(), "head_sha": head_sha, "head_branch": head_branch,
                     "before": before, "after": head_sha, "app": app, "status": "queued",
                     "conclusion": None, "created_at": stamp, "updated_at": stamp}
            r.check_suites[suite["id"]] = suite
            return suite

    def refresh_suite(self, r: Repo, suite_id: int) -> bool:
        """Sum suite ``suite_id``'s runs into its ``status`` and ``conclusion``
        (:func:`suite_verdict`); returns whether it became ``completed`` now."""
        with self.lock:
            suite = r.check_suites[suite_id]
            was = suite["status"]
            status, conclusion = suite_verdict(
                run for run in r.check_runs.values() if run.get("check_suite_id") == suite_id)
            if (status, conclusion) != (suite["status"], suite["conclusion"]):
                suite.update(status=status, conclusion=conclusion, updated_at=now())
            return status == "completed" and was != "completed"

    def suite_pulls(self, r: Repo, head_sha: str,
                    head_branch: str | None) -> list[tuple[int, dict[str, Any]]]:
        """``(number, pull request)`` of the open pull requests a check suite or run on
        ``head_sha`` lists: those whose head is ``head_sha`` (and, given, branch
        ``head_branch``) in ``r`` itself (GitHub lists none from forks)."""
        with self.lock:
            return [(n, pr) for n, pr in sorted(r.pulls.items())
                    if pr["state"] == "open" and self.pull_head(r, pr) == head_sha
                    and (head_branch is None or pr["head_ref"] == head_branch)
                    and (pr.get("head_repo") or r.full_name).casefold()
                    == r.full_name.casefold()]

    def _branch_tips(self, r: Repo) -> dict[str, str]:
        assert r.git_dir is not None
        out = run_git(r.git_dir, "for-each-ref", "--format=%(refname:strip=2) %(objectname)",
                      "refs/heads", check=False).stdout.decode()
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    def resolve_commit(self, r: Repo, ref: str) -> str:
        """The commit ``ref`` names in a git-backed repository (a sha, a branch, a tag,
        ``heads/B`` or ``tags/T``, as "List check runs for a Git reference" takes), or
        ``ref`` itself when it names none (a seeded sha)."""
        if r.git_dir is None or not ref or ref.startswith("-"):
            return ref
        done = run_git(r.git_dir, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}",
                       check=False)
        return done.stdout.decode().strip() if done.returncode == 0 else ref

    def reactions(self, repo: str, comment_id: int) -> list[tuple[str, str]]:
        """``(user, content)`` pairs on comment ``comment_id``."""
        with self.lock:
            return [(x["user"], x["content"]) for x in self.reaction_store.get(comment_id, [])]

    def add_review_comment(self, repo: str, number: int, body: str, *,
                           user: str = "octocat", path: str = "README.md") -> int:
        """Seed a review comment by ``user`` on pull request ``number``'s diff; returns
        its id (records no action)."""
        with self.lock:
            r = self.repo(repo)
            stamp, cid = now(), self.next_id()
            self.review_comment_store[cid] = {
                "id": cid, "repo": r.full_name, "number": number, "user": user, "body": body,
                "path": path, "created_at": stamp, "updated_at": stamp}
            return cid

    def review_reactions(self, repo: str, comment_id: int) -> list[tuple[str, str]]:
        """``(user, content)`` of each reaction on review comment ``comment_id``."""
        with self.lock:
            return [(x["user"], x["content"])
                    for x in self.review_reaction_store.get(comment_id, [])]

    def dismiss_review(self, repo: str, number: int, review_id: int) -> None:
        """Mark review ``review_id`` of pull request ``number`` dismissed (seeding, as a
        person would on GitHub; records no action)."""
        with self.lock:
            for review in self._pull(repo, number, "dismiss_review")["reviews"]:
                if review["id"] == review_id:
                    review["state"] = "DISMISSED"

    def find_comment(self, repo: str, comment_id: int) -> dict[str, Any] | None:
        """The stored comment ``comment_id`` of ``repo``, or ``None``."""
        with self.lock:
            r = self.lookup(repo)
            c = self.comment_store.get(comment_id)
            return c if r is not None and c is not None and c["repo"] == r.full_name else None

    @staticmethod
    def comment_url(c: dict[str, Any]) -> str:
        """The comment's ``html_url`` path, relative to the web root."""
        return f"/{c['repo']}/issues/{c['number']}#issuecomment-{c['id']}"

    # -- reads the operations share ------------------------------------------------------

    def pull_head(self, repo: str | Repo, pr: dict[str, Any]) -> str:
        """A pull request's head sha: its branch's tip in a git-backed repository (so a
        push moves it, as on GitHub), else the seeded ``head_sha``."""
        r = repo if isinstance(repo, Repo) else self.lookup(repo)
        fork = pr.get("head_repo")
        if r is not None and fork and fork.casefold() != r.full_name.casefold():
            holder = self.lookup(fork)  # a fork's branch, never the base's namesake
            return (self.branch_sha(holder, pr["head_ref"]) if holder else None) \
                or pr["head_sha"]
        return self.branch_sha(repo, pr["head_ref"]) or pr["head_sha"]

    def _branch_exists(self, r: Repo, branch: str) -> bool:
        if r.git_dir is not None:
            return self.branch_sha(r, branch) is not None
        return any(ref == branch for ref, _ in r.files) or any(
            pr["head_ref"] == branch for pr in r.pulls.values())

    def latest_check_runs(self, repo: str, head_sha: str,
                          name: str | None = None) -> list[dict[str, Any]]:
        """The stored latest run of each name on ``head_sha``, oldest first."""
        with self.lock:
            r = self.repo(repo)
            latest: dict[str, dict[str, Any]] = {}
            for run in r.check_runs.values():
                if run["head_sha"] == head_sha and name in (None, run["name"]):
                    latest[run["name"]] = run
            return sorted(latest.values(), key=lambda run: run["id"])

    # -- internals ------------------------------------------------------------------------

    def _pull(self, repo: str, number: int, what: str) -> dict[str, Any]:
        pr = self.repo(repo).pulls.get(number)
        if pr is None:
            raise KeyError(f"fake GitHub has no pull request {repo}#{number} ({what}); "
                           "call add_pull() first")
        return pr

    def _new_comment(self, repo: str, number: int, body: str, user: str) -> dict[str, Any]:
        with self.lock:
            r = self.repo(repo)
            stamp = now()
            c: dict[str, Any] = {"id": self.next_id(), "repo": r.full_name, "number": number,
                                 "user": user, "user_id": self.user_id(user), "body": body,
                                 "created_at": stamp, "updated_at": stamp}
            self.comment_store[c["id"]] = c
            return c
