"""Read repository files through the GitHub transport (a :class:`graph.context.FileReader`)."""

from __future__ import annotations

from collections.abc import Callable

from graph.ports import GitHubContents, NotFound


class GitHubFiles:
    """Files of ``repo`` at a revision resolved on first use.

    Args:
        github: a provider of the contents port (``get-file``).
        repo: ``OWNER/NAME``.
        resolve_ref: returns the revision to read (a SHA or branch); called at most once,
            so a pull request's head is only looked up when a file is actually read.
    """

    def __init__(self, github: GitHubContents, repo: str,
                 resolve_ref: Callable[[], str]) -> None:
        self.github = github
        self.repo = repo
        self._resolve = resolve_ref
        self._ref: str | None = None
        self._cache: dict[str, str | None] = {}

    @property
    def revision(self) -> str:
        if self._ref is None:
            self._ref = self._resolve()
        return self._ref

    def at(self, revision: str) -> GitHubFiles:
        """The same repository's files at ``revision`` (a commit SHA or branch): after a
        hook committed to the pull request branch, the rest of the delivery reads there."""
        return GitHubFiles(self.github, self.repo, lambda: revision)

    def read_text(self, path: str) -> str | None:
        if path not in self._cache:
            try:
                got = self.github.get_file(repo=self.repo, path=path, ref=self.revision)
                self._cache[path] = got["text"]
            except NotFound:
                self._cache[path] = None
        return self._cache[path]
