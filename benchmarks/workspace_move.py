"""Workspace preparation when a work item's turn moves to another runner node: full clone
against partial clone (``--filter=blob:none``) against a shared object cache.

The repository of :mod:`benchmarks.disk` (``--files`` small files, ``--history-mb`` MB of
incompressible history in ``--commits`` commits, only the last big file in the tip tree)
is served by the loopback fake GitHub over git's smart HTTP (``git http-backend``, which
serves filters as GitHub.com does: ``uploadpack.allowFilter``). Each node prepares the
runner's layout -- a bare mirror of the repository and a worktree of the work item's
branch -- in a directory of its own:

- ``first``: node A's first turn of the work item (nothing on its disk);
- ``moved``: the next turn taken by node B (a fresh runner directory: its holder died),
  on the branch node A pushed one commit to.

Modes: ``full`` (``git clone --bare``: every object of the history), ``partial``
(``git clone --bare --filter=blob:none``: commits and trees, and only the blobs the
checkout needs, fetched lazily by ``git worktree add``), ``cache`` (node B borrows the
objects of a mirror on shared storage with ``--reference``, git's alternates, and fetches
only what it lacks). Reported per mode and step: seconds and MiB on the node's disk
(allocated blocks, :func:`benchmarks.disk.du`). ``runner-full`` and ``runner-partial``
do the same through the runner's own code, :class:`runner.workspace.Workspaces` with
``partial_clone`` off and on (its fetch, ``cat-file`` read of the protected files, and
worktree; node A's turn is its ``commit_and_push``), with the installation token.

    .venv/bin/python benchmarks/workspace_move.py [--files 20000] [--history-mb 200]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.disk import REPO, TOKEN, du, generate  # noqa: E402

MIB = 1024 * 1024
BRANCH = "the-loop/1-item"


def _git(*args: str, cwd: Path | None = None) -> None:
    done = subprocess.run(["git", "-c", "advice.detachedHead=false", *args], cwd=cwd,
                          capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {args[0]} failed: {done.stderr.decode(errors='replace')}"
                         f"{done.stdout.decode(errors='replace')}"[-800:])


def prepare(node: Path, url: str, branch: str, mode: str, cache: Path | None) -> dict[str, Any]:
    """One node's workspace of ``branch``: its mirror and a worktree. Returns seconds and
    MiB of the node's directory."""
    mirror, checkout = node / "mirror.git", node / "checkout"
    t0 = time.perf_counter()
    args = ["clone", "--quiet", "--bare"]
    if mode == "partial":
        args.append("--filter=blob:none")
    if mode == "cache" and cache is not None:
        args += ["--reference", str(cache)]
    _git(*args, url, str(mirror))
    _git("worktree", "add", "--quiet", str(checkout), branch, cwd=mirror)
    seconds = time.perf_counter() - t0
    return {"seconds": round(seconds, 2), "disk_mib": round(du(node) / MIB, 1),
            "objects_mib": round(du(mirror / "objects") / MIB, 1)}


def push_a_turn(node: Path, url: str, mode: str) -> None:
    """Node A's turn: one commit on the work item's branch, pushed."""
    checkout = node / "checkout"
    (checkout / "specs").mkdir(exist_ok=True)
    (checkout / "specs" / f"requirements-{mode}.md").write_text("# requirements\n")
    _git("add", "-A", cwd=checkout)
    _git("-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m",
         "turn 1", cwd=checkout)
    _git("push", "--quiet", url, f"HEAD:refs/heads/{BRANCH}", cwd=checkout)


def runner_turns(scratch: Path, base: str, partial: bool) -> dict[str, Any]:
    """Node A's first turn and node B's moved turn through :class:`Workspaces`."""
    from runner.workspace import Workspaces

    def node(name: str) -> Workspaces:
        return Workspaces(scratch / name, git_url=lambda r: f"{base}/{r}.git",
                          token=lambda: TOKEN, credential_helper=None,
                          author=("the-loop[bot]", "1+the-loop[bot]@example.com"),
                          partial_clone=partial)

    def timed(workspaces: Workspaces, root: Path) -> tuple[Any, dict[str, Any]]:
        t0 = time.perf_counter()
        checkout = workspaces.prepare(REPO, 1, "item", "main",
                                      read=[".the-loop/collaborators.yaml"])
        seconds = time.perf_counter() - t0
        objects = workspaces.mirror_of(REPO) / "objects"
        return checkout, {"seconds": round(seconds, 2), "disk_mib": round(du(root) / MIB, 1),
                          "objects_mib": round(du(objects) / MIB, 1)}

    a, b = node("node-a"), node("node-b")
    checkout, first = timed(a, scratch / "node-a")
    (checkout.path / "specs").mkdir(exist_ok=True)
    (checkout.path / "specs" / "requirements.md").write_text("# requirements\n")
    a.commit_and_push(checkout, "turn 1")
    _, moved = timed(b, scratch / "node-b")
    return {"first": first, "moved": moved}


def measure(files: int, history_mb: int, commits: int) -> dict[str, Any]:
    from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve

    scratch = Path(tempfile.mkdtemp(prefix="the-loop-move-"))
    fake = HttpFakeGitHub(tokens=[TOKEN])
    try:
        git_dir = fake.add_git_repo(REPO, scratch / "remote", {"README.md": "# big\n"})
        generate(git_dir, files, history_mb, commits)
        subprocess.run(["git", "--git-dir", str(git_dir), "branch", BRANCH, "main"],
                       check=True)
        base, stop = serve(fake)
        url = base.replace("http://", f"http://x-access-token:{TOKEN}@") + f"/{REPO}.git"
        result: dict[str, Any] = {
            "settings": {"files": files, "history_mb": history_mb, "commits": commits},
            "remote_mib": round(du(git_dir) / MIB, 1)}
        try:
            # The shared object cache: a full mirror on "shared storage", made once.
            cache = scratch / "cache.git"
            _git("clone", "--quiet", "--bare", url, str(cache))
            for mode in ("full", "partial", "cache"):
                a, b = scratch / mode / "node-a", scratch / mode / "node-b"
                a.mkdir(parents=True)
                b.mkdir(parents=True)
                first = prepare(a, url, BRANCH, "full" if mode == "cache" else mode, None)
                push_a_turn(a, url, mode)
                moved = prepare(b, url, BRANCH, mode, cache)
                result[mode] = {"first": first, "moved": moved}
                shutil.rmtree(scratch / mode, ignore_errors=True)
            for partial in (False, True):
                mode = "runner-partial" if partial else "runner-full"
                result[mode] = runner_turns(scratch / mode, base, partial)
                shutil.rmtree(scratch / mode, ignore_errors=True)
        finally:
            stop()
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="Workspace preparation on another node.")
    p.add_argument("--files", type=int, default=20_000, help="files in the tree (20000)")
    p.add_argument("--history-mb", type=int, default=200, help="MB of history (200)")
    p.add_argument("--commits", type=int, default=20, help="commits of history (20)")
    p.add_argument("--json", help="also write the result object to this file")
    args = p.parse_args(argv)
    result = measure(args.files, args.history_mb, args.commits)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=2), file=sys.stdout)
