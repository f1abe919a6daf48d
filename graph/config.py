"""The three configuration files: load, validate against their JSON Schemas, fill defaults.

=====================================  ======================  =========================
file                                   answers                 current ``version``
=====================================  ======================  =========================
``cli-config.yaml`` (deployment)       *how*: transports,      2 (1 was the layout with
path from ``$THE_LOOP_CONFIG``         credentials, routing    ``ghBinary`` per feature)
``.the-loop/harness-config.yaml``      *what*: events, specs,  1
                                       enrolment, policy
``.the-loop/collaborators.yaml``       *who*: role -> people   1
=====================================  ======================  =========================

Every loader is a pure function of ``(text, source)`` returning a frozen dataclass with
every default filled. Every problem raises :class:`graph.context.ConfigFileError` (in
practice one of its subclasses here) whose message names the file, the key path, the line
where known, and the fix:

* :class:`InvalidConfigError` — not YAML, unknown key (with the allowed keys and the
  closest one), wrong type or value. ``.issues`` lists every problem found, by line.
* :class:`LegacyConfigError` — an older ``version`` (or none), or a key removed by a
  breaking change (``ghBinary`` anywhere); names each key, its replacement and the exact
  ``the-loop upgrade PATH`` command to run (see :mod:`the_loop.upgrade`).

The schemas ship as package data in ``graph/schemas/*.schema.json`` (JSON Schema draft
2020-12, ``additionalProperties: false`` everywhere).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import os
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, get_args, get_origin, get_type_hints

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from graph.context import (
    COLLABORATORS_PATH,
    DEFAULT_ENROLMENT_LABEL,
    DEFAULT_SPEC_DIR,
    HARNESS_CONFIG_PATH,
    Collaborators,
    ConfigFileError,
    Person,
)

CLI_CONFIG = "cli-config"
HARNESS_CONFIG = "harness-config"
COLLABORATORS = "collaborators"
KINDS = (CLI_CONFIG, HARNESS_CONFIG, COLLABORATORS)
CURRENT_VERSION: Mapping[str, int] = MappingProxyType(
    {CLI_CONFIG: 2, HARNESS_CONFIG: 1, COLLABORATORS: 1}
)
CONFIG_ENV = "THE_LOOP_CONFIG"
CLI_CONFIG_NAME = "cli-config.yaml"

#: Where ``ghBinary`` lived in version 1, in the order ``the-loop upgrade`` reads them
#: (the first value wins; any other ``ghBinary`` follows, under ``poller`` first, then in
#: document order).
LEGACY_GH_BINARY_PATHS: tuple[tuple[str, ...], ...] = (
    ("webhooks", "ghWebhook", "routing", "control", "ghBinary"),
    ("webhooks", "ghWebhook", "routing", "reactions", "ghBinary"),
    ("webhooks", "ghWebhook", "routing", "announce", "ghBinary"),
)
GH_BINARY_TARGET: tuple[str, ...] = ("integrations", "github", "cli", "binary")
LEGACY_KEY = "ghBinary"

NOTIFICATION_EVENTS = (
    "phase-approval-pending",
    "phase-approved",
    "changes-requested",
    "work-item-blocked",
    "work-item-done",
)
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
PERMISSIONS = ("read", "triage", "write", "maintain", "admin")

Path_ = tuple[str | int, ...]


# -- errors ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in one file.

    Attributes:
        source: the file as named to the user (e.g. ``cli-config.yaml`` or
            ``octo/repo:.the-loop/collaborators.yaml``).
        key: dotted key path (``webhooks.ghWebhook.routing.reactions.started``, list items
            as ``roles.approver[0]``); empty for the whole file.
        line: 1-based line, when known.
        problem: what is wrong.
        fix: what to do about it.
    """

    source: str
    key: str
    line: int | None
    problem: str
    fix: str = ""

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        key = f" {self.key}:" if self.key else ""
        fix = f"; {self.fix}" if self.fix else ""
        return f"{where}:{key} {self.problem}{fix}"


class InvalidConfigError(ConfigFileError):
    """A config file is not valid YAML or does not match its schema.

    ``str()`` is one line per issue, in line order; ``issues`` holds them structured.
    """

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        self.issues = tuple(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class LegacyConfigError(ConfigFileError):
    """A config file is at an older version or carries keys a breaking change removed.

    Attributes:
        source: the file.
        found_version: its ``version`` (``None`` when it has none).
        current_version: the version this the-loop reads.
        command: the exact command that migrates it (``the-loop upgrade PATH``).
        issues: one per legacy key: its path, line, and replacement in ``fix``.
    """

    def __init__(
        self,
        source: str,
        found_version: int | None,
        current_version: int,
        issues: Sequence[ConfigIssue],
    ) -> None:
        self.source = source
        self.found_version = found_version
        self.current_version = current_version
        self.command = upgrade_command(source)
        self.issues = tuple(issues)
        if found_version is None:
            head = (f"{source} has no 'version' key; this the-loop reads version "
                    f"{current_version}")
        elif found_version < current_version:
            head = (f"{source} is version {found_version}; this the-loop reads version "
                    f"{current_version}")
        else:
            head = f"{source} still carries keys removed in version {current_version}"
        lines = [f"{head}. Run: {self.command}"]
        lines += [str(i) for i in self.issues]
        super().__init__("\n".join(lines))


def upgrade_command(source: str) -> str:
    """The command that migrates ``source``; an ``owner/repo:`` prefix (a file read from
    GitHub) is dropped, leaving the path in the checkout."""
    match = re.match(r"^[\w.-]+/[\w.-]+:(?!//)(.+)$", source)
    path = match.group(1) if match else source
    return f"the-loop upgrade {shlex.quote(path)}"


# -- the files' dataclasses ------------------------------------------------------------
#
# Field ``foo_bar`` is key ``fooBar`` in the file. A nested dataclass is a nested mapping.


@dataclass(frozen=True)
class GitHubApi:
    """``integrations.github.api``: credentials only as environment variable names."""

    token_env: tuple[str, ...] = ("GH_TOKEN", "GITHUB_TOKEN")
    base_url: str = "https://api.github.com"
    app_id_env: str = "THE_LOOP_GITHUB_APP_ID"
    private_key_env: str = "THE_LOOP_GITHUB_PRIVATE_KEY"
    private_key_path_env: str = "THE_LOOP_GITHUB_PRIVATE_KEY_PATH"


@dataclass(frozen=True)
class GitHubCli:
    """``integrations.github.cli``: the ``gh`` executable (was ``ghBinary`` in version 1)."""

    binary: str = "gh"


@dataclass(frozen=True)
class GitHubIntegration:
    """``integrations.github``: ``transport`` is ``auto`` (api when a token is set, else cli
    when the binary is on PATH, else fail naming both fixes), ``api`` or ``cli``."""

    transport: str = "auto"
    api: GitHubApi = field(default_factory=GitHubApi)
    cli: GitHubCli = field(default_factory=GitHubCli)


@dataclass(frozen=True)
class SlackIntegration:
    """``integrations.slack``: ``transport`` ``sdk`` (bot token) or ``webhook`` (URL)."""

    transport: str = "sdk"
    token_env: str = "THE_LOOP_SLACK_TOKEN"
    url_env: str = "THE_LOOP_SLACK_WEBHOOK_URL"


@dataclass(frozen=True)
class JiraApi:
    """``integrations.jira.api``; an empty ``base_url`` means Jira is not configured."""

    base_url: str = ""
    token_env: str = "THE_LOOP_JIRA_TOKEN"
    user_env: str = "THE_LOOP_JIRA_USER"


@dataclass(frozen=True)
class JiraCli:
    """``integrations.jira.cli``."""

    binary: str = "jira"


@dataclass(frozen=True)
class JiraIntegration:
    """``integrations.jira``: ``transport`` ``api`` or ``cli``."""

    transport: str = "api"
    api: JiraApi = field(default_factory=JiraApi)
    cli: JiraCli = field(default_factory=JiraCli)


@dataclass(frozen=True)
class Integrations:
    """``integrations``: each external service declared once."""

    github: GitHubIntegration = field(default_factory=GitHubIntegration)
    slack: SlackIntegration = field(default_factory=SlackIntegration)
    jira: JiraIntegration = field(default_factory=JiraIntegration)


@dataclass(frozen=True)
class ControlRouting:
    """``webhooks.ghWebhook.routing.control``: no settings; it uses ``integrations.github``."""


@dataclass(frozen=True)
class Reactions:
    """``webhooks.ghWebhook.routing.reactions``: emoji on the triggering comment (names from
    :data:`REACTIONS`)."""

    enabled: bool = True
    started: str = "eyes"
    completed: str = "hooray"
    error: str = "confused"


@dataclass(frozen=True)
class Announce:
    """``webhooks.ghWebhook.routing.announce``: comments announcing phase changes."""

    enabled: bool = True


@dataclass(frozen=True)
class Routing:
    """``webhooks.ghWebhook.routing``."""

    control: ControlRouting = field(default_factory=ControlRouting)
    reactions: Reactions = field(default_factory=Reactions)
    announce: Announce = field(default_factory=Announce)


@dataclass(frozen=True)
class GhWebhook:
    """``webhooks.ghWebhook``."""

    routing: Routing = field(default_factory=Routing)


@dataclass(frozen=True)
class Webhooks:
    """``webhooks``."""

    gh_webhook: GhWebhook = field(default_factory=GhWebhook)


@dataclass(frozen=True)
class QueueSettings:
    """``queue``: the RQ queue (``name`` is ``THE_LOOP_QUEUE``'s setting)."""

    name: str = "the-loop"
    default_timeout: int = 300


@dataclass(frozen=True)
class StateSettings:
    """``state``: ``prefix`` (``THE_LOOP_REDIS_PREFIX``), ``lock_timeout``
    (``THE_LOOP_LOCK_TIMEOUT``), ``config_ttl`` (``THE_LOOP_CONFIG_TTL``), in seconds."""

    prefix: str = "the-loop"
    lock_timeout: int = 300
    config_ttl: int = 300


@dataclass(frozen=True)
class ClassifierEndpoint:
    """``classification.endpoint``: an OpenAI-compatible chat completions API."""

    base_url: str = ""
    model: str = ""
    token_env: str = "THE_LOOP_CLASSIFIER_TOKEN"


@dataclass(frozen=True)
class Classification:
    """``classification``: the optional model classifier (a harness ``command`` or an
    ``endpoint``), with ``timeout`` seconds per attempt and ``retries``."""

    command: tuple[str, ...] = ()
    endpoint: ClassifierEndpoint = field(default_factory=ClassifierEndpoint)
    timeout: int = 30
    retries: int = 2


@dataclass(frozen=True)
class CliConfig:
    """``cli-config.yaml``, the deployment's configuration (*how*)."""

    version: int = CURRENT_VERSION[CLI_CONFIG]
    integrations: Integrations = field(default_factory=Integrations)
    webhooks: Webhooks = field(default_factory=Webhooks)
    queue: QueueSettings = field(default_factory=QueueSettings)
    state: StateSettings = field(default_factory=StateSettings)
    classification: Classification = field(default_factory=Classification)

    @property
    def routing(self) -> Routing:
        """Shortcut for ``webhooks.gh_webhook.routing``."""
        return self.webhooks.gh_webhook.routing

    def as_dict(self) -> dict[str, Any]:
        """The file's shape with every default filled (camelCase keys, lists)."""
        return as_dict(self)


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
class Ticketing:
    """``ticketing``: ``system`` is the provider holding work items (``github``, ``jira``)."""

    system: str = "github"


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
class Gates:
    """``gates``: ``dismiss_stale_approvals`` (an approving review of an older commit stops
    counting when the head's content differs); ``minimum_permission`` a decider must also
    hold on the repository (one of :data:`PERMISSIONS`, or ``None`` for role membership
    alone); ``allow_bots`` bot logins whose feedback may drive a gate."""

    dismiss_stale_approvals: bool = True
    minimum_permission: str | None = None
    allow_bots: tuple[str, ...] = ()


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
    gates: Gates = field(default_factory=Gates)

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

    def as_dict(self) -> dict[str, Any]:
        """The file's shape with every default filled (camelCase keys, lists)."""
        return as_dict(self)


# -- loaders ---------------------------------------------------------------------------


def load_cli_config(text: str | None, source: str = CLI_CONFIG_NAME) -> CliConfig:
    """Parse ``cli-config.yaml``'s text; ``None`` (no file) or an empty file gives every
    default.

    Raises:
        LegacyConfigError: version 1 (or no version), or a ``ghBinary`` key anywhere.
        InvalidConfigError: bad YAML, an unknown key, a wrong type or value.
    """
    plain = _load(text, source, CLI_CONFIG)
    return CliConfig() if plain is None else _build(CliConfig, plain)


def load_harness_config(text: str | None, source: str = HARNESS_CONFIG_PATH) -> HarnessConfig:
    """Parse ``.the-loop/harness-config.yaml``'s text; ``None`` or empty gives every default.

    Raises:
        LegacyConfigError: no ``version`` key (or an older one).
        InvalidConfigError: bad YAML, an unknown key, a wrong type or value.
    """
    plain = _load(text, source, HARNESS_CONFIG)
    return HarnessConfig() if plain is None else _build(HarnessConfig, plain)


def load_collaborators(text: str | None, source: str = COLLABORATORS_PATH) -> Collaborators:
    """Parse ``.the-loop/collaborators.yaml``'s text; ``None`` or empty gives no roles
    (nobody is authorized). A person's ``name`` defaults to their GitHub login; a leading
    ``@`` is dropped from every address.

    Raises:
        LegacyConfigError: no ``version`` key (or an older one).
        InvalidConfigError: bad YAML, an unknown key, a wrong type or value.
    """
    plain = _load(text, source, COLLABORATORS)
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


def load_config(
    kind: str, text: str | None, source: str
) -> CliConfig | HarnessConfig | Collaborators:
    """Dispatch on ``kind`` (one of :data:`KINDS`)."""
    if kind == CLI_CONFIG:
        return load_cli_config(text, source)
    if kind == HARNESS_CONFIG:
        return load_harness_config(text, source)
    if kind == COLLABORATORS:
        return load_collaborators(text, source)
    raise ValueError(f"unknown config kind {kind!r}; expected one of {', '.join(KINDS)}")


def _read(path: str | os.PathLike[str]) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfigError(
            [ConfigIssue(str(path), "", None, f"cannot be read ({type(exc).__name__})",
                         "check the path and its permissions; the file must be UTF-8")]
        ) from None


def cli_config_from_path(path: str | os.PathLike[str]) -> CliConfig:
    """:func:`load_cli_config` of the file at ``path`` (absent: every default)."""
    return load_cli_config(_read(path), str(path))


def harness_config_from_path(path: str | os.PathLike[str]) -> HarnessConfig:
    """:func:`load_harness_config` of the file at ``path`` (absent: every default)."""
    return load_harness_config(_read(path), str(path))


def collaborators_from_path(path: str | os.PathLike[str]) -> Collaborators:
    """:func:`load_collaborators` of the file at ``path`` (absent: no roles)."""
    return load_collaborators(_read(path), str(path))


def cli_config_from_env(env: Mapping[str, str] | None = None) -> CliConfig:
    """The deployment's config: the file named by ``$THE_LOOP_CONFIG``; every default when
    the variable is unset or empty.

    Raises:
        InvalidConfigError: also when ``$THE_LOOP_CONFIG`` names a file that does not exist
            (a configured file that silently turned into defaults would hide a mistake).
        LegacyConfigError: as :func:`load_cli_config`.
    """
    env = os.environ if env is None else env
    path = env.get(CONFIG_ENV)
    if not path:
        return CliConfig()
    text = _read(path)
    if text is None:
        raise InvalidConfigError([ConfigIssue(
            path, "", None, f"does not exist (named by ${CONFIG_ENV})",
            f"create it, fix ${CONFIG_ENV}, or unset ${CONFIG_ENV} to use the defaults")])
    return load_cli_config(text, path)


def kind_for_path(path: str | os.PathLike[str]) -> str:
    """The config kind of a file by its name: ``harness-config.yaml`` and
    ``collaborators.yaml`` (``.yml`` too) are the per-repository files; any other name is a
    ``cli-config.yaml``."""
    name = Path(path).name.lower()
    stem = name.rsplit(".", 1)[0] if name.endswith((".yaml", ".yml")) else name
    if stem == HARNESS_CONFIG:
        return HARNESS_CONFIG
    if stem == COLLABORATORS:
        return COLLABORATORS
    return CLI_CONFIG


# -- YAML with line numbers ------------------------------------------------------------


def yaml_round_trip() -> YAML:
    """The round-trip YAML 1.2 parser/emitter used by the loaders and ``the-loop upgrade``
    (keeps comments, key order and line numbers; duplicate keys are errors)."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def parse_yaml(text: str, source: str) -> Any:
    """Parse ``text`` round-trip (``CommentedMap``/``CommentedSeq`` with ``.lc`` lines).

    Raises:
        InvalidConfigError: naming the line and the YAML problem.
    """
    try:
        return yaml_round_trip().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = (exc.problem or exc.context or "syntax error").strip()
        if "duplicate key" in str(exc.problem or ""):
            first = exc.context_mark
            fix = "keep one of the two keys" + (
                f" (the other is at line {first.line + 1})" if first is not None else "")
        else:
            col = f", column {mark.column + 1}" if mark is not None else ""
            fix = f"fix the YAML syntax near line {line}{col}"
        raise InvalidConfigError(
            [ConfigIssue(source, "", line, f"not valid YAML: {problem}", fix)]) from None
    except YAMLError as exc:
        raise InvalidConfigError(
            [ConfigIssue(source, "", None, f"not valid YAML ({type(exc).__name__})",
                         "fix the YAML syntax")]) from None


def dotted(path: Sequence[str | int]) -> str:
    """``("roles", "approver", 0, "github")`` -> ``roles.approver[0].github``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def line_of(doc: Any, path: Sequence[str | int]) -> int | None:
    """1-based line of the key (or list item) at ``path`` in a round-trip document; the
    deepest line found when the path runs out."""
    node = doc
    line: int | None = None
    for part in path:
        if isinstance(node, CommentedMap):
            key = _find_key(node, part)
            if key is _MISSING:
                break
            with contextlib.suppress(KeyError, TypeError, AttributeError):
                line = node.lc.key(key)[0] + 1
            node = node[key]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
            with contextlib.suppress(KeyError, TypeError, AttributeError):
                line = node.lc.item(part)[0] + 1
            node = node[part]
        else:
            break
    return line


_MISSING: Any = object()


def _find_key(node: Mapping[Any, Any], part: str | int) -> Any:
    if part in node:
        return part
    for key in node:
        if str(key) == str(part):
            return key
    return _MISSING


def _plain(node: Any) -> Any:
    """A round-trip document as plain JSON-like Python (keys as strings)."""
    if isinstance(node, Mapping):
        return {k if isinstance(k, str) else str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


# -- legacy keys -----------------------------------------------------------------------


@dataclass(frozen=True)
class LegacyKey:
    """A key a breaking change removed: where it is, its value, its replacement."""

    path: Path_
    value: Any
    line: int | None
    replacement: tuple[str, ...] = GH_BINARY_TARGET

    @property
    def key(self) -> str:
        return dotted(self.path)


def find_legacy_keys(doc: Any) -> list[LegacyKey]:
    """Every ``ghBinary`` in a cli-config document, in the stated order: ``routing.control``,
    ``routing.reactions``, ``routing.announce``, then any under ``poller``, then any other,
    each group in document order."""
    found: list[Path_] = []
    if not isinstance(doc, Mapping):
        return []
    for path in LEGACY_GH_BINARY_PATHS:
        if _get(doc, path) is not _MISSING:
            found.append(path)
    rest = [p for p in _walk_keys(doc, ()) if p[-1] == LEGACY_KEY and p not in found]
    found += [p for p in rest if p[0] == "poller"]
    found += [p for p in rest if p[0] != "poller"]
    return [LegacyKey(p, _plain(_get(doc, p)), line_of(doc, p)) for p in found]


def _walk_keys(node: Any, prefix: Path_) -> Iterator[Path_]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            path = (*prefix, key if isinstance(key, str | int) else str(key))
            yield path
            yield from _walk_keys(value, path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk_keys(value, (*prefix, i))


def _get(doc: Any, path: Sequence[str | int]) -> Any:
    node = doc
    for part in path:
        if isinstance(node, Mapping):
            key = _find_key(node, part)
            if key is _MISSING:
                return _MISSING
            node = node[key]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return _MISSING
    return node


# -- validation ------------------------------------------------------------------------


@functools.cache
def schema(kind: str) -> Mapping[str, Any]:
    """The JSON Schema of ``kind`` (from ``graph/schemas/<kind>.schema.json``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown config kind {kind!r}")
    text = resources.files("graph").joinpath("schemas", f"{kind}.schema.json").read_text(
        encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@functools.cache
def _validator(kind: str) -> Draft202012Validator:
    return Draft202012Validator(schema(kind))


def _load(text: str | None, source: str, kind: str) -> dict[str, Any] | None:
    """Parse, check the version and legacy keys, validate; ``None`` for no content."""
    if text is None:
        return None
    doc = parse_yaml(text, source)
    if doc is None or (isinstance(doc, CommentedMap) and not doc):  # empty, or "{}"
        return None
    if not isinstance(doc, CommentedMap):
        raise InvalidConfigError([ConfigIssue(
            source, "", 1, "the top level must be a mapping of keys",
            f"start the file with 'version: {CURRENT_VERSION[kind]}'")])
    current = CURRENT_VERSION[kind]
    version = doc.get("version")
    version_line = line_of(doc, ("version",))
    if "version" in doc and (isinstance(version, bool) or not isinstance(version, int)):
        raise InvalidConfigError([ConfigIssue(
            source, "version", version_line, "must be a whole number",
            f"write 'version: {current}' (or run {upgrade_command(source)})")])
    if isinstance(version, int) and version > current:
        raise InvalidConfigError([ConfigIssue(
            source, "version", version_line,
            f"version {version} is newer than this the-loop reads ({current})",
            "upgrade the-loop, or use a file of version "
            f"{current}")])
    if isinstance(version, int) and version < 1:
        raise InvalidConfigError([ConfigIssue(
            source, "version", version_line, f"there is no version {version}",
            f"write 'version: {current}'")])
    legacy = find_legacy_keys(doc) if kind == CLI_CONFIG else []
    if version is None or version < current or legacy:
        issues = [ConfigIssue(source, lk.key, lk.line,
                              f"removed in version {current}; replaced by "
                              f"{dotted(lk.replacement)}") for lk in legacy]
        raise LegacyConfigError(source, version, current, issues)
    plain = _plain(doc)
    issues = [issue for err in _validator(kind).iter_errors(plain)
              for issue in _issues(err, doc, source, schema(kind))]
    issues += _semantic_issues(kind, plain, doc, source)
    if issues:
        issues.sort(key=lambda i: (i.line or 10**9, i.key))
        raise InvalidConfigError(issues)
    assert isinstance(plain, dict)
    return plain


_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _type_word(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _normal(word: str) -> str:
    return re.sub(r"[-_\s]", "", word).casefold()


def closest(word: str, choices: Sequence[str]) -> str | None:
    """The choice closest to ``word`` (difflib; case, ``-`` and ``_`` ignored), if any."""
    normal = {_normal(c): c for c in choices}
    if _normal(word) in normal:
        return normal[_normal(word)]
    match = difflib.get_close_matches(_normal(word), list(normal), n=1, cutoff=0.6)
    return normal[match[0]] if match else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _issues(
    err: ValidationError, doc: Any, source: str, root: Mapping[str, Any]
) -> list[ConfigIssue]:
    path: list[str | int] = list(err.absolute_path)
    key = dotted(path)
    line = line_of(doc, path)
    hint = str(err.schema.get("x-hint", "")) if isinstance(err.schema, Mapping) else ""
    kind = err.validator
    if kind == "additionalProperties" and isinstance(err.instance, Mapping):
        allowed = sorted(err.schema.get("properties", {}))
        out = []
        for extra in err.instance:
            if extra in allowed:
                continue
            where = [*path, extra]
            elsewhere = _paths_named(extra, root)
            near = closest(extra, allowed) if allowed else None
            if elsewhere and not (near and _normal(near) == _normal(extra)):
                fix = f"it belongs at {' or '.join(elsewhere)}"
            elif not allowed:
                fix = "remove it: this section takes no keys"
            else:
                listed = ", ".join(allowed)
                fix = (f"did you mean '{near}'? (allowed here: {listed})" if near
                       else f"allowed here: {listed}")
            out.append(ConfigIssue(source, dotted(where), line_of(doc, where),
                                   "unknown key", fix))
        return out
    if kind == "type":
        expected = err.validator_value
        words = [expected] if isinstance(expected, str) else list(expected)
        want = " or ".join(_TYPE_WORDS.get(w, w) for w in words)
        if err.instance is None and "object" in words:
            fix = "write {} for an empty section, or remove the key"
        else:
            fix = hint or f"change the value to {want}"
        return [ConfigIssue(source, key, line, f"must be {want}, not {_type_word(err.instance)}",
                            fix)]
    if kind == "enum":
        options = [o for o in err.validator_value]
        shown = ", ".join("null" if o is None else str(o) for o in options)
        fix = hint
        if isinstance(err.instance, str):
            near = closest(err.instance, [o for o in options if isinstance(o, str)])
            if near:
                fix = f"did you mean '{near}'?" + (f" ({hint})" if hint else "")
        if isinstance(err.instance, int) and not isinstance(err.instance, bool) \
                and f"{err.instance:+d}" in options:
            fix = f"quote it: \"{err.instance:+d}\" (unquoted, YAML reads a number)"
        return [ConfigIssue(source, key, line,
                            f"must be one of {shown}, not {_short(err.instance)}",
                            fix or f"use one of {shown}")]
    if kind == "pattern":
        # Never echo the value: a misplaced secret must not reach a log.
        return [ConfigIssue(source, key, line, "has a value of the wrong form",
                            hint or f"match the pattern {err.validator_value}")]
    if kind in ("minimum", "maximum"):
        word = "at least" if kind == "minimum" else "at most"
        return [ConfigIssue(source, key, line, f"must be {word} {err.validator_value}",
                            hint or f"use a value of {word} {err.validator_value}")]
    if kind == "minLength":
        return [ConfigIssue(source, key, line, "must not be empty", hint or "give a value")]
    if kind == "maxLength":
        return [ConfigIssue(source, key, line,
                            f"must be at most {err.validator_value} characters",
                            hint or "shorten it")]
    if kind == "minItems":
        return [ConfigIssue(source, key, line, "must not be an empty list",
                            hint or "list at least one value")]
    if kind == "uniqueItems":
        return [ConfigIssue(source, key, line, "lists a value twice", "remove the duplicate")]
    if kind == "const":
        return [ConfigIssue(source, key, line, f"must be {err.validator_value}",
                            f"write {err.validator_value}")]
    if kind == "required" and isinstance(err.instance, Mapping):
        missing = [r for r in err.validator_value if r not in err.instance]
        where = [*path, missing[0]] if missing else path
        return [ConfigIssue(source, dotted(where), line, "is missing", "add it")]
    if kind == "propertyNames":
        return [ConfigIssue(source, key, line, "has an empty key", "name every key")]
    return [ConfigIssue(source, key, line, f"is invalid ({kind})", hint or "fix the value")]


def _paths_named(name: str, root: Mapping[str, Any]) -> list[str]:
    """Dotted paths of every property called ``name`` (case, ``-``, ``_`` ignored)."""
    found: list[str] = []

    def walk(node: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        for key, sub in (node.get("properties") or {}).items():
            here = (*prefix, key)
            if _normal(key) == _normal(name):
                found.append(dotted(here))
            if isinstance(sub, Mapping):
                walk(sub, here)

    walk(root, ())
    return found


def _semantic_issues(kind: str, plain: Any, doc: Any, source: str) -> list[ConfigIssue]:
    """Checks JSON Schema cannot express."""
    issues: list[ConfigIssue] = []
    if kind == HARNESS_CONFIG:
        directory = _get(plain, ("specs", "directory"))
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


# -- building dataclasses --------------------------------------------------------------


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _build(cls: Any, data: Mapping[str, Any]) -> Any:
    """An instance of dataclass ``cls`` from a validated mapping; absent keys keep the
    field's default, a mapping field merges per key over its default."""
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        key = _camel(f.name)
        if key not in data or data[key] is None and is_dataclass(hints[f.name]):
            continue
        value = data[key]
        hint = hints[f.name]
        if isinstance(hint, type) and is_dataclass(hint):
            kwargs[f.name] = _build(hint, value)
        elif get_origin(hint) is tuple:
            kwargs[f.name] = (value,) if isinstance(value, str) else tuple(value)
        elif get_origin(hint) is Mapping:
            key_type, value_type = get_args(hint)
            default = f.default_factory() if callable(f.default_factory) else {}
            merged = dict(default)
            for k, v in value.items():
                merged[key_type(k)] = tuple(v) if get_origin(value_type) is tuple else v
            kwargs[f.name] = MappingProxyType(merged)
        else:
            kwargs[f.name] = value
    return cls(**kwargs)


def as_dict(obj: Any) -> Any:
    """A config dataclass as the file's shape (camelCase keys, lists, string keys)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {_camel(f.name): as_dict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): as_dict(v) for k, v in obj.items()}
    if isinstance(obj, tuple | list):
        return [as_dict(v) for v in obj]
    return obj


__all__ = [
    "CLI_CONFIG",
    "CLI_CONFIG_NAME",
    "COLLABORATORS",
    "CONFIG_ENV",
    "CURRENT_VERSION",
    "GH_BINARY_TARGET",
    "HARNESS_CONFIG",
    "KINDS",
    "LEGACY_GH_BINARY_PATHS",
    "NOTIFICATION_EVENTS",
    "PERMISSIONS",
    "REACTIONS",
    "Announce",
    "Autonomy",
    "CliConfig",
    "ConfigFileError",
    "ConfigIssue",
    "ControlRouting",
    "Enrolment",
    "Gates",
    "GhWebhook",
    "GitHubApi",
    "GitHubCli",
    "GitHubIntegration",
    "HarnessConfig",
    "Integrations",
    "InvalidConfigError",
    "JiraApi",
    "JiraCli",
    "JiraIntegration",
    "LegacyConfigError",
    "LegacyKey",
    "Notifications",
    "QueueSettings",
    "Reactions",
    "Routing",
    "Security",
    "SecurityReview",
    "SlackIntegration",
    "Specs",
    "StateSettings",
    "Ticketing",
    "Webhooks",
    "as_dict",
    "cli_config_from_env",
    "cli_config_from_path",
    "closest",
    "collaborators_from_path",
    "dotted",
    "find_legacy_keys",
    "harness_config_from_path",
    "kind_for_path",
    "line_of",
    "load_cli_config",
    "load_collaborators",
    "load_config",
    "load_harness_config",
    "parse_yaml",
    "schema",
    "upgrade_command",
    "yaml_round_trip",
]
