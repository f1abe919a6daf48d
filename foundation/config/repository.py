"""A repository's configuration: ``.the-loop/harness-config.yaml`` (*what*: events, specs,
enrolment, policy) and ``.the-loop/collaborators.yaml`` (*who*: role -> people).

Loading and errors: :mod:`foundation.config.loader`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from foundation.config.loader import (
    COLLABORATORS,
    CURRENT_VERSION,
    HARNESS_CONFIG,
    ConfigIssue,
    as_dict,
    build,
    dotted,
    get_path,
    line_of,
    load_document,
    read_file,
)
from graph.context import DEFAULT_ENROLMENT_LABEL

DEFAULT_SPEC_DIR = "specs/{number}"
COLLABORATORS_PATH = ".the-loop/collaborators.yaml"
HARNESS_CONFIG_PATH = ".the-loop/harness-config.yaml"

NOTIFICATION_EVENTS = (
    "phase-approval-pending",
    "phase-approved",
    "changes-requested",
    "work-item-blocked",
    "work-item-done",
)


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

        The same as :func:`load_collaborators` (schema-validated; see there).

        Raises:
            ConfigFileError: naming ``source``, the key path, the line and the fix.
        """
        return load_collaborators(text, source)


def _default_events() -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType({
        "phase-approval-pending": ("approver",),
        "phase-approved": (),
        "changes-requested": (),
        "work-item-blocked": (),
        "work-item-done": (),
    })


def _default_tiers() -> Mapping[int, str]:
    return MappingProxyType({1: "human", 2: "human", 3: "human", 4: "human"})


@dataclass(frozen=True)
class JiraTicketing:
    """``ticketing.jira``: ``transitions`` maps a node id to the Jira status its issue is
    moved to on entering that node (a transition picked by its target status name)."""

    transitions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ticketing:
    """``ticketing``: ``system`` is the provider holding work items (``github``, ``jira``);
    ``jira``: what the-loop does to a work item's Jira issue."""

    system: str = "github"
    jira: JiraTicketing = field(default_factory=JiraTicketing)


@dataclass(frozen=True)
class Notifications:
    """``notifications``: ``events`` maps each of :data:`NOTIFICATION_EVENTS` to the
    collaborators roles whose people are told (an event left out of the file keeps its
    default)."""

    events: Mapping[str, tuple[str, ...]] = field(default_factory=_default_events)

    def roles(self, event: str) -> tuple[str, ...]:
        """Roles notified of ``event`` (empty for an unknown event)."""
        return self.events.get(event, ())


@dataclass(frozen=True)
class Specs:
    """``specs``: ``directory`` template; ``{number}`` is the issue or PR number."""

    directory: str = DEFAULT_SPEC_DIR


@dataclass(frozen=True)
class Enrolment:
    """``enrolment``: the label that makes an issue or PR a work item."""

    label: str = DEFAULT_ENROLMENT_LABEL


@dataclass(frozen=True)
class SecurityReview:
    """``security.review``."""

    human_sign_off_min_tier: int = 4


@dataclass(frozen=True)
class Security:
    """``security``."""

    review: SecurityReview = field(default_factory=SecurityReview)


@dataclass(frozen=True)
class Autonomy:
    """``autonomy``: ``tiers`` maps risk tier 1-4 to who may satisfy a gate, ``human`` or
    ``agent`` (a tier left out of the file keeps ``human``)."""

    tiers: Mapping[int, str] = field(default_factory=_default_tiers)


@dataclass(frozen=True)
class Risk:
    """``risk``: where a work item's risk tier comes from: a label ``<label_prefix><n>``
    (``risk:3``; the highest such label wins), else ``default`` (``None``: no tier, and a
    human decides the work item's gates)."""

    default: int | None = None
    label_prefix: str = "risk:"

    def tier(self, labels: tuple[str, ...] | list[str]) -> int | None:
        """The tier ``labels`` give (1-4), else :attr:`default`."""
        prefix = self.label_prefix.casefold()
        found = [int(rest) for label in labels
                 if label.casefold().startswith(prefix)
                 and (rest := label[len(prefix):].strip()) in ("1", "2", "3", "4")]
        return max(found) if found else self.default


@dataclass(frozen=True)
class Gates:
    """``gates``: ``dismiss_stale_approvals`` (an approving review of an older commit stops
    counting when the head's content differs); ``minimum_permission`` a decider must also
    hold on the repository (one of :data:`graph.ports.PERMISSIONS`, or ``None`` for role membership
    alone); ``allow_bots`` bot logins whose feedback may drive a gate; ``act_on_edits``
    (``actOnEdits``) lets an author's own edit of a comment made during the current gate
    visit decide it, once (default: edits never decide); ``reapprove_on_change``
    (``reapproveOnChange``) returns a work item to a gate when an artifact it approved
    changes afterwards (default true)."""

    dismiss_stale_approvals: bool = True
    minimum_permission: str | None = None
    allow_bots: tuple[str, ...] = ()
    act_on_edits: bool = False
    reapprove_on_change: bool = True


@dataclass(frozen=True)
class Merge:
    """``merge``: how the work item's pull request is merged at the ``done`` node
    (``merge-pull-request``): ``method`` is GitHub's ``merge_method`` (``squash``,
    ``merge`` or ``rebase``; "Merge a pull request"); with ``auto`` the-loop merges it
    once the review gate passed and the required checks are green, at the head commit
    the review approved; without it the work item waits at ``done`` for a person."""

    method: str = "squash"
    auto: bool = False


@dataclass(frozen=True)
class HarnessConfig:
    """``.the-loop/harness-config.yaml``, one repository's configuration (*what*)."""

    version: int = CURRENT_VERSION[HARNESS_CONFIG]
    ticketing: Ticketing = field(default_factory=Ticketing)
    notifications: Notifications = field(default_factory=Notifications)
    specs: Specs = field(default_factory=Specs)
    enrolment: Enrolment = field(default_factory=Enrolment)
    security: Security = field(default_factory=Security)
    autonomy: Autonomy = field(default_factory=Autonomy)
    risk: Risk = field(default_factory=Risk)
    gates: Gates = field(default_factory=Gates)
    merge: Merge = field(default_factory=Merge)

    def spec_dir(self, number: int) -> str:
        """The work item's spec directory, e.g. ``specs/42``."""
        return self.specs.directory.format(number=number)

    def requires_human(self, tier: int | None) -> bool:
        """Whether a gate of a work item at risk ``tier`` must be decided by a human
        (``None``, an unknown tier: yes)."""
        if tier is None:
            return True
        if tier >= self.security.review.human_sign_off_min_tier:
            return True
        return self.autonomy.tiers.get(tier, "human") != "agent"

    def human_reservation(self, tier: int | None) -> str | None:
        """Why a gate of a work item at risk ``tier`` is reserved for a person's explicit
        decision, in the-loop's words (the status comment names it), or ``None`` when it
        is not, or when the work item has no tier (the default: a human decides)."""
        if tier is None or not self.requires_human(tier):
            return None
        minimum = self.security.review.human_sign_off_min_tier
        if tier >= minimum:
            rule = f"security.review.humanSignOffMinTier is {minimum}"
        else:
            rule = f"autonomy.tiers gives tier {tier} to human"
        return (f"risk tier {tier}: this gate is reserved for a person's explicit decision "
                f"(a line command or a pull request review; {rule}); a model's reading of "
                "a comment cannot satisfy it")

    def as_dict(self) -> dict[str, Any]:
        """The file's shape with every default filled (camelCase keys, lists)."""
        return as_dict(self)



def load_harness_config(text: str | None, source: str = HARNESS_CONFIG_PATH) -> HarnessConfig:
    """Parse ``.the-loop/harness-config.yaml``'s text; ``None`` or empty gives every default.

    Raises:
        LegacyConfigError: no ``version`` key (or an older one).
        InvalidConfigError: bad YAML, an unknown key, a wrong type or value.
    """
    plain = load_document(text, source, HARNESS_CONFIG, checks=_harness_issues)
    return HarnessConfig() if plain is None else build(HarnessConfig, plain)


def load_collaborators(text: str | None, source: str = COLLABORATORS_PATH) -> Collaborators:
    """Parse ``.the-loop/collaborators.yaml``'s text; ``None`` or empty gives no roles
    (nobody is authorized). A person's ``name`` defaults to their GitHub login; a leading
    ``@`` is dropped from every address.

    Raises:
        LegacyConfigError: no ``version`` key (or an older one).
        InvalidConfigError: bad YAML, an unknown key, a wrong type or value.
    """
    plain = load_document(text, source, COLLABORATORS)
    if plain is None:
        return Collaborators()
    roles: dict[str, tuple[Person, ...]] = {}
    for role, people in (plain.get("roles") or {}).items():
        roles[role] = tuple(
            Person(
                name=str(p.get("name") or _address(p.get("github")) or f"{role}-{i}"),
                github=_address(p.get("github")),
                slack=_address(p.get("slack")),
                jira=_address(p.get("jira")),
            )
            for i, p in enumerate(people)
        )
    return Collaborators(MappingProxyType(roles))


def _address(value: Any) -> str | None:
    return None if value is None else str(value).lstrip("@")



def harness_config_from_path(path: str | os.PathLike[str]) -> HarnessConfig:
    """:func:`load_harness_config` of the file at ``path`` (absent: every default)."""
    return load_harness_config(read_file(path), str(path))


def collaborators_from_path(path: str | os.PathLike[str]) -> Collaborators:
    """:func:`load_collaborators` of the file at ``path`` (absent: no roles)."""
    return load_collaborators(read_file(path), str(path))



def _harness_issues(plain: Any, doc: Any, source: str) -> list[ConfigIssue]:
    """The harness config's checks JSON Schema cannot express (``specs.directory``)."""
    issues: list[ConfigIssue] = []
    directory = get_path(plain, ("specs", "directory"))
    if isinstance(directory, str) and directory:
        path = ("specs", "directory")
        problem = None
        try:
            rendered = directory.format(number=1)
        except (KeyError, IndexError, ValueError):
            problem = "may use only the placeholder {number}"
        else:
            parts = rendered.replace("\\", "/").split("/")
            if rendered.startswith(("/", "\\")) or ".." in parts:
                problem = "must be a path inside the repository"
            elif "{number}" not in directory:
                problem = "must contain {number} so each work item has its own directory"
        if problem:
            issues.append(ConfigIssue(source, dotted(path), line_of(doc, path), problem,
                                      f"e.g. {DEFAULT_SPEC_DIR}"))
    return issues

