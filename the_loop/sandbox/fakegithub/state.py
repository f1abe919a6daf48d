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
    OWNER/NAME#7:create-pull-request:<head branch>
    OWNER/NAME#7:update-pull-request
    OWNER/NAME:create-check-run:<name>
    OWNER/NAME:update-check-run:<check run id>

Use it in-process as the GitHub integration of graph, hook and worker tests, or for local
development without a GitHub. The loopback HTTP fake of the end-to-end tests
(``the_loop/sandbox/fakegithub/http.py``) is a thin Flask front over this same state, so there is
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

import contextlib
import hashlib
import itertools
import os
import shutil
import subprocess
import tempfile
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph.ports import (
    OPERATIONS,
    PERMISSIONS,
    REACTIONS,
    App,
    CheckRun,
    CheckRuns,
    Comment,
    Comments,
    Committed,
    Created,
    EnsuredLabel,
    File,
    GitHub,
    IntegrationError,
    Labels,
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

__all__ = ["BASE_PERMISSION", "FakeGitHub", "FakeGitError", "Repo", "blob_sha", "seed_git_repo"]

#: Repository role -> the coarse ``permission`` GitHub reports beside ``role_name``.
BASE_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}


def blob_sha(text: str | bytes) -> str:
    """Git's blob sha of ``text`` (what GitHub reports as a file's ``sha``)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def now() -> str:
    """The current time as GitHub writes it (``2024-01-01T12:00:00Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------ git

#: Seconds one git command of the fake may take.
GIT_TIMEOUT = 30.0
#: The git executable (found once on the PATH of this process).
GIT = shutil.which("git") or "git"


class FakeGitError(RuntimeError):
    """A git command of the fake failed (its repository is broken or the ref is bad).

    A test double's error: it stays out of the-loop's exception tree
    (:mod:`graph.errors`), which holds only what the product raises.
    """


def git_env(**extra: str) -> dict[str, str]:
    """A minimal environment for git: no user or system configuration, no prompts."""
    env = {"PATH": os.defpath, "LANG": "C.UTF-8",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_TERMINAL_PROMPT": "0", "HOME": os.devnull}
    env.update(extra)
    return env


def run_git(git_dir: Path, *args: str, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[bytes]:
    """``git --git-dir=GIT_DIR ARGS...`` (argument list, no shell, :data:`GIT_TIMEOUT`).

    Raises:
        FakeGitError: it exited non-zero and ``check`` is true.
    """
    done = subprocess.run([GIT, f"--git-dir={git_dir}", *args], input=stdin,
                          capture_output=True, timeout=GIT_TIMEOUT,
                          env=dict(env) if env is not None else git_env(), check=False)
    if check and done.returncode != 0:
        raise FakeGitError(f"git {args[0]} in {git_dir} failed: "
                       + done.stderr.decode("utf-8", "replace").strip()[-500:])
    return done


def seed_git_repo(git_dir: Path, files: Mapping[str, str], *, default_branch: str = "main",
                  author: tuple[str, str] = ("Octo Cat", "octocat@example.com"),
                  message: str = "Initial commit") -> str:
    """Create the bare repository ``git_dir`` with one commit on ``default_branch`` that
    holds ``files`` (path -> text, e.g. ``README.md`` and ``.the-loop/collaborators.yaml``),
    using real git (``git init --bare``, ``hash-object``, ``update-index``, ``write-tree``,
    ``commit-tree``, ``update-ref``).

    Returns:
        the commit's sha (40 hex digits).
    """
    git_dir.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([GIT, "init", "--quiet", "--bare", f"--initial-branch={default_branch}",
                    str(git_dir)], check=True, capture_output=True, timeout=GIT_TIMEOUT,
                   env=git_env())
    return commit_files(git_dir, default_branch, files, message=message, author=author)


def commit_files(git_dir: Path, branch: str, files: Mapping[str, str | None], *,
                 message: str, author: tuple[str, str]) -> str:
    """One commit on ``branch`` of bare ``git_dir`` (created when absent) setting each
    path to its text (``None`` deletes it); the ref moves only if it did not change
    meanwhile (``update-ref`` with the old value). Returns the commit's sha."""
    ref = f"refs/heads/{branch}"
    parent = run_git(git_dir, "rev-parse", "--verify", "-q", ref, check=False)
    old = parent.stdout.decode().strip() if parent.returncode == 0 else ""
    with tempfile.TemporaryDirectory(prefix="fake-git-index-") as tmp:
        env = git_env(GIT_INDEX_FILE=str(Path(tmp) / "index"))
        if old:
            run_git(git_dir, "read-tree", old, env=env)
        for path, text in files.items():
            if text is None:
                run_git(git_dir, "update-index", "--force-remove", "--", path, env=env)
                continue
            blob = run_git(git_dir, "hash-object", "-w", "--stdin",
                           stdin=text.encode("utf-8"), env=env).stdout.decode().strip()
            run_git(git_dir, "update-index", "--add", "--cacheinfo",
                    f"100644,{blob},{path}", env=env)
        tree = run_git(git_dir, "write-tree", env=env).stdout.decode().strip()
    who = {"GIT_AUTHOR_NAME": author[0], "GIT_AUTHOR_EMAIL": author[1],
           "GIT_COMMITTER_NAME": author[0], "GIT_COMMITTER_EMAIL": author[1]}
    commit = run_git(git_dir, "commit-tree", tree, *(["-p", old] if old else []),
                     stdin=message.encode("utf-8"), env=git_env(**who)).stdout.decode().strip()
    run_git(git_dir, "update-ref", ref, commit, old or "0" * 40)
    return commit


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


def _not_found(op: str, what: str) -> NotFound:
    return NotFound(f"github {op}: no such {what}", integration="github", op=op, status=404)


def _refused(op: str, status: int, message: str, *codes: str) -> IntegrationError:
    return IntegrationError(f"github {op}: {message}", integration="github", op=op,
                            status=status, codes=codes)


class FakeGitHub(Transport):
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
                "reviews": [],
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
        "status", "conclusion", "output": {"title", "summary"}}``."""
        with self.lock:
            r = self.lookup(repo)
            return [dict(c) for c in r.check_runs.values()] if r else []

    def reactions(self, repo: str, comment_id: int) -> list[tuple[str, str]]:
        """``(user, content)`` pairs on comment ``comment_id``."""
        with self.lock:
            return [(x["user"], x["content"]) for x in self.reaction_store.get(comment_id, [])]

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
        with self.lock:
            full_name = self.repo(repo).full_name
            existing = self.reaction_store.setdefault(comment_id, [])
            found = next((x for x in existing
                          if x["user"] == self.actor and x["content"] == content), None)
            if found is None:
                found = {"id": self.next_id(), "user": self.actor, "content": content,
                         "created_at": now()}
                existing.append(found)
            self.record(f"{full_name}:add-reaction:{comment_id}:{content}")
            return {"id": found["id"]}

    def add_review_comment_reaction(self, repo: str, comment_id: int,
                                    content: str) -> Created:
        """A reaction on pull request review comment ``comment_id`` (kept apart from issue
        comments' reactions, as GitHub's ids are); the same one twice is returned again."""
        op = "add-review-comment-reaction"
        if content not in REACTIONS:
            raise _refused(op, 422, f"content {content!r} is not a reaction", "invalid")
        with self.lock:
            full_name = self.repo(repo).full_name
            existing = self.review_reaction_store.setdefault(comment_id, [])
            found = next((x for x in existing
                          if x["user"] == self.actor and x["content"] == content), None)
            if found is None:
                found = {"id": self.next_id(), "user": self.actor, "content": content,
                         "created_at": now()}
                existing.append(found)
            self.record(f"{full_name}:{op}:{comment_id}:{content}")
            return {"id": found["id"]}

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
                    "html_url": f"/{r.full_name}/pull/{number}"}

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

    def _branch_exists(self, r: Repo, branch: str) -> bool:
        if r.git_dir is not None:
            return self.branch_sha(r, branch) is not None
        return any(ref == branch for ref, _ in r.files) or any(
            pr["head_ref"] == branch for pr in r.pulls.values())

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

    def request_reviewers(self, repo: str, number: int, reviewers: list[str]) -> Reviewers:
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
            return {"requested": list(pr["requested"])}

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
                         details_url: str | None = None) -> Created:
        run: dict[str, Any] = {"id": 0, "name": name, "head_sha": head_sha, "status": "queued",
                               "conclusion": None, "output": {"title": None, "summary": None},
                               "details_url": details_url}
        self._check_fields("create-check-run", run, status, conclusion, title, summary)
        with self.lock:
            r = self.repo(repo)
            run["id"] = self.next_id()
            r.check_runs[run["id"]] = run
            self.record(f"{r.full_name}:create-check-run:{name}")
        return {"id": run["id"]}

    def update_check_run(self, repo: str, check_run_id: int, status: str | None = None,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None,
                         details_url: str | None = None) -> Created:
        with self.lock:
            r = self.repo(repo)
            run = r.check_runs.get(check_run_id)
            if run is None:
                raise _not_found("update-check-run", "check run")
            updated = {**run, "output": dict(run["output"])}
            self._check_fields("update-check-run", updated, status, conclusion, title, summary)
            if details_url is not None:
                updated["details_url"] = details_url
            run.update(updated)
            self.record(f"{r.full_name}:update-check-run:{check_run_id}")
        return {"id": check_run_id}

    def list_check_runs(self, repo: str, head_sha: str, name: str | None = None
                        ) -> CheckRuns:
        """The latest run of each name on ``head_sha`` (GitHub's ``filter=latest``)."""
        return {"check_runs": [CheckRun(id=run["id"], name=run["name"], status=run["status"],
                                        conclusion=run["conclusion"])
                               for run in self.latest_check_runs(repo, head_sha, name)]}

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

    @staticmethod
    def _check_fields(op: str, run: dict[str, Any], status: str | None,
                      conclusion: str | None, title: str | None, summary: str | None) -> None:
        if status is not None:
            if status not in CHECK_STATUSES:
                raise _refused(op, 422, f"status {status!r} is not a check run status")
            run["status"] = status
        if conclusion is not None:
            run["conclusion"], run["status"] = conclusion, "completed"
        if run["status"] == "completed" and not run["conclusion"]:
            raise _refused(op, 422, '"conclusion" wasn\'t supplied')
        if title is not None or summary is not None:
            run["output"] = {"title": title, "summary": summary}

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


if TYPE_CHECKING:  # mypy checks that the fake implements the port

    def _implements_the_port(fake: FakeGitHub) -> GitHub:
        return fake
