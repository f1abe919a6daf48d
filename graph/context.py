"""What the runtime hands hooks besides the work item: configuration and handles.

Everything here is data or a handle; no secret value is ever stored in a HookConfig
(specification, "Security design": HookContext carries handles, not values).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from graph.ports import Integration

DEFAULT_SPEC_DIR = "specs/{number}"
DEFAULT_ENROLMENT_LABEL = "the-loop"
COLLABORATORS_PATH = ".the-loop/collaborators.yaml"
HARNESS_CONFIG_PATH = ".the-loop/harness-config.yaml"


class FileReader(Protocol):
    """Reads repository files at the revision the work item is evaluated against."""

    def read_text(self, path: str) -> str | None:
        """Return the UTF-8 text of ``path`` (repository-relative), or ``None`` if absent."""
        ...

    @property
    def revision(self) -> str:
        """A human-readable name of the revision read (branch, SHA, or ``"working tree"``)."""
        ...


class LocalFiles:
    """A :class:`FileReader` over a local checkout."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    @property
    def revision(self) -> str:
        return "working tree"

    def read_text(self, path: str) -> str | None:
        target = (self.root / path).resolve()
        # Never read outside the checkout, whatever the graph or config says.
        if self.root != target and self.root not in target.parents:
            return None
        try:
            return target.read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None


class NoFiles:
    """A :class:`FileReader` for when no revision can be read (every file is absent)."""

    revision = "none"

    def read_text(self, path: str) -> str | None:
        return None


class CIResults(Protocol):
    """CI results recorded for commits (check runs, check suites, workflow runs, commit
    statuses, as GitHub reported them in events)."""

    def conclusions(self, sha: str) -> Mapping[str, str]:
        """Check name -> conclusion (``success``, ``failure``, ``pending``...) for ``sha``."""
        ...


class NoCI:
    """A :class:`CIResults` with nothing recorded (local use, ``the-loop check``)."""

    def conclusions(self, sha: str) -> Mapping[str, str]:
        return {}


class ConfigFileError(ValueError):
    """A per-repository config file is malformed; the message names the file and key."""


@dataclass(frozen=True)
class Person:
    """One collaborator's addresses: GitHub login, Slack user id, Jira account id."""

    name: str
    github: str | None = None
    slack: str | None = None
    jira: str | None = None


@dataclass(frozen=True)
class Collaborators:
    """``.the-loop/collaborators.yaml``: role -> people -> addresses.

    File shape::

        version: 1
        roles:
          approver:
            - {name: Alice, github: alice, slack: U012AB3CD}
    """

    roles: Mapping[str, tuple[Person, ...]] = field(default_factory=dict)

    def people(self, role: str) -> tuple[Person, ...]:
        """People holding ``role`` (empty when the role is not declared)."""
        return self.roles.get(role, ())

    def is_authorized(self, login: str | None, role: str) -> bool:
        """Whether GitHub ``login`` holds ``role`` (GitHub logins compare case-insensitively)."""
        if not login:
            return False
        wanted = login.casefold()
        return any(p.github and p.github.casefold() == wanted for p in self.people(role))

    @classmethod
    def parse(cls, text: str | None, source: str = COLLABORATORS_PATH) -> Collaborators:
        """Parse the file's text; ``None`` (absent file) gives no roles (nobody authorized).

        Delegates to :func:`graph.config.load_collaborators` (schema-validated; see there).

        Raises:
            ConfigFileError: naming ``source``, the key path, the line and the fix.
        """
        from graph.config import load_collaborators  # graph.config imports this module

        return load_collaborators(text, source)


@dataclass(frozen=True)
class HookConfig:
    """The ``config`` field of HookContext.

    Attributes:
        harness: the repository's harness config (parsed mapping; may be empty).
        collaborators: the repository's collaborators (role -> people).
        integrations: provider name (``"github"``, ``"slack"``...) -> handle.
        files: reads artifacts at the revision under evaluation.
        enrolment_label: the label that makes an issue or PR a work item.
        bot_logins: logins whose events are the-loop's own and never drive a gate.
        ci: CI results recorded from events, by commit.
        head_sha: the pull request head commit under evaluation, if any.
        head_ref: the pull request head branch (where record-feedback commits), if any.
        policy: the harness config as a plain mapping (``gates``, ``security``...).
        permissions: login -> the person's GitHub permission on the repository (cached by
            the caller), or ``None`` when not available.
        trees: commit SHA -> its tree SHA, or ``None`` when not available.
        classifier: the optional model classifier: (authorized text, allowed outcomes)
            -> an outcome or ``None`` (invalid output after its retries).
        human_only: risk tier -> whether gates must be decided by an explicit human
            signal (default: always).
    """

    harness: Mapping[str, Any] = field(default_factory=dict)
    collaborators: Collaborators = field(default_factory=Collaborators)
    integrations: Mapping[str, Integration] = field(default_factory=dict)
    files: FileReader = field(default_factory=NoFiles)
    enrolment_label: str = DEFAULT_ENROLMENT_LABEL
    bot_logins: frozenset[str] = frozenset()
    ci: CIResults = field(default_factory=NoCI)
    head_sha: str | None = None
    head_ref: str | None = None
    policy: Mapping[str, Any] = field(default_factory=dict)
    permissions: Callable[[str], str | None] | None = None
    trees: Callable[[str], str | None] | None = None
    classifier: Callable[[str, Sequence[str]], str | None] | None = None
    human_only: Callable[[int | None], bool] = field(default=lambda tier: True)
