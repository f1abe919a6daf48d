"""Work-item refs: the one parser and formatter of ``github:OWNER/REPO#N``.

A work item is an issue or a pull request; issues and pull requests of a repository
share one number space, so ``github:OWNER/REPO#N`` names either. The ref is the key of a
work item's state, event log, inbox and lock, and it is part of every effect id (see
:mod:`graph.markers`), so its characters stay within what those allow: GitHub's owner
and repository names are ASCII letters, digits, ``-``, ``_`` and ``.``.

The receiver (deriving the ref from a payload), the worker and the command line
(``--work-item``) all go through :class:`WorkItemRef`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from graph.errors import LoopError

PREFIX = "github:"
_NAME = r"[A-Za-z0-9_.-]+"
_REF = re.compile(rf"github:(?P<owner>{_NAME})/(?P<name>{_NAME})#(?P<number>[1-9][0-9]*)")
_REPOSITORY = re.compile(rf"{_NAME}/{_NAME}")


class RefError(LoopError, ValueError):
    """A work-item ref (or its parts) is malformed; the message shows the accepted form."""


@dataclass(frozen=True, slots=True, order=True)
class WorkItemRef:
    """One GitHub issue or pull request.

    Attributes:
        repository: ``OWNER/REPO`` (GitHub's ``repository.full_name``).
        number: the issue or pull request number (> 0).

    Raises:
        RefError: on construction, when ``repository`` is not ``OWNER/REPO`` of
            ``[A-Za-z0-9_.-]`` or ``number`` is not a positive int.
    """

    repository: str
    number: int

    def __post_init__(self) -> None:
        if not isinstance(self.repository, str) or not _REPOSITORY.fullmatch(self.repository):
            raise RefError(f"repository {self.repository!r} is not OWNER/REPO (letters, "
                           "digits, '-', '_', '.')")
        if isinstance(self.number, bool) or not isinstance(self.number, int) or self.number < 1:
            raise RefError(f"issue or pull request number {self.number!r} is not a "
                           "positive integer")

    @classmethod
    def parse(cls, text: str) -> WorkItemRef:
        """Parse ``github:OWNER/REPO#N``.

        Args:
            text: the ref, exactly (no surrounding spaces).

        Returns:
            The ref.

        Raises:
            RefError: ``text`` is not of that form; the message quotes it and shows the
                form, e.g. ``github:octo-org/octo-repo#12``.
        """
        match = _REF.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise RefError(f"work item ref {text!r} is malformed; use github:OWNER/REPO#N, "
                           "e.g. github:octo-org/octo-repo#12")
        return cls(f"{match['owner']}/{match['name']}", int(match["number"]))

    @classmethod
    def parse_or_none(cls, text: str | None) -> WorkItemRef | None:
        """:meth:`parse`, or ``None`` for ``None``, ``""`` or a malformed ref."""
        if not text:
            return None
        try:
            return cls.parse(text)
        except RefError:
            return None

    def format(self) -> str:
        """``github:OWNER/REPO#N`` (what :meth:`parse` reads back)."""
        return f"{PREFIX}{self.repository}#{self.number}"

    def __str__(self) -> str:
        return self.format()

    @property
    def owner(self) -> str:
        """The repository's owner (user or organization login)."""
        return self.repository.partition("/")[0]

    @property
    def name(self) -> str:
        """The repository's name without its owner."""
        return self.repository.partition("/")[2]
