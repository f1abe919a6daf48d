"""What a work item's hooks are given about its repository, read and cached per worker.

:class:`RepoContext` owns the repository-side caches of a worker process:

- the repository configuration (``.the-loop/harness-config.yaml`` and
  ``collaborators.yaml``), read from the default branch only (never from a pull request
  branch under review) and cached by the default branch's head commit;
- collaborators' GitHub permissions (``get-permission``), cached for ``config_ttl``
  seconds;
- who is who (:class:`workers.identities.Accounts`): the user id recorded for each
  login that decides, and the accounts the-loop writes as;

and builds the :class:`graph.context.HookConfig` of one delivery from them
(:meth:`RepoContext.hook_config`). Both caches are ``cachetools`` caches, bounded, behind a
lock (a hook that ran past its timeout may still be reading from its own thread).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from cachetools import LRUCache, TTLCache

from foundation.config.loader import ConfigFileError
from foundation.config.repository import (
    COLLABORATORS_PATH,
    HARNESS_CONFIG_PATH,
    Collaborators,
    HarnessConfig,
    load_harness_config,
)
from foundation.events import MONITOR_EVENT, GitHubEvent
from foundation.inbox.record import text
from foundation.links import page_url
from foundation.settings import WorkerSettings
from foundation.signing import KEYS_PATH, SigningKeyError, trusted_keys
from graph.context import HookConfig, McpTools
from graph.ports import GitHub, GitHubCommits, Integration, IntegrationError, NotFound
from graph.refs import WorkItemRef
from graph.work import AgentWork
from workers.ci import CommitKeys, RedisCI
from workers.files import GitHubFiles
from workers.identities import Accounts, IdentityKeys

log = logging.getLogger("the_loop.worker")

#: How long a default branch head recorded from a ``push`` is kept (seconds).
HEAD_TTL = 30 * 24 * 3600
#: Repositories (and collaborator logins) a worker keeps cached at most.
CACHE_SIZE = 1024

Classifier = Callable[[str, Sequence[str]], str | None]


@dataclass(frozen=True)
class RepoConfig:
    """A repository's configuration, read from its default branch.

    Attributes:
        harness: the harness config (defaults when the file is absent or broken).
        collaborators: role -> people (nobody when absent or broken: fail closed).
        harness_present: whether the repository has a (valid) harness config file.
        published_keys: key id -> public key of the review-record keys the repository
            publishes (:data:`foundation.signing.KEYS_PATH`; none when absent or broken).
    """

    harness: HarnessConfig = field(default_factory=lambda: load_harness_config(None))
    collaborators: Collaborators = field(default_factory=Collaborators)
    harness_present: bool = False
    published_keys: Mapping[str, Any] = field(default_factory=dict)

    def enrolment_label(self, settings: WorkerSettings) -> str:
        """The harness file's label, else the deployment's (``THE_LOOP_ENROLMENT_LABEL``)."""
        return self.harness.enrolment.label if self.harness_present else settings.enrolment_label

    def spec_dir(self, settings: WorkerSettings) -> str:
        """The harness file's spec directory template, else the deployment's."""
        return self.harness.specs.directory if self.harness_present else settings.spec_dir


def same_repo(repo: str, head_repo: str | None) -> bool:
    """Whether a pull request's head repository is ``repo`` itself (not a fork, nor a
    deleted one)."""
    return bool(head_repo) and str(head_repo).casefold() == repo.casefold()


def may_push(repo: str, head_repo: str | None, maintainer_can_modify: bool) -> bool:
    """Whether the-loop may commit to a pull request's head branch: it is in ``repo``
    itself, or in a fork whose owner allows maintainers' edits (GitHub's
    ``maintainer_can_modify``; the push may still be refused, and record-feedback then
    falls back to a signed comment). An unknown head repository (a deleted fork) is
    not pushed to."""
    return same_repo(repo, head_repo) or (bool(head_repo) and maintainer_can_modify)


class RepoContext:
    """Repository configuration, permissions and the HookConfig of a delivery.

    Args:
        settings: worker settings (``prefix``, ``config_ttl``, labels, bot logins).
        connection: Redis client (the default branch heads, CI results).
        integrations: providers other than GitHub (``slack``, ``jira``), shared by every
            work item; the mapping is read at each delivery, so a wrapper installed
            later (metrics) is seen.
        classifier: the optional model classifier for gate feedback.
        mcp: the harness's MCP tool calls for ``mcp-call`` (``HookConfig.mcp``), or
            ``None``.
        accounts: who is who on GitHub (``HookConfig.own`` and ``account_id``); default:
            kept in ``connection`` under ``settings``' prefix.
    """

    def __init__(
        self,
        settings: WorkerSettings,
        connection: redis.Redis,
        integrations: Mapping[str, Integration] | None = None,
        classifier: Classifier | None = None,
        mcp: McpTools | None = None,
        accounts: Accounts | None = None,
    ) -> None:
        self.settings = settings
        self.mcp = mcp
        self.redis = connection
        self.keys = CommitKeys(settings.prefix)
        self.accounts = accounts if accounts is not None else Accounts(
            connection, IdentityKeys(settings.prefix), ttl=settings.config_ttl,
            bot_logins=settings.bot_logins)
        self.integrations: Mapping[str, Integration] = (
            integrations if integrations is not None else {})
        self.classifier = classifier
        #: Unix seconds now, handed to hooks (``HookConfig.clock``); tests replace it.
        self.clock: Callable[[], float] = time.time
        ttl = max(float(settings.config_ttl), 0.001)
        # repository -> its config, trusted without a look at the head for `config_ttl`
        self._fresh: TTLCache[str, RepoConfig] = TTLCache(CACHE_SIZE, ttl)
        # (repository, head commit) -> the config read at that commit (it never changes)
        self._at_head: LRUCache[tuple[str, str], RepoConfig] = LRUCache(CACHE_SIZE)
        # (repository, login casefolded) -> GitHub permission
        self._permissions: TTLCache[tuple[str, str], str] = TTLCache(CACHE_SIZE * 4, ttl)
        self._lock = threading.Lock()

    # -- repository configuration --------------------------------------------------------

    def config(self, github: GitHub, repo: str, branch: str) -> RepoConfig:
        """``repo``'s configuration from its default branch ``branch``.

        Cached by the default branch's head commit: a push to the default branch records
        its new head in Redis (``P:head:OWNER/REPO``, :meth:`note_push`) for every
        worker; the files are read at that commit, and read again only when the head
        moves (checked once per ``config_ttl`` seconds; every ``config_ttl`` seconds at
        the branch while no push has been seen). A broken file fails closed (nobody is
        authorized) and is logged naming file, key and fix.

        Raises:
            IntegrationError: GitHub failed reading a file (not "absent").
        """
        with self._lock:
            config = self._fresh.get(repo)
        if config is not None:
            return config
        head = self.redis.get(self.keys.head(repo))
        ref = text(head) if head else branch
        with self._lock:
            config = self._at_head.get((repo, ref)) if head else None
        if config is None:
            config = self._read(github, repo, ref)
            # The people it names are known by the ids their logins have now.
            self.accounts.record(github, (p.github for people in
                                          config.collaborators.roles.values()
                                          for p in people if p.github))
        with self._lock:
            if head:
                self._at_head[(repo, ref)] = config
            self._fresh[repo] = config
        return config

    def note_push(self, repo: str, after: str) -> None:
        """The default branch of ``repo`` moved to ``after``: every worker reads the
        configuration at the new head (this one at once)."""
        self.redis.set(self.keys.head(repo), after, ex=HEAD_TTL)
        with self._lock:
            self._fresh.pop(repo, None)

    @staticmethod
    def _read(github: GitHub, repo: str, ref: str) -> RepoConfig:
        def read(path: str) -> str | None:
            try:
                return str(github.get_file(repo=repo, path=path, ref=ref)["text"])
            except NotFound:
                return None

        harness_text = read(HARNESS_CONFIG_PATH)
        try:
            harness = load_harness_config(harness_text, f"{repo}:{HARNESS_CONFIG_PATH}")
        except ConfigFileError as exc:
            log.error("%s", exc)
            harness, harness_text = load_harness_config(None), None
        try:
            collaborators = Collaborators.parse(read(COLLABORATORS_PATH),
                                                f"{repo}:{COLLABORATORS_PATH}")
        except ConfigFileError as exc:
            log.error("%s", exc)
            collaborators = Collaborators()
        try:
            keys = trusted_keys(read(KEYS_PATH), f"{repo}:{KEYS_PATH}", None)
        except SigningKeyError as exc:
            log.error("%s; no published key is trusted until it is fixed", exc)
            keys = {}
        return RepoConfig(harness, collaborators, harness_text is not None, keys)

    # -- what hooks are handed -----------------------------------------------------------

    def ci(self, repo: str) -> RedisCI:
        """CI results recorded for ``repo``'s commits."""
        return RedisCI(self.redis, self.settings.prefix, repo)

    def hook_config(self, github: GitHub, event: GitHubEvent, ref: WorkItemRef,
                    repo_config: RepoConfig, *, branch: str | None = None,
                    work: AgentWork | None = None,
                    repository: str | None = None,
                    draft_pull: int | None = None) -> HookConfig:
        """The HookConfig for work item ``ref`` on ``event``.

        The pull request head comes from the event; an issue comment on a pull request,
        or a CI event, does not carry it, so the pull request is asked for once
        (``get-pull-request``; an issue answers "not found"); neither is a push's
        (``pull_request.synchronize``) head trusted, which may be older than the
        branch's when its delivery waited behind later pushes. A pull request's head is
        remembered for commit statuses (:meth:`workers.ci.RedisCI.remember`).

        Args:
            github, event, ref, repo_config: the delivery's provider, event, work item
                and repository configuration.
            branch: the work item's branch (its agent turns push there): artifacts are
                read at its tip when the event names no pull request head.
            work: where agent turns are ordered (``HookConfig.work``), or ``None``.
            repository: the work item repository's current name (default: the event's).
            draft_pull: the draft pull request an issue work item's turns push to, or
                ``None``: its head is what an approval of the issue binds (read once for
                an issue or comment delivery, which carries none), and the pull request
                ``HookConfig.pull_number`` names.

        Raises:
            IntegrationError: GitHub failed (other than "not found").
        """
        repo = repository or str(event.repository)
        default_branch = event.default_branch or "main"
        head, head_ref = event.head_sha, event.head_ref
        # Where the head branch lives: a pull request's payload says (a fork's name, or
        # null for a deleted fork); a turn's branch and a work item's own are this one's.
        head_repo: str | None = repo if event.turn is not None or event.head_repo is None \
            else event.head_repo or None
        editable = bool(event.maintainer_can_modify)
        is_pr = event.kind == "pull_request"
        # Only the work item's own pull request makes it a draft (an issue's draft pull
        # request, where its agent turns push, is the-loop's workspace, not a review).
        draft = bool(event.draft) if event.pull_number == ref.number else False
        # A review's payload omits maintainer_can_modify: a fork's pull request is read.
        unknown_edits = (event.maintainer_can_modify is None and head_repo is not None
                         and not same_repo(repo, head_repo))
        if event.kind != "issue" and (not (head and head_ref) or unknown_edits):
            try:
                pull = github.get_pull_request(repo=repo, number=ref.number)
            except NotFound:
                pull = None  # an issue, not a pull request
            if pull is not None:
                is_pr = True
                head, head_ref = str(pull["head_sha"]), str(pull["head_ref"])
                head_repo = pull.get("head_repo")
                editable = bool(pull.get("maintainer_can_modify"))
                draft = bool(pull.get("draft"))
        elif (event.kind == "pull_request" and event.action == "synchronize"
              and event.pull_number is not None):
            # A push's delivery waits behind the work item's other deliveries, so it can
            # be processed after later pushes (the-loop's own turns and review records
            # among them): its payload's head is then an old commit, and an approval
            # check or verify-tests there would judge what is no longer the branch. The
            # pull request's current head is read (one conditional GET per push).
            try:
                pull = github.get_pull_request(repo=repo, number=event.pull_number)
            except NotFound:
                pull = None
            if pull is not None and pull.get("head_ref") == head_ref \
                    and pull.get("head_sha") and pull["head_sha"] != head:
                log.info("synchronize of %s#%s at %s is stale; reading the head %s",
                         repo, event.pull_number, str(head)[:12],
                         str(pull["head_sha"])[:12])
                head = str(pull["head_sha"])
        if not head and draft_pull is not None and event.kind == "issue":
            try:  # an issue's draft pull request: its head is what the gates see
                drafted = github.get_pull_request(repo=repo, number=draft_pull)
            except NotFound:
                drafted = None
            if drafted is not None and drafted.get("state") == "open":
                head, head_ref = str(drafted["head_sha"]), str(drafted["head_ref"])
                head_repo = drafted.get("head_repo") or repo
        if (head is None and not is_pr and branch and github is not None
                and (event.ci is not None or event.name == MONITOR_EVENT)):
            # A CI result (or a timed wait) about an issue's draft pull request: the
            # exit chain checks that pull request's current head.
            found = github.find_pull_request(repo=repo, head=branch)
            if found is not None:
                head, head_ref = str(found["head_sha"]), str(found["head_ref"])
        if not head_ref:
            head_repo = repo  # no pull request: the work item's own branch

        def resolve_ref() -> str:
            # Artifacts are read at the PR head for a pull request, else at the work
            # item's branch, else the default branch.
            return head or branch or default_branch

        ci = self.ci(repo)
        if head and is_pr:
            ci.remember(head, ref.format())
        harness = repo_config.harness
        return HookConfig(
            harness=harness.as_dict(),
            collaborators=repo_config.collaborators,
            integrations={**self.integrations, "github": cast(Integration, github)},
            files=GitHubFiles(github, repo, resolve_ref),
            enrolment_label=repo_config.enrolment_label(self.settings),
            bot_logins=self.settings.bot_logins,
            ci=ci,
            head_sha=head,
            clock=self.clock,
            head_ref=head_ref or branch,
            permissions=self.permissions(github, repo),
            trees=self.trees(github, repo),
            human_only=harness.requires_human,
            human_reason=harness.human_reservation,
            classifier=self.classifier,
            work=work,
            draft=draft,
            pull_number=draft_pull if draft_pull is not None else (
                ref.number if is_pr else None),
            mcp=self.mcp,
            page_url=page_url(self.settings.public_url, ref.format()),
            own=self.accounts.own(github),
            account_id=lambda login: self.accounts.account_id(github, login),
            signer=self.settings.signer,
            record_keys=trusted_keys(repo_config.published_keys, KEYS_PATH,
                                     self.settings.signer),
            head_repo=head_repo,
            can_push_head=may_push(repo, head_repo, editable),
            records_elsewhere=(self.comments(github, repo, ref.number)
                               if is_pr and not same_repo(repo, head_repo) else None),
        )

    def permissions(self, github: GitHub, repo: str) -> Callable[[str], str | None]:
        """login -> the person's GitHub permission on ``repo`` (``admin``, ``write``...),
        cached for ``config_ttl`` seconds; ``None`` when unreadable (fail closed: not
        authorized; not cached)."""

        def permission(login: str) -> str | None:
            key = (repo, login.casefold())
            with self._lock:
                cached = self._permissions.get(key)
            if cached is not None:
                return cached
            try:
                value = str(github.get_permission(repo=repo, login=login)["permission"])
            except IntegrationError as exc:
                log.warning("permission of a collaborator on %s unreadable (%s)", repo,
                            type(exc).__name__)
                return None
            with self._lock:
                self._permissions[key] = value
            return value

        return permission

    @staticmethod
    def comments(github: GitHub, repo: str, number: int) -> Callable[[], Sequence[str]]:
        """The bodies of the comments on pull request ``number``, read at each call (a
        record posted meanwhile is seen): where the review records of a pull request
        from a fork live."""

        def bodies() -> Sequence[str]:
            listed = github.list_comments(repo=repo, number=number)
            return [str(c.get("body") or "") for c in listed["comments"]]

        return bodies

    @staticmethod
    def trees(github: GitHub, repo: str) -> Callable[[str], str | None]:
        """commit SHA -> its tree SHA (to tell a rebase from new content); ``None`` when
        the transport cannot say."""

        def tree(sha: str) -> str | None:
            if "get-commit" not in github.operations:
                return None
            try:
                commits = cast(GitHubCommits, github)
                return str(commits.get_commit(repo=repo, sha=sha)["tree_sha"])
            except IntegrationError:
                return None

        return tree
