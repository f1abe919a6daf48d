"""A work item's branch name: one rule for the worker, the runner and the operator commands."""

from __future__ import annotations

import re
import unicodedata

#: Prefix of every work item's branch.
BRANCH_PREFIX = "the-loop/"
#: Longest slug of a branch name (characters).
SLUG_LENGTH = 40


def branch_name(number: int, title: str) -> str:
    """The work item's branch: ``the-loop/<number>-<slug>``.

    The slug is the title's ASCII words (accents dropped, NFKD), lower-cased, joined by
    ``-`` and cut at a word boundary to at most :data:`SLUG_LENGTH` characters;
    ``work-item`` when nothing is left. Always a valid git ref name
    (git-check-ref-format).

    Raises:
        ValueError: ``number`` is not a positive integer.
    """
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"work item number must be a positive integer, got {number!r}")
    ascii_title = unicodedata.normalize("NFKD", title or "").encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_title.lower())
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > SLUG_LENGTH:
            if not slug:
                slug = word[:SLUG_LENGTH]
            break
        slug = candidate
    return f"{BRANCH_PREFIX}{number}-{slug or 'work-item'}"


def task_branch(branch: str, task: str) -> str:
    """The branch a task of the work item's plan works on when its tasks run side by side
    (``maxParallel`` above 1): ``<work item branch>--<task id>``, made from the work
    item's branch and merged back into it (:mod:`runner.workspace`); deleted once the
    work item's pull request is merged."""
    return f"{branch}--{task}"
