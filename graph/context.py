"""What the runtime hands hooks besides the work item: configuration and handles.

Everything here is data or a handle; no secret value is ever stored in a HookConfig
(specification, "Security design": HookContext carries handles, not values).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from graph.markers import OwnAccounts
from graph.ports import GitHub, Integration, Jira, Slack
from graph.signing import Signer
from graph.work import AgentWork

DEFAULT_ENROLMENT_LABEL = "the-loop"
#: Prefix of the label that shows a work item's phase (``phase:design``): written by the
#: ``set-phase-label`` hook, watched by the worker for drift.
PHASE_PREFIX = "phase:"
#: A hook's ``data`` key saying it committed to the pull request branch: the new head
#: commit, which the rest of the delivery evaluates (and puts its check run on).
HEAD_MOVED = "head_sha_after"


class FileReader(Protocol):
    """Reads repository files at the revision the work item is evaluated against."""

    def read_text(self, path: str) -> str | None:
        """Return the UTF-8 text of ``path`` (repository-relative), or ``None`` if absent."""
        ...

    @property
    def revision(self) -> str:
        """A human-readable name of the revision read (branch, SHA, or ``"working tree"``)."""
        ...


class RevisionFiles(Protocol):
    """Optional for a :class:`FileReader`: the same repository's files at another
    revision (a pull request head a hook just committed to; see :data:`HEAD_MOVED`)."""

    def at(self, revision: str) -> FileReader:
        """A reader of the same repository at ``revision`` (a commit SHA or branch)."""
        ...


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

    def run_id(self, sha: str, name: str) -> int | None:
        """The id of the check run that reported ``name``'s stored result on ``sha``
        (for a GitHub Actions job, its job's id too), or ``None`` (a commit status, a
        check suite, a workflow run, or nothing recorded)."""
        ...

    def first_wait(self, sha: str, name: str, now: float) -> float:
        """When the-loop first waited for ``name``'s result on ``sha`` (Unix seconds):
        the first call notes ``now``, later ones return what it noted."""
        ...


class NoCI:
    """A :class:`CIResults` with nothing recorded (local use, ``the-loop check``)."""

    def conclusions(self, sha: str) -> Mapping[str, str]:
        return {}

    def run_id(self, sha: str, name: str) -> int | None:
        return None

    def first_wait(self, sha: str, name: str, now: float) -> float:
        return now


class Member(Protocol):
    """One person holding a role: their addresses on each provider (``None`` when unknown)."""

    @property
    def name(self) -> str: ...

    @property
    def github(self) -> str | None: ...

    @property
    def slack(self) -> str | None: ...

    @property
    def jira(self) -> str | None: ...


class Roles(Protocol):
    """Who holds which role on the repository (the repository's collaborators file)."""

    def people(self, role: str) -> Sequence[Member]:
        """People holding ``role`` (empty when the role is not declared)."""
        ...

    def is_authorized(self, login: str | None, role: str) -> bool:
        """Whether GitHub ``login`` holds ``role``."""
        ...


class NoRoles:
    """A :class:`Roles` that declares no role (nobody is authorized)."""

    def people(self, role: str) -> Sequence[Member]:
        return ()

    def is_authorized(self, login: str | None, role: str) -> bool:
        return False


class McpTools(Protocol):
    """MCP by delegation to the harness (specification: "MCP by delegation to the
    harness"): the-loop holds no MCP client; the node's harness, run headless with
    schema-constrained output, performs one named tool call and answers with its
    structured result. Implemented by :class:`integrations.harness.mcp.HarnessMcp`."""

    def call(self, server: str, tool: str, arguments: Mapping[str, Any], *,
             session: str | None = None) -> Mapping[str, Any]:
        """Perform ``tool`` of MCP server ``server`` with ``arguments``.

        Args:
            server: a server name the deployment configured (``harness.mcpConfig``).
            tool: the tool's name on that server.
            arguments: JSON data (the work item's fields the graph named).
            session: the-loop's session id of the node, for the harness's records.

        Returns:
            the tool's structured result (JSON data, bounded in size).

        Raises:
            graph.ports.IntegrationError: the harness failed, refused, or answered
                something that is not the result; ``retriable`` when trying again may help.
        """
        ...


@dataclass(frozen=True)
class HookConfig:
    """The ``config`` field of HookContext.

    Attributes:
        harness: the repository's harness config as a plain mapping (``gates``,
            ``security``, ``notifications``...; may be empty).
        collaborators: the repository's collaborators (role -> people).
        integrations: provider name (``"github"``, ``"slack"``...) -> handle; typed:
            :attr:`github`, :attr:`slack`, :attr:`jira` (the :mod:`graph.ports` ports).
        files: reads artifacts at the revision under evaluation.
        enrolment_label: the label that makes an issue or PR a work item.
        bot_logins: logins whose events are the-loop's own and never drive a gate.
        ci: CI results recorded from events, by commit.
        head_sha: the pull request head commit under evaluation, if any.
        clock: Unix seconds now, for hooks that time a wait (``verify-tests``'s
            ``timeout``); controlled in tests.
        head_ref: the pull request head branch (where record-feedback commits), if any.
        permissions: login -> the person's GitHub permission on the repository (cached by
            the caller), or ``None`` when not available.
        trees: commit SHA -> its tree SHA, or ``None`` when not available.
        classifier: the optional model classifier: (authorized text, allowed outcomes)
            -> an outcome or ``None`` (invalid output after its retries).
        human_only: risk tier -> whether gates must be decided by an explicit human
            signal (default: always).
        human_reason: risk tier -> why its gates are reserved for a human, in the-loop's
            words (named in a gate's status comment), or ``None``; ``None`` here: not
            named.
        work: where agent turns are ordered (:class:`graph.work.AgentWork`, the runner);
            ``None`` when no harness is configured: an agent node then waits for its
            artifacts to be pushed by someone, as a person would.
        draft: the work item is a pull request marked as a draft (GitHub's "About pull
            requests": a draft cannot be merged and asks nobody for review); a gate
            then waits without requesting review.
        mcp: the harness's MCP tool calls (``mcp-call``), or ``None`` when none is
            configured.
        page_url: the work item's page on the-loop's dashboard (``THE_LOOP_PUBLIC_URL``
            set), which the status comment and the ``the-loop`` check run link to;
            ``None``: no link.
        own: the accounts the-loop writes as on GitHub (login and user id): only a
            marked comment by one of them is the-loop's own
            (:func:`graph.markers.own_effect`).
        account_id: login -> the user id recorded for it (resolved from GitHub once,
            then kept), or ``None`` when no account has it; a person is then known by
            that id, and an event from another account with the same login decides
            nothing. ``None`` here: ids are not checked (a local run has none). May raise
            :class:`graph.ports.RetryLater` when GitHub cannot be asked now.
        signer: the service's review-record signing key, a handle that signs and never
            shows the key (:class:`graph.signing.Signer`), or ``None``: records are
            written unsigned, and no check counts them.
        record_keys: key id -> trusted Ed25519 public key (the ones published in
            ``.the-loop/keys/`` and the signer's own): what a recorded decision's
            signature is verified against.
        head_repo: the repository holding :attr:`head_ref` (``OWNER/NAME``; a fork's for
            a pull request from a fork), or ``None``: the work item's own.
        can_push_head: whether the-loop may commit to the pull request's head branch
            (its head repository is the base repository, or a fork that allows
            maintainers' edits): ``False`` sends review records to a signed comment.
        records_elsewhere: the texts besides the artifacts that may hold the work item's
            signed review records (the comments on a pull request from a fork, where
            record-feedback posts them when it may not push), read when called; ``None``:
            there are none.
        pull_number: the work item's pull request: its own number for a pull request, the
            draft pull request its agent turns push to for an issue; ``None``: none yet
            (what ``merge-pull-request`` merges).
    """

    harness: Mapping[str, Any] = field(default_factory=dict)
    collaborators: Roles = field(default_factory=NoRoles)
    integrations: Mapping[str, Integration] = field(default_factory=dict)
    files: FileReader = field(default_factory=NoFiles)
    enrolment_label: str = DEFAULT_ENROLMENT_LABEL
    bot_logins: frozenset[str] = frozenset()
    ci: CIResults = field(default_factory=NoCI)
    head_sha: str | None = None
    clock: Callable[[], float] = field(default=time.time, repr=False, compare=False)
    head_ref: str | None = None
    permissions: Callable[[str], str | None] | None = None
    trees: Callable[[str], str | None] | None = None
    classifier: Callable[[str, Sequence[str]], str | None] | None = None
    human_only: Callable[[int | None], bool] = field(default=lambda tier: True)
    human_reason: Callable[[int | None], str | None] | None = None
    work: AgentWork | None = field(default=None, repr=False, compare=False)
    draft: bool = False
    mcp: McpTools | None = field(default=None, repr=False, compare=False)
    page_url: str | None = None
    own: OwnAccounts = field(default_factory=OwnAccounts)
    account_id: Callable[[str], int | None] | None = None
    signer: Signer | None = field(default=None, repr=False, compare=False)
    record_keys: Mapping[str, Any] = field(default_factory=dict, repr=False)
    head_repo: str | None = None
    can_push_head: bool = True
    records_elsewhere: Callable[[], Sequence[str]] | None = field(default=None, repr=False,
                                                                 compare=False)
    pull_number: int | None = None

    @property
    def github(self) -> GitHub | None:
        """The GitHub integration as its typed port, or ``None`` when there is none."""
        return cast("GitHub | None", self.integrations.get("github"))

    @property
    def slack(self) -> Slack | None:
        """The Slack integration as its typed port, or ``None`` when there is none."""
        return cast("Slack | None", self.integrations.get("slack"))

    @property
    def jira(self) -> Jira | None:
        """The Jira integration as its typed port, or ``None`` when there is none."""
        return cast("Jira | None", self.integrations.get("jira"))
