"""``is-docs-only``: a named-outcome hook (specification, "Edges": a condition is a hook
that returns an outcome, never an expression)."""

from __future__ import annotations

from fnmatch import fnmatch

from graph.model import HookContext, HookResult
from graph.registry import hook

DEFAULT_DOCS = ("*.md", "*.markdown", "*.rst", "*.txt", "docs/*", "doc/*", "specs/*", "LICENSE*")


def is_docs_path(path: str, patterns: tuple[str, ...] = DEFAULT_DOCS) -> bool:
    """Whether ``path`` matches one of the documentation ``patterns`` (fnmatch, where
    ``*`` also crosses ``/``)."""
    return any(fnmatch(path, p) for p in patterns)


@hook("is-docs-only", requires={"github": {"list-pull-files"}}, outcomes={"docs-only"},
      boundaries={"exit"}, params={"patterns"}, forward=("docs-only",))
def is_docs_only(ctx: HookContext) -> HookResult:
    """Pass with ``outcome: docs-only`` when every file the pull request changes is
    documentation (``with: {patterns: [...]}`` overrides the globs), else a plain pass.
    A work item that is not a pull request, or has no GitHub repository, is a plain pass.
    """
    github = ctx.config.github
    item = ctx.work_item
    if (github is None or item.repository is None or item.id is None
            or item.kind != "pull_request"):
        return HookResult.passed("is-docs-only", docs_only=False)
    patterns = tuple(ctx.params.get("patterns") or DEFAULT_DOCS)
    files = github.list_pull_files(repo=item.repository, number=item.id)["files"]
    if files and all(is_docs_path(f, patterns) for f in files):
        return HookResult.passed("is-docs-only", outcome="docs-only", docs_only=True,
                                 files=len(files))
    return HookResult.passed("is-docs-only", docs_only=False, files=len(files))
