"""Disk per live work item: one bare mirror per repository, a worktree per work item.

A generated repository (``--files`` small files in its tree, ``--history-mb`` MB of
incompressible history in ``--commits`` commits: each adds a large random file and drops
the previous one) is served by the loopback fake GitHub (``HttpFakeGitHub`` + ``serve``,
git's smart HTTP); the runner's :class:`runner.workspace.Workspaces` prepares ``--items``
work items of it. Reported (``du``-style, allocated blocks): the mirror
(``ROOT/mirrors/OWNER/NAME.git``, shared), each work item's checkout (its worktree: the
files plus its own small git directory inside the mirror) and what a full clone per work
item (the layout before the mirror) would cost: the mirror's objects plus the checkout.

    .venv/bin/python benchmarks/disk.py [--files 20000] [--history-mb 200] [--items 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = "acme/big"
TOKEN = "ghs_disk_bench_token"


def du(path: Path) -> int:
    """Bytes allocated under ``path`` (``st_blocks`` x 512, hard links once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def generate(git_dir: Path, files: int, history_mb: int, commits: int) -> None:
    """Add the history to the seeded bare repository ``git_dir`` with ``git fast-import``
    (one commit with ``files`` files, then ``commits`` commits of random data)."""
    chunk = max(1, history_mb * 1024 * 1024 // max(1, commits))
    proc = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=git_dir,
                            stdin=subprocess.PIPE)
    assert proc.stdin is not None
    w = proc.stdin.write
    stamp = int(time.time())
    w(b"commit refs/heads/main\n")
    w(f"committer Bench <bench@example.com> {stamp} +0000\ndata 5\nfiles\n".encode())
    w(b"from refs/heads/main^0\n")
    for i in range(files):
        body = f"file {i}\n".encode() * 8
        w(f"M 100644 inline src/{i // 500:03d}/f{i:05d}.txt\ndata {len(body)}\n".encode())
        w(body + b"\n")
    for c in range(commits):
        w(b"commit refs/heads/main\n")
        w(f"committer Bench <bench@example.com> {stamp + c + 1} +0000\ndata 4\nbig\n".encode())
        if c:
            w(f"D data/big-{c - 1}.bin\n".encode())
        blob = os.urandom(chunk)
        w(f"M 100644 inline data/big-{c}.bin\ndata {len(blob)}\n".encode())
        w(blob + b"\n")
    proc.stdin.close()
    if proc.wait() != 0:
        raise SystemExit("disk bench: git fast-import failed")
    subprocess.run(["git", "repack", "-adq"], cwd=git_dir, check=True)


def measure(files: int, history_mb: int, commits: int, items: int) -> dict[str, Any]:
    from runner.workspace import Workspaces
    from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve

    scratch = Path(tempfile.mkdtemp(prefix="the-loop-disk-"))
    fake = HttpFakeGitHub(tokens=[TOKEN])
    try:
        git_dir = fake.add_git_repo(REPO, scratch / "remote", {"README.md": "# big\n"})
        generate(git_dir, files, history_mb, commits)
        url, stop = serve(fake)
        try:
            workspaces = Workspaces(scratch / "ws", git_url=lambda r: f"{url}/{r}.git",
                                    token=lambda: TOKEN, credential_helper=None,
                                    author=("the-loop[bot]", "1+the-loop[bot]@example.com"))
            seconds, checkouts = [], []
            for n in range(1, items + 1):
                t0 = time.perf_counter()
                checkouts.append(workspaces.prepare(REPO, n, f"Item {n}", "main"))
                seconds.append(time.perf_counter() - t0)
        finally:
            stop()
        mirror = du(workspaces.mirror_of(REPO))
        per_item = [du(c.path) + du(workspaces.mirror_of(REPO) / "worktrees" / c.path.name)
                    for c in checkouts]
        objects = du(workspaces.mirror_of(REPO) / "objects")
        mib = 1024 * 1024
        return {
            "settings": {"files": files, "history_mb": history_mb, "commits": commits,
                         "items": items},
            "remote_mib": round(du(git_dir) / mib, 1),
            "mirror_mib": round(mirror / mib, 1),
            "per_item_mib": round(statistics.median(per_item) / mib, 1),
            "per_item_as_clone_mib": round((statistics.median(per_item) + objects) / mib, 1),
            "total_mib": round((mirror + sum(per_item)) / mib, 1),
            "total_as_clones_mib": round((sum(per_item) + items * objects) / mib, 1),
            "prepare_s_first_item": round(seconds[0], 2),
            "prepare_s_later_items": round(statistics.median(seconds[1:]), 2)
            if len(seconds) > 1 else None,
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="Disk per live work item (mirror + worktrees).")
    p.add_argument("--files", type=int, default=20_000, help="files in the tree (20000)")
    p.add_argument("--history-mb", type=int, default=200, help="MB of history (200)")
    p.add_argument("--commits", type=int, default=20, help="commits of history (20)")
    p.add_argument("--items", type=int, default=3, help="work items prepared (3)")
    p.add_argument("--json", help="also write the result object to this file")
    args = p.parse_args(argv)
    result = measure(args.files, args.history_mb, args.commits, args.items)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=2), file=sys.stdout)
