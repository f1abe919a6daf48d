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

__all__ = ["GIT", "GIT_TIMEOUT", "FakeGitError", "blob_sha", "commit_files", "git_env",
           "run_git", "seed_git_repo"]


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
