"""The fake GitHub's git: real ``git`` on bare repositories, for the repositories that a
bare git repository backs (:meth:`the_loop.sandbox.fakegithub.state.FakeGitHub.add_git_repo`).

Every command runs with an argument list (no shell), a minimal environment
(:func:`git_env`: no user or system configuration, no prompts) and :data:`GIT_TIMEOUT`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["GIT", "GIT_TIMEOUT", "FakeGitError", "MergeConflict", "blob_sha", "commit_files",
           "git_env", "merge_into", "run_git", "seed_git_repo"]


def blob_sha(text: str | bytes) -> str:
    """Git's blob sha of ``text`` (what GitHub reports as a file's ``sha``)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()



#: Seconds one git command of the fake may take.
GIT_TIMEOUT = 30.0
#: The git executable (found once on the PATH of this process).
GIT = shutil.which("git") or "git"


class FakeGitError(RuntimeError):
    """A git command of the fake failed (its repository is broken or the ref is bad).

    A test double's error: it stays out of the-loop's exception tree
    (:mod:`graph.errors`), which holds only what the product raises.
    """


class MergeConflict(FakeGitError):
    """The head does not merge cleanly into the base (``git merge-tree`` found a
    conflict); ``paths`` are the conflicting files."""

    def __init__(self, message: str, paths: list[str]) -> None:
        super().__init__(message)
        self.paths = paths


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


def _merged_tree(git_dir: Path, ours: str, theirs: str) -> str:
    """The tree of merging commit ``theirs`` into ``ours`` (``git merge-tree
    --write-tree``, git 2.38 or later), written to the object store.

    Raises:
        MergeConflict: the merge conflicts.
    """
    done = run_git(git_dir, "merge-tree", "--write-tree", "--name-only", "--no-messages",
                   "--allow-unrelated-histories", ours, theirs, check=False)
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    if done.returncode == 1:
        raise MergeConflict(f"merge of {theirs[:12]} into {ours[:12]} conflicts",
                            [p for p in lines[1:] if p])
    if done.returncode != 0 or not lines:
        raise FakeGitError(f"git merge-tree in {git_dir} failed: "
                           + done.stderr.decode("utf-8", "replace").strip()[-500:])
    return lines[0].strip()


def _picked_tree(git_dir: Path, onto: str, commit: str) -> str:
    """The tree of ``commit``'s change (against its first parent) applied onto commit
    ``onto`` (``git apply --cached`` in a scratch index), written to the object store.

    Raises:
        MergeConflict: the change does not apply.
    """
    patch = run_git(git_dir, "diff-tree", "-p", "--binary", "--full-index", "--root",
                    "--no-commit-id", commit).stdout
    with tempfile.TemporaryDirectory(prefix="fake-git-pick-") as tmp:
        env = git_env(GIT_INDEX_FILE=str(Path(tmp) / "index"))
        run_git(git_dir, "read-tree", onto, env=env)
        if patch:
            applied = run_git(git_dir, "apply", "--cached", "--allow-empty", stdin=patch,
                              env=env, check=False)
            if applied.returncode != 0:
                raise MergeConflict(f"{commit[:12]} does not apply onto {onto[:12]}", [])
        return run_git(git_dir, "write-tree", env=env).stdout.decode().strip()


def merge_into(git_dir: Path, base: str, head: str, method: str, *, message: str,
               committer: tuple[str, str]) -> str:
    """Merge commit ``head`` into branch ``base`` of bare ``git_dir`` as GitHub's merge
    button does ("About merge methods on GitHub"): ``merge`` makes a merge commit with
    both parents, ``squash`` one commit with ``head``'s tree changes on ``base``,
    ``rebase`` replays each non-merge commit of ``base..head`` onto ``base`` (keeping
    its author and message). The branch moves only if it did not meanwhile.

    Returns:
        the commit now at the tip of ``base``.

    Raises:
        MergeConflict: ``head`` does not merge cleanly.
        FakeGitError: git failed (a bad ref).
    """
    ref = f"refs/heads/{base}"
    old = run_git(git_dir, "rev-parse", "--verify", f"{ref}^{{commit}}").stdout.decode().strip()
    who = {"GIT_COMMITTER_NAME": committer[0], "GIT_COMMITTER_EMAIL": committer[1]}
    as_committer = git_env(GIT_AUTHOR_NAME=committer[0], GIT_AUTHOR_EMAIL=committer[1], **who)
    if method in ("merge", "squash"):
        tree = _merged_tree(git_dir, old, head)
        parents = ["-p", old, "-p", head] if method == "merge" else ["-p", old]
        tip = run_git(git_dir, "commit-tree", tree, *parents, stdin=message.encode("utf-8"),
                      env=as_committer).stdout.decode().strip()
    elif method == "rebase":
        tip = old
        listed = run_git(git_dir, "rev-list", "--reverse", "--no-merges", f"{old}..{head}")
        for commit in listed.stdout.decode().split():
            tree = _picked_tree(git_dir, tip, commit)
            shown = run_git(git_dir, "show", "-s", "--format=%an%n%ae%n%aI%n%B",
                            commit).stdout.decode("utf-8", "replace").split("\n", 3)
            name, email, date, body = (shown + [""] * 4)[:4]
            env = git_env(GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email,
                          GIT_AUTHOR_DATE=date, **who)
            tip = run_git(git_dir, "commit-tree", tree, "-p", tip,
                          stdin=body.encode("utf-8"), env=env).stdout.decode().strip()
    else:
        raise FakeGitError(f"merge method {method!r} is not merge, squash or rebase")
    run_git(git_dir, "update-ref", ref, tip, old)
    return tip
