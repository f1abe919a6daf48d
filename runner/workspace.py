"""A git checkout per work item: the working tree an agent turn runs in.

Each work item gets its own worktree, ``ROOT/<owner>__<name>__<N>``, on its own branch
(:func:`branch_name`: ``the-loop/<N>-<slug>``), never shared with another work item; a
task of its plan gets ``ROOT/<owner>__<name>__<N>--<task>``. Every worktree of a
repository shares one object store: the bare mirror ``ROOT/mirrors/<owner>/<name>.git``
(git-worktree(1)), whose ``refs/remotes/origin/*`` are the remote's branches as last
fetched and whose ``refs/heads/*`` are the work items' branches, so the disk a live work
item costs is its checkout, not a clone. :meth:`Workspaces.prepare` fetches into the
mirror (once per turn; creating it the first time), reads the refs it needs and the
protected files in one ``git cat-file --batch``, and adds the worktree when missing, on
the remote branch when it exists, else a new one from the default branch;
:meth:`Workspaces.commit_and_push` commits what the agent changed as the App's bot and
pushes it; :meth:`Workspaces.remove` removes the work item's worktrees and local
branches when the work item is done (the mirror stays). Runner processes on one machine
share a mirror: its fetch and its worktree additions and removals hold an ``flock`` on
``<mirror>.lock``, each checkout's git steps one on ``<checkout>.lock``.

Credentials (git docs: gitcredentials, "Environment Variables" in git(1)):

* HTTPS with a short-lived installation token (GitHub: "Authenticating as a GitHub App
  installation", user ``x-access-token``): the token is fetched per operation and given
  only to the git child process, in the ``THE_LOOP_GIT_TOKEN`` variable, which a small
  ``GIT_ASKPASS`` script (written once under ``ROOT``, it holds no secret) prints when git
  asks for the password. It is never in argv, in ``.git/config`` or in the remote URL,
  and is scrubbed from any git output that reaches an error message.
* or a credential helper command (``["gh", "auth", "git-credential"]`` for the ``cli``
  transport), passed with ``-c credential.helper=!...`` per call.

A mirror created with ``partial_clone`` on (the default) is a partial clone (git docs
"partial-clone": ``origin`` its promisor remote, filter ``blob:none``): its fetches bring
commits and trees, and git fetches missing blobs itself, in a child ``git fetch``, when a
checkout, merge, ``cat-file`` or ``show`` needs them. Those steps get the credential too
(the same way, after the same configuration rewrite); without one the lazy fetch fails at
once. The-loop's own git processes per turn are the same in both kinds; the lazy fetches
are git's children (one per blob ``cat-file --batch`` lacks, one per checkout).

Every git call runs with an argument list (no shell), a time limit (its process group is
killed on expiry), ``-c credential.helper=`` first (stored helpers are never used), a
minimal environment (``PATH``, ``HOME``, ``LANG``; none of the-loop's secrets;
``GIT_TERMINAL_PROMPT=0``; no system or global git configuration), and with hooks and
fsmonitor disabled. The agent can write anything under the checkout, its ``.git`` link
and the mirror included, so before each call that holds a credential the-loop rewrites
the mirror's ``config`` with its own and the worktree's links to the mirror (a
``core.fsmonitor`` or filter the agent planted would otherwise run with the token in its
environment).

Files a harness executes from the tree (:data:`PROTECTED_PATHS`: Claude Code's
``.claude/settings.json`` and ``.claude/settings.local.json``, whose hooks are shell
commands, and ``.mcp.json``, which starts MCP servers) are replaced in the working tree by
the default branch's version -- or removed when the default branch has none -- by
:meth:`~Workspaces.prepare` and again by :meth:`~Workspaces.commit_and_push`, so a
branch (or an earlier turn of the agent) cannot turn into code the-loop runs.

Why restore-and-exclude rather than ``git update-index --skip-worktree``: skip-worktree
only covers paths tracked on the branch (a restored file the branch lacks would be
committed as new), and the agent may run ``git add -A`` / ``git commit`` itself. So the
commit step does not trust the index at all: it stages everything, resets the protected
paths and :data:`STATE_DIR` in the index to the head :meth:`~Workspaces.prepare` saw
(``git reset HEAD -- PATHS``), writes the tree and commits it once as the bot with that
head as its parent (``git commit-tree``), and moves the branch there. The restoration is
never committed, and the agent's own commits are squashed into the bot's one.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from foundation.branches import (  # noqa: F401 (re-exported)
    BRANCH_PREFIX,
    branch_name,
    task_branch,
)
from graph.errors import LoopError

__all__ = [
    "PROTECTED_PATHS",
    "STATE_DIR",
    "Checkout",
    "MergeConflict",
    "WorkspaceError",
    "Workspaces",
    "branch_name",
]

log = logging.getLogger("the_loop.workers.workspace")

#: Repository-relative files a harness would execute from the tree.
PROTECTED_PATHS = (".claude/settings.json", ".claude/settings.local.json", ".mcp.json")
#: The-loop's local state inside a checkout: never committed.
STATE_DIR = ".the-loop/state"
#: Seconds a network git step (clone, fetch, push) may take; local steps get LOCAL_TIMEOUT.
NETWORK_TIMEOUT = 300.0
LOCAL_TIMEOUT = 60.0
#: Username sent with an installation token ("x-access-token", as GitHub documents).
TOKEN_USER = "x-access-token"
#: The variable that carries the token to the askpass script (only in git's environment).
TOKEN_VARIABLE = "THE_LOOP_GIT_TOKEN"

_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_ASKPASS = f"""#!/bin/sh
# GIT_ASKPASS for the-loop: git asks "Username for ..." then "Password for ...".
case "$1" in
  Username*) printf '%s\\n' '{TOKEN_USER}' ;;
  *) printf '%s\\n' "${TOKEN_VARIABLE}" ;;
esac
"""


class WorkspaceError(LoopError):
    """A git step of a work item's checkout failed.

    The message names the repository, the branch and the git step (``clone``,
    ``fetch``, ``push``...) and git's last words with any token scrubbed out.

    Attributes:
        repo: ``OWNER/NAME``; branch: the work item's branch (``""`` before it is known);
        step: the git step that failed.
    """

    def __init__(self, message: str, *, repo: str, branch: str = "", step: str = "") -> None:
        super().__init__(message)
        self.repo = repo
        self.branch = branch
        self.step = step


class MergeConflict(WorkspaceError):
    """A task's branch does not merge cleanly into the work item's branch.

    Attributes:
        paths: the conflicting paths (repository-relative, sorted).
    """

    def __init__(self, message: str, *, repo: str, branch: str, paths: Sequence[str]) -> None:
        super().__init__(message, repo=repo, branch=branch, step="merge")
        self.paths = tuple(paths)


#: Times a task's merge is tried again when the work item's branch moved meanwhile.
MERGE_ATTEMPTS = 5


@dataclass(frozen=True)
class Checkout:
    """One work item's checkout, as :meth:`Workspaces.prepare` left it.

    Attributes:
        path: the working tree (absolute).
        branch: the work item's branch, e.g. ``the-loop/12-login-page``.
        base_sha: the default branch's tip at prepare time (what protected files and a
            new branch come from).
        head_sha: the branch's tip at prepare time (the parent of the next commit).
        repo: ``OWNER/NAME``; number: the work item's issue number;
        default_branch: the repository's default branch.
    """

    path: Path
    branch: str
    base_sha: str
    head_sha: str
    repo: str = field(kw_only=True)
    number: int = field(kw_only=True)
    default_branch: str = field(kw_only=True)
    #: the remote branch's tip at prepare time (``None``: not on the remote).
    remote_sha: str | None = field(default=None, kw_only=True)
    #: :data:`PROTECTED_PATHS` at ``base_sha`` -> their bytes (absent: not there).
    protected: Mapping[str, bytes] = field(default_factory=dict, kw_only=True)
    #: paths :meth:`Workspaces.prepare` was asked to read at ``base_sha`` -> their bytes,
    #: or ``None`` when absent (what :meth:`Workspaces.read_default` answers from).
    defaults: Mapping[str, bytes | None] = field(default_factory=dict, kw_only=True)
    #: ``(inode, size, mtime_ns, ctime_ns)`` of the worktree's index as prepare wrote it
    #: (a fresh checkout of ``head_sha``); ``None`` when prepare did not write it.
    index_stamp: tuple[int, int, int, int] | None = field(default=None, kw_only=True)


class Workspaces:
    """Per-work-item git worktrees of per-repository mirrors under one root directory.

    Args:
        root: the directory holding every checkout and ``mirrors/`` (created if missing).
        git_url: ``"OWNER/NAME"`` -> the clone URL, without credentials (e.g.
            ``https://github.com/OWNER/NAME.git``).
        token: returns a short-lived token for HTTPS (an installation token, see
            :meth:`integrations.github.GitHubClients.installation_token`); called once
            per network operation. ``None``: no token (a credential helper, or none).
        credential_helper: a credential helper command, e.g. ``["gh", "auth",
            "git-credential"]`` (gitcredentials "custom helpers"); used when ``token`` is
            ``None``.
        author: ``(name, email)`` of the commits, e.g. ``("the-loop[bot]",
            "123+the-loop[bot]@users.noreply.github.com")``.
        git: the git executable.
        env: base environment of git; only ``PATH``, ``HOME`` and ``GH_HOST`` are kept
            from it (the composition root hands it the process's; ``HOME`` matters for
            a credential helper such as gh's). ``None``: ``PATH`` = :data:`os.defpath`.
        partial_clone: a mirror created from now on is a partial clone
            (``--filter=blob:none``, git docs "partial-clone"): its fetches bring commits
            and trees only, and git fetches the blobs a checkout, merge or read needs
            from ``origin`` when it needs them ("lazy fetch", a child ``git fetch`` of
            that git process), with the same credential as the mirror's fetch. A mirror's
            kind is kept for its life: one created full stays full, and a partial one stays
            partial when this is turned off (it lacks blobs). ``THE_LOOP_RUNNER_PARTIAL_CLONE``.
    """

    def __init__(
        self,
        root: Path,
        *,
        git_url: Callable[[str], str],
        token: Callable[[], str | None] | None,
        credential_helper: Sequence[str] | None,
        author: tuple[str, str],
        git: str = "git",
        env: Mapping[str, str] | None = None,
        partial_clone: bool = True,
    ) -> None:
        self.root = Path(root).absolute()
        self.git_url = git_url
        self.token = token
        self.credential_helper = list(credential_helper) if credential_helper else None
        self.author = author
        self.git = git
        self.partial_clone = partial_clone
        self._env = {k: v for k, v in (env or {}).items() if k in ("PATH", "HOME", "GH_HOST")}
        self._env.setdefault("PATH", os.defpath)
        self.root.mkdir(parents=True, exist_ok=True)
        self._askpass = self.root / ".askpass" / "git-askpass.sh"

    def __repr__(self) -> str:
        return f"Workspaces(root={str(self.root)!r})"

    # -- paths ------------------------------------------------------------------------

    def path_of(self, repo: str, number: int) -> Path:
        """``ROOT/<owner>__<name>__<number>``: the checkout of work item ``repo#number``.

        Raises:
            WorkspaceError: ``repo`` is not ``OWNER/NAME`` or ``number`` not positive.
        """
        if not isinstance(repo, str) or not _REPO.fullmatch(repo) or any(
                part in (".", "..") for part in repo.split("/")):
            raise WorkspaceError(f"workspace: repo must be 'OWNER/NAME', got {repo!r}",
                                 repo=str(repo), step="path")
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise WorkspaceError(f"workspace {repo}: number must be a positive integer, "
                                 f"got {number!r}", repo=repo, step="path")
        owner, name = repo.split("/")
        return self.root / f"{owner}__{name}__{number}"

    # -- the three operations ---------------------------------------------------------

    def prepare(self, repo: str, number: int, title: str, default_branch: str, *,
                branch: str | None = None, task: str | None = None,
                read: Sequence[str] = ()) -> Checkout:
        """Fetch into the repository's mirror and check the work item's branch out in its
        worktree (added when missing).

        The branch (:func:`branch_name` of ``number`` and ``title``) comes from the
        remote when it exists there; else a local one already there is kept (its
        commits are not pushed yet); else it is created from ``default_branch``. A local
        branch behind the remote one is fast-forwarded. Then :data:`PROTECTED_PATHS` are
        restored from the default branch in the working tree.

        Args:
            repo: ``OWNER/NAME``; number: the issue number; title: the issue's title
                (only for the branch name); default_branch: e.g. ``main``; branch: the
                work item's branch when it has one already (kept when the title changes).
            task: a task of the work item's plan: its own checkout
                (``ROOT/<owner>__<name>__<N>--<task>``) on its own branch
                ``<work item branch>--<task>``, created from the work item's branch on
                the remote (or the default branch when that does not exist yet).
            read: repository-relative paths to read on the default branch in the same
                git step (:attr:`Checkout.defaults`, served by :meth:`read_default`).

        Returns:
            the :class:`Checkout`.

        Raises:
            WorkspaceError: a git step failed (clone, fetch, checkout...): wrong
                credentials, no such repository or branch, timeout.
        """
        path = self.path_of(repo, number)
        if branch is None:
            branch = branch_name(number, title)
        elif not branch.startswith(f"{BRANCH_PREFIX}{number}-") or ".." in branch:
            raise WorkspaceError(f"workspace {repo}: {branch!r} is not a branch of work "
                                 f"item #{number}", repo=repo, branch=branch, step="prepare")
        parent: str | None = None
        if task is not None:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", task):
                raise WorkspaceError(f"workspace {repo}: bad task id {task!r}", repo=repo,
                                     branch=branch, step="prepare")
            parent, branch = branch, task_branch(branch, task)
            path = path.with_name(f"{path.name}--{task}")
        if not default_branch or default_branch.startswith("-") or ".." in default_branch:
            raise WorkspaceError(f"workspace {repo}: bad default branch {default_branch!r}",
                                 repo=repo, branch=branch, step="prepare")
        url = self.git_url(repo)
        mirror = self.mirror_of(repo)
        with self._locked(path):
            with self._locked(mirror):
                self._fetch(repo, branch, mirror, url)
                names = [f"refs/remotes/origin/{default_branch}",
                         f"refs/remotes/origin/{branch}", f"refs/heads/{branch}",
                         *([f"refs/remotes/origin/{parent}"] if parent else []),
                         *(f"refs/remotes/origin/{default_branch}:{p}"
                           for p in PROTECTED_PATHS)]
                wanted = [p for p in dict.fromkeys(read) if _readable(p)]
                names += [f"refs/remotes/origin/{default_branch}:{p}" for p in wanted]
                found = self._objects(repo, branch, mirror, names)
                base = found[names[0]]
                if base is None:
                    raise WorkspaceError(
                        f"workspace {repo} ({branch}): the default branch "
                        f"{default_branch!r} is not on the remote", repo=repo, branch=branch,
                        step="fetch")
                remote, local = found[names[1]], found[names[2]]
                parent_tip = found[names[3]] if parent else None
                blobs = {p: (blob[1] if (blob := found[
                    f"refs/remotes/origin/{default_branch}:{p}"]) else None)
                    for p in (*PROTECTED_PATHS, *wanted)}
                protected = {p: b for p in PROTECTED_PATHS if (b := blobs[p]) is not None}
                gitdir = mirror / "worktrees" / path.name
                fresh = not (path / ".git").is_file() or not gitdir.is_dir()
                wrote_index = fresh
                if fresh:
                    if path.exists():
                        shutil.rmtree(path)  # a checkout that died half-way
                    if gitdir.exists():  # its registration (what `worktree prune` drops)
                        shutil.rmtree(gitdir)
                    if local is None:
                        head = remote or parent_tip or base
                        self._git(repo, branch, "checkout", mirror, "worktree", "add",
                                  "--quiet", "-B", branch, str(path), head[0], lazy=True)
                    else:
                        head = local
                        self._git(repo, branch, "checkout", mirror, "worktree", "add",
                                  "--quiet", str(path), branch, lazy=True)
            self._write_config(path, url, branch)
            # Ours is the only git in this checkout (the lock above): an index.lock left by
            # a git killed at its time limit is stale and would wedge every later turn.
            (gitdir / "index.lock").unlink(missing_ok=True)
            if not fresh:
                if local is None:
                    head = remote or parent_tip or base
                    self._git(repo, branch, "checkout", path, "checkout", "--quiet",
                              "--force", "-B", branch, head[0], lazy=True)
                    wrote_index = True
                else:
                    head = local
                    if not self._on_branch(gitdir, branch):
                        self._git(repo, branch, "checkout", path, "checkout", "--quiet",
                                  branch, lazy=True)
                    if remote is not None and remote[0] != local[0] and self._is_ancestor(
                            path, local[0], remote[0]):
                        self._git(repo, branch, "fast-forward", path, "merge", "--quiet",
                                  "--ff-only", remote[0], lazy=True)
                        head = remote
            self._restore_protected(path, protected)
            return Checkout(path, branch, base[0], head[0], repo=repo, number=number,
                            default_branch=default_branch,
                            remote_sha=remote[0] if remote else None, protected=protected,
                            defaults={p: blobs[p] for p in wanted},
                            index_stamp=_stamp(gitdir / "index") if wrote_index else None)

    def commit_and_push(self, checkout: Checkout, message: str) -> str:
        """Commit what the agent changed as the bot and push the branch.

        Everything in the working tree is staged except :data:`PROTECTED_PATHS` and
        :data:`STATE_DIR`, whose index entries are reset to ``checkout.head_sha`` (see the
        module docstring for why); commits the agent made itself are folded into this
        one. Author and committer are :attr:`author` (``GIT_AUTHOR_*`` and
        ``GIT_COMMITTER_*``). Nothing to commit: nothing is pushed, unless the branch
        holds commits the remote lacks (an earlier push failed).

        Args:
            checkout: what :meth:`prepare` returned for this turn.
            message: the commit message (the-loop's own text).

        Returns:
            the branch's head sha after the push (40 hex digits).

        Raises:
            WorkspaceError: a git step failed; a rejected push (the remote branch moved
                on, not a fast-forward) is one.
        """
        path, repo, branch = checkout.path, checkout.repo, checkout.branch
        if not message or not message.strip():
            raise WorkspaceError(f"workspace {repo} ({branch}): empty commit message",
                                 repo=repo, branch=branch, step="commit")
        url = self.git_url(repo)
        with self._locked(path):
            self._write_config(path, url, branch)
            self._restore_protected(path, checkout.protected)
            # Back on the branch at the head prepare saw (the agent may have switched or
            # committed), keeping index and tree; both read from git's files first
            # (gitrepository-layout), git asked only when they differ.
            gitdir, mirror = self._gitdir(checkout), self.mirror_of(repo)
            if not self._on_branch(gitdir, branch):
                self._git(repo, branch, "commit", path, "symbolic-ref", "HEAD",
                          f"refs/heads/{branch}")
            if _loose_ref(mirror, f"refs/heads/{branch}") != checkout.head_sha:
                self._git(repo, branch, "commit", path, "reset", "--quiet", "--soft",
                          checkout.head_sha)
            excluded = [*PROTECTED_PATHS, STATE_DIR]
            if checkout.index_stamp is not None and \
                    _stamp(gitdir / "index") == checkout.index_stamp:
                # The index is prepare's checkout of the head, untouched since (a write
                # replaces the file: a new inode and ctime): the excluded paths are the
                # head's already, so they are only left out of the staging.
                self._git(repo, branch, "commit", path, "add", "--all", "--", ".",
                          *(f":(exclude,literal){p}" for p in excluded))
            else:
                self._git(repo, branch, "commit", path, "add", "--all", "--", ".")
                self._git(repo, branch, "commit", path, "reset", "--quiet",
                          checkout.head_sha, "--", *excluded)
            name, email = self.author
            who = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
                   "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
            done = self._run(repo, branch, "commit",
                             ["-c", "maintenance.auto=false", "-c", "gc.auto=0", "commit",
                              "--quiet", "--no-verify", "--no-gpg-sign", "-m", message],
                             cwd=path, extra_env=who, check=False)
            if done.returncode == 0:
                head = _loose_ref(mirror, f"refs/heads/{branch}") or \
                    self._rev(path, "HEAD") or ""
            elif done.returncode == 1 and b"nothing" in done.stdout + done.stderr:
                head = checkout.head_sha  # git commit: "nothing to commit"
            else:
                said = " ".join(done.stderr.decode("utf-8", "replace").split())[-400:]
                raise WorkspaceError(f"workspace {repo} ({branch}): git commit failed (exit "
                                     f"{done.returncode}): {said or 'no message'}",
                                     repo=repo, branch=branch, step="commit")
            if head == checkout.head_sha and checkout.remote_sha in (head, None):
                return head  # nothing new, nothing unpushed
            self._run(repo, branch, "push", ["push", "--quiet", "--no-verify", "origin",
                                             f"{head}:refs/heads/{branch}"],
                      cwd=path, network=True)
            return head

    def merge_into(self, checkout: Checkout, target: str, message: str) -> str:
        """Merge a task's pushed branch (``checkout.branch``) into the work item's branch
        ``target`` on the remote: fetch, merge (``--no-ff``, as the bot) onto the remote
        ``target`` (or the default branch when it does not exist yet), push. A push
        refused because ``target`` moved on (another task merged meanwhile) is tried
        again on the new tip, up to :data:`MERGE_ATTEMPTS` times.

        Returns:
            ``target``'s head after the merge (40 hex digits).

        Raises:
            MergeConflict: the branches conflict (the merge is aborted; nothing pushed).
            WorkspaceError: a git step failed, or the push kept being refused.
        """
        path, repo = checkout.path, checkout.repo
        url = self.git_url(repo)
        name, email = self.author
        who = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
               "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
        with self._locked(path):
            try:
                for _ in range(MERGE_ATTEMPTS):
                    self._write_config(path, url, target)
                    mirror = self.mirror_of(repo)
                    with self._locked(mirror):
                        self._fetch(repo, target, mirror, url)
                    start = (self._rev(path, f"refs/remotes/origin/{target}")
                             or self._rev(path,
                                          f"refs/remotes/origin/{checkout.default_branch}"))
                    assert start is not None
                    # Detached: each task's worktree merges on its own (a branch can be
                    # checked out in one worktree only).
                    self._git(repo, target, "merge", path, "checkout", "--quiet", "--force",
                              "--detach", start, lazy=True)
                    merged = self._run(repo, target, "merge",
                                       ["merge", "--no-ff", "--no-edit", "--no-verify",
                                        "-m", message, f"refs/heads/{checkout.branch}"],
                                       cwd=path, check=False, extra_env=who, lazy=True)
                    if merged.returncode != 0:
                        listed = self._run(repo, target, "merge",
                                           ["diff", "--name-only", "--diff-filter=U"],
                                           cwd=path, check=False)
                        paths = sorted(p for p in listed.stdout.decode().splitlines() if p)
                        self._run(repo, target, "merge", ["merge", "--abort"], cwd=path,
                                  check=False, lazy=True)
                        raise MergeConflict(
                            f"workspace {repo}: {checkout.branch} conflicts with {target} in "
                            f"{', '.join(paths) or 'the merge'}", repo=repo, branch=target,
                            paths=paths)
                    head = self._rev(path, "HEAD")
                    assert head is not None
                    pushed = self._run(repo, target, "push",
                                       ["push", "--quiet", "--no-verify", "origin",
                                        f"{head}:refs/heads/{target}"],
                                       cwd=path, network=True, check=False)
                    if pushed.returncode == 0:
                        return head
                raise WorkspaceError(f"workspace {repo}: {target} kept moving; the merge of "
                                     f"{checkout.branch} was refused {MERGE_ATTEMPTS} times",
                                     repo=repo, branch=target, step="push")
            finally:
                self._run(repo, target, "merge", ["checkout", "--quiet", "--force",
                                                  checkout.branch], cwd=path, check=False,
                          lazy=True)

    def remove(self, repo: str, number: int) -> None:
        """Delete the work item's worktree and its tasks' (the work item is done), and
        their local branches; the repository's mirror stays for the other work items.
        No-op when absent.

        Raises:
            WorkspaceError: a directory could not be removed.
        """
        path = self.path_of(repo, number)
        mirror = self.mirror_of(repo)
        tasks = sorted(p for p in self.root.glob(f"{path.name}--*")
                       if not p.name.endswith(".lock"))
        for tree in (path, *tasks):
            with self._locked(tree), self._locked(mirror):
                if (tree / ".git").is_file() and (mirror / "HEAD").is_file():
                    self._run(repo, "", "remove", ["worktree", "remove", "--force",
                                                   str(tree)], cwd=mirror, check=False)
                try:
                    shutil.rmtree(tree)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise WorkspaceError(f"workspace {repo}#{number}: cannot remove {tree} "
                                         f"({exc.strerror})", repo=repo, step="remove"
                                         ) from None
                shutil.rmtree(mirror / "worktrees" / tree.name, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                tree.with_name(tree.name + ".lock").unlink()
        if not (mirror / "HEAD").is_file():
            return
        with self._locked(mirror):
            self._run(repo, "", "remove", ["worktree", "prune"], cwd=mirror, check=False)
            listed = self._run(repo, "", "remove", [
                "for-each-ref", "--format=%(refname)", f"refs/heads/{BRANCH_PREFIX}{number}-*"],
                cwd=mirror, check=False)
            refs = [r for r in listed.stdout.decode().splitlines() if r]
            if refs:
                self._run(repo, "", "remove", ["update-ref", "--stdin"], cwd=mirror,
                          input="".join(f"delete {r}\n" for r in refs).encode())

    # -- internals ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        """One process at a time in one checkout or mirror (``flock`` on a file beside
        it; runner processes on one machine share a mirror)."""
        lock = path.with_name(path.name + ".lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def mirror_of(self, repo: str) -> Path:
        """``ROOT/mirrors/<owner>/<name>.git``: the bare repository whose object store
        every worktree of ``repo`` shares (its ``refs/remotes/origin/*`` are the remote's
        branches as last fetched, its ``refs/heads/*`` the work items' branches).

        Raises:
            WorkspaceError: ``repo`` is not ``OWNER/NAME``.
        """
        self.path_of(repo, 1)  # the same validation
        owner, name = repo.split("/")
        return self.root / "mirrors" / owner / f"{name}.git"

    def _gitdir(self, checkout: Checkout) -> Path:
        """The worktree's own git directory inside the mirror."""
        return self.mirror_of(checkout.repo) / "worktrees" / checkout.path.name

    def _fetch(self, repo: str, branch: str, mirror: Path, url: str) -> None:
        """Create the mirror when missing, then fetch every branch of the remote into its
        ``refs/remotes/origin/*``. The caller holds the mirror's lock."""
        if not (mirror / "HEAD").is_file():
            mirror.parent.mkdir(parents=True, exist_ok=True)
            self._git(repo, branch, "clone", self.root, "init", "--quiet", "--bare",
                      str(mirror))
        self._write_mirror_config(mirror, url)
        try:
            self._run(repo, branch, "fetch", ["fetch", "--quiet", "--prune", "origin",
                                              "+refs/heads/*:refs/remotes/origin/*"],
                      cwd=mirror, network=True)
        except WorkspaceError as exc:
            if exc.step == "fetch" and not any((mirror / "refs" / "remotes").glob("*")):
                exc.step = "clone"  # the repository's first fetch is its clone
            raise

    def _is_partial(self, mirror: Path) -> bool:
        """Whether ``mirror`` is (or, not fetched yet, is to be) a partial clone: it holds
        a promisor pack (``objects/pack/*.promisor``, what a fetch from a promisor remote
        writes, git docs "partial-clone"), or :attr:`partial_clone` is on and it has no
        fetched refs yet. Read from the object store, not from ``config`` (rewritten)."""
        pack = mirror / "objects" / "pack"
        if any(pack.glob("*.promisor")):
            return True
        return self.partial_clone and not (mirror / "packed-refs").exists() and not any(
            (mirror / "refs" / "remotes").glob("*/*"))

    def _write_mirror_config(self, mirror: Path, url: str) -> None:
        """Replace the mirror's ``config`` with the-loop's own (remote URL, no
        credentials; for a partial clone, :meth:`_is_partial`, ``origin`` as its
        promisor remote with the ``blob:none`` filter, git-config ``remote.<name>.promisor``,
        ``remote.<name>.partialclonefilter``, ``extensions.partialClone``) and empty its
        ``hooks``, whatever an agent wrote there (a worktree's git reads the mirror's
        configuration)."""
        partial = self._is_partial(mirror)
        config = (
            f"[core]\n\trepositoryformatversion = {1 if partial else 0}\n"
            "\tfilemode = true\n\tbare = true\n\tlogallrefupdates = true\n"
            + ("[extensions]\n\tpartialClone = origin\n" if partial else "")
            + f'[remote "origin"]\n\turl = {_config_value(url)}\n'
            "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
            + ("\tpromisor = true\n\tpartialclonefilter = blob:none\n" if partial else "")
        )
        # Whole or not at all: git in another worktree may read it meanwhile.
        _write_atomic(mirror / "config", config)
        hooks = mirror / "hooks"
        if hooks.is_symlink() or hooks.is_file():
            hooks.unlink()
        elif hooks.is_dir():
            shutil.rmtree(hooks)
        hooks.mkdir()
        for extra in ("info/attributes",):  # repository-local attributes (filters)
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                (mirror / extra).unlink()

    def _write_config(self, path: Path, url: str, branch: str) -> None:
        """The mirror's configuration (:meth:`_write_mirror_config`), and the worktree's
        links to it (its ``.git`` file, its git directory's ``commondir``) rewritten, its
        per-worktree ``config.worktree`` removed: an agent could point them elsewhere."""
        owner, name = path.name.split("__")[:2]
        mirror = self.root / "mirrors" / owner / f"{name}.git"
        with self._locked(mirror):  # another runner process may rewrite it too
            self._write_mirror_config(mirror, url)
        gitdir = mirror / "worktrees" / path.name
        dot_git = path / ".git"
        if dot_git.is_dir() and not dot_git.is_symlink():
            shutil.rmtree(dot_git)
        dot_git.unlink(missing_ok=True)
        dot_git.write_text(f"gitdir: {gitdir}\n", encoding="utf-8")
        (gitdir / "commondir").write_text("../..\n", encoding="utf-8")
        (gitdir / "gitdir").write_text(f"{dot_git}\n", encoding="utf-8")
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            (gitdir / "config.worktree").unlink()

    @staticmethod
    def _on_branch(gitdir: Path, branch: str) -> bool:
        """Whether the worktree's ``HEAD`` is the symbolic ref ``refs/heads/<branch>``
        (gitrepository-layout: ``HEAD`` holds ``ref: <refname>``)."""
        try:
            return (gitdir / "HEAD").read_text(encoding="utf-8") == f"ref: refs/heads/{branch}\n"
        except (OSError, UnicodeDecodeError):
            return False

    def _objects(self, repo: str, branch: str, cwd: Path, names: Sequence[str]
                 ) -> dict[str, tuple[str, bytes] | None]:
        """Resolve and read ``names`` in one ``git cat-file --batch``: each name ->
        ``(sha, content)``, or ``None`` when missing. A ``REF`` is read as its commit
        (``REF^{commit}``); a ``REV:PATH`` must be a blob."""
        asked = [n if ":" in n else f"{n}^{{commit}}" for n in names]
        done = self._run(repo, branch, "read", ["cat-file", "--batch"], cwd=cwd,
                         input="".join(f"{n}\n" for n in asked).encode(), lazy=True)
        out, pos = done.stdout, 0
        found: dict[str, tuple[str, bytes] | None] = {}
        for name in names:
            end = out.index(b"\n", pos)
            header = out[pos:end].decode().split()
            pos = end + 1
            if len(header) != 3 or header[2] in ("missing", "ambiguous"):
                found[name] = None
                continue
            sha, kind, size = header[0], header[1], int(header[2])
            found[name] = (sha, out[pos:pos + size]) if kind in ("commit", "blob") and (
                (kind == "blob") == (":" in name)) else None
            pos += size + 1
        return found

    def _restore_protected(self, path: Path, protected: Mapping[str, bytes]) -> None:
        """Each of :data:`PROTECTED_PATHS` in the working tree := the default branch's
        file (``protected``, read by :meth:`prepare`), or nothing. A symlinked parent
        directory is replaced by a real one, so no write lands outside the checkout."""
        for relative in PROTECTED_PATHS:
            target = path / relative
            parent = target.parent
            if parent != path and (
                    parent.is_symlink() or (parent.exists() and not parent.is_dir())):
                parent.unlink()
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir():
                shutil.rmtree(target)
            if relative in protected:
                parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(protected[relative])

    def read_default(self, checkout: Checkout, path: str) -> str | None:
        """The text of ``path`` on the default branch as last fetched (never the work
        item's branch, which the agent writes), or ``None`` when absent or not UTF-8."""
        if not _readable(path):
            return None
        if path in checkout.defaults:
            data = checkout.defaults[path]
            try:
                return None if data is None else data.decode("utf-8")
            except UnicodeDecodeError:
                return None
        # In the mirror, its configuration rewritten first: in a partial clone the
        # blob may be fetched, with the credential (the checkout is the agent's).
        mirror = self.mirror_of(checkout.repo)
        with self._locked(mirror):
            self._write_mirror_config(mirror, self.git_url(checkout.repo))
            done = self._run(checkout.repo, checkout.branch, "show",
                             ["show", f"refs/remotes/origin/{checkout.default_branch}:{path}"],
                             cwd=mirror, check=False, lazy=True)
        if done.returncode != 0:
            return None
        try:
            return done.stdout.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _rev(self, path: Path, ref: str) -> str | None:
        done = self._run("", "", "rev-parse", ["rev-parse", "--verify", "--quiet",
                                                 f"{ref}^{{commit}}"], cwd=path, check=False)
        out = done.stdout.decode().strip()
        return out if done.returncode == 0 and out else None

    def _is_ancestor(self, path: Path, older: str, newer: str) -> bool:
        done = self._run("", "", "merge-base", ["merge-base", "--is-ancestor", older, newer],
                         cwd=path, check=False)
        return done.returncode == 0

    def _git(self, repo: str, branch: str, step: str, path: Path, *args: str,
             lazy: bool = False) -> None:
        self._run(repo, branch, step, list(args), cwd=path, lazy=lazy)

    def _run(
        self,
        repo: str,
        branch: str,
        step: str,
        args: list[str],
        *,
        cwd: Path,
        network: bool = False,
        check: bool = True,
        extra_env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        lazy: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run one git command (see the module docstring for its environment).

        A network step gets the credential: a fresh token from :attr:`token` in
        :data:`TOKEN_VARIABLE` with ``GIT_ASKPASS``, or the credential helper. So does a
        ``lazy`` step (one that may read blobs: checkout, merge, ``cat-file``, ``show``)
        when ``repo``'s mirror is a partial clone, for git's lazy fetch of missing blobs;
        the caller has rewritten the configuration it reads. Without a credential a lazy
        fetch fails at once (``GIT_TERMINAL_PROMPT=0``, ``GIT_ASKPASS=/bin/false``).
        """
        if lazy and repo and not network and self._is_partial(self.mirror_of(repo)):
            network = True
        env = {**self._env, "LANG": "C.UTF-8", "GIT_TERMINAL_PROMPT": "0",
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
               "GIT_ASKPASS": "/bin/false", "SSH_ASKPASS": "/bin/false",
               **(extra_env or {})}
        config = ["-c", "credential.helper=", "-c", "core.hooksPath=/dev/null",
                  "-c", "core.fsmonitor=false", "-c", "protocol.file.allow=never"]
        secret: str | None = None
        if network:
            if self.token is not None:
                secret = self.token()
            if secret:
                env["GIT_ASKPASS"] = str(self._askpass_script())
                env[TOKEN_VARIABLE] = secret
            elif self.credential_helper:
                helper = "!" + " ".join(_sh_quote(a) for a in self.credential_helper)
                config += ["-c", f"credential.helper={helper}"]
        argv = [self.git, *config, *args]
        timeout = NETWORK_TIMEOUT if network else LOCAL_TIMEOUT
        proc = subprocess.Popen(argv, cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise WorkspaceError(
                f"workspace {repo} ({branch or '-'}): git {step} took longer than "
                f"{timeout:g} s (killed)", repo=repo, branch=branch, step=step) from None
        except OSError as exc:
            raise WorkspaceError(f"workspace {repo}: cannot run {self.git!r} ({exc})",
                                 repo=repo, branch=branch, step=step) from None
        done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        if check and done.returncode != 0:
            said = err.decode("utf-8", "replace")
            if secret:
                said = said.replace(secret, "***")
            said = " ".join(said.split())[-400:]
            raise WorkspaceError(
                f"workspace {repo} ({branch or '-'}): git {step} failed (exit "
                f"{done.returncode}): {said or 'no message'}",
                repo=repo, branch=branch, step=step)
        return done

    def _askpass_script(self) -> Path:
        """The ``GIT_ASKPASS`` script (no secret in it: it prints the variable)."""
        if not self._askpass.is_file() or self._askpass.read_text() != _ASKPASS:
            self._askpass.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _write_atomic(self._askpass, _ASKPASS, mode=0o700)
        return self._askpass


def _write_atomic(path: Path, text: str, *, mode: int = 0o644) -> None:
    """``path`` := ``text`` by a rename, so a concurrent reader sees the old file or the
    new one (a temporary name per process and thread: runners may write at once)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(mode)
    tmp.replace(path)


def _readable(path: str) -> bool:
    """Whether ``path`` may be read on the default branch (relative, inside the tree)."""
    return bool(path) and not path.startswith(("-", "/")) and ".." not in path.split("/") \
        and not any(c in path for c in "\n\r\0")


def _stamp(path: Path) -> tuple[int, int, int, int] | None:
    """``(inode, size, mtime_ns, ctime_ns)`` of ``path``, ``None`` when absent."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _loose_ref(git_dir: Path, ref: str) -> str | None:
    """The sha a loose ref file holds (gitrepository-layout ``refs/``), ``None`` when the
    file is absent or holds something else (a packed or symbolic ref: ask git)."""
    try:
        text = (git_dir / ref).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if re.fullmatch(r"[0-9a-f]{40}", text) else None


def _config_value(value: str) -> str:
    """A git config value, quoted (git-config "Syntax")."""
    if any(c in value for c in "\n\r\0"):
        raise ValueError("a git URL cannot hold a line break")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sh_quote(arg: str) -> str:
    """Quote one word of a ``!`` credential helper (git runs it with ``sh -c``)."""
    if re.fullmatch(r"[A-Za-z0-9_./:=@+-]+", arg):
        return arg
    return "'" + arg.replace("'", "'\\''") + "'"
