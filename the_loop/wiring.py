"""The composition root: the one place that builds the-loop's clients and services.

Every process reads :class:`~foundation.settings.Settings` once and hands them here:

* :func:`build_receiver` -- the webhook receiver's Flask app (``the_loop.wsgi``).
* :func:`build_worker` -- the worker's :class:`~workers.drain.DeliveryProcessor`
  (``the-loop worker``), whose collaborators :func:`build_processor` makes, each once.
* :func:`build_operator` -- what the commands need (``the-loop graph force``,
  ``redeliver``, ``deliveries``): Redis, the state store, the graph and the same GitHub
  client as the worker.

The GitHub client is built one way for all of them (:func:`github_provider`): the
transport and credentials of ``cli-config.yaml``'s ``integrations`` block (the
environment winning), a GitHub Enterprise Server base URL, and the write throttle shared
through Redis. The worker's providers are checked against what the graph's hooks need
(the capability check) and wrapped with the metrics wrappers when they are built.
"""

from __future__ import annotations

import logging
import shutil
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import redis

from foundation.redis import CLI, SERVICE, Profile, connect
from foundation.settings import Settings, SettingsError

if TYPE_CHECKING:
    from flask import Flask

    from foundation.settings import WorkerSettings
    from foundation.turns import TurnRecords
    from foundation.webhook_schema import PayloadSchemas
    from graph.context import HookConfig, McpTools
    from graph.model import Graph
    from graph.ports import GitHub, Integration
    from graph.runtime import Runtime
    from integrations.github import GitHubAppApi
    from integrations.github_cache import ConditionalCache
    from integrations.providers import GitHubProvider
    from integrations.throttle import WriteThrottle
    from runner.service import TurnRunner
    from workers.drain import DeliveryProcessor
    from workers.reconcile import Reconciler
    from workers.repo_context import Classifier
    from workers.routes import GitHubFactory
    from workers.state import RedisStateStore

__all__ = [
    "OPTIONAL_INTEGRATIONS",
    "WORKER_OPERATIONS",
    "NoGitHubClient",
    "Operator",
    "build_operator",
    "build_processor",
    "build_providers",
    "build_receiver",
    "build_worker",
    "github_app",
    "github_provider",
    "reconciler",
    "required_operations",
]

log = logging.getLogger("the_loop.wiring")

#: Operations the worker itself calls outside any hook, on every work item: the
#: repository config and artifacts (get-file), a pull request's head (get-pull-request),
#: the status and notice comments (list-comments, comment, update-comment) and who may
#: decide (get-permission). (Reactions, ``add-reaction``, are best effort: a transport
#: without it only loses them, with a warning at start-up.)
WORKER_OPERATIONS: dict[str, frozenset[str]] = {
    "github": frozenset(
        {"get-file", "get-pull-request", "list-comments", "comment", "update-comment",
         "get-permission", "get-user"}
    ),
}

#: Integrations a deployment may leave unconfigured (the hooks using them then skip).
OPTIONAL_INTEGRATIONS = frozenset({"slack", "jira"})

Which = Callable[[str], "str | None"]


class NoGitHubClient(SettingsError):
    """No GitHub client can be built from the settings; the message says why and what
    to set (never a secret)."""


def required_operations(graph: Graph) -> dict[str, frozenset[str]]:
    """Integration -> operations this worker needs: the graph's hooks' plus its own."""
    needed = {k: set(v) for k, v in graph.required_operations().items()}
    for integration, ops in WORKER_OPERATIONS.items():
        needed.setdefault(integration, set()).update(ops)
    return {k: frozenset(v) for k, v in sorted(needed.items())}


def _which(settings: Settings) -> Which:
    """``shutil.which`` over the settings' ``PATH`` (this process's when it has none)."""
    path = settings.environ.get("PATH")
    return lambda name: shutil.which(name, path=path)


def write_throttle(settings: Settings, connection: redis.Redis) -> WriteThrottle:
    """GitHub writes spaced per installation across every worker and command (and
    requests slowed before the primary rate limit runs out)."""
    from integrations.throttle import WriteThrottle

    return WriteThrottle(connection, settings.worker.prefix,
                         per_minute=settings.limits.per_minute,
                         per_hour=settings.limits.per_hour)


def request_cache(settings: Settings, connection: redis.Redis) -> ConditionalCache:
    """GitHub's ``GET`` answers with their ETags, shared by every worker and command."""
    from integrations.github_cache import ConditionalCache

    return ConditionalCache(connection, settings.worker.prefix)


def github_provider(
    settings: Settings, *, throttle: WriteThrottle | None = None,
    cache: ConditionalCache | None = None, which: Which | None = None
) -> GitHubProvider | None:
    """The configured GitHub transport (installation id -> integration), or ``None``
    when the settings say ``transport: none``.

    Raises:
        NoGitHubClient: no transport can be built (``auto`` with nothing available, an
            explicit transport whose binary or credentials are missing); the message is
            the reason and the fix.
    """
    from integrations.github import GitHubConfigError
    from integrations.providers import GitHubCliSettings, ProviderConfigError
    from integrations.providers import github_provider as build

    github = settings.require_github()
    if github.transport == "none":
        return None
    cli = GitHubCliSettings(binary=github.cli_binary, host=github.cli_host,
                            timeout=float(max(github.timeout * 2, 30)),
                            retries=github.retries)
    try:
        return build(github.transport, github, cli, throttle=throttle, cache=cache,
                     env=settings.child_env(), which=which or _which(settings))
    except (ProviderConfigError, GitHubConfigError) as exc:
        raise NoGitHubClient(str(exc)) from None


def github_app(settings: Settings) -> GitHubAppApi:
    """The client acting as the GitHub App itself (its webhook delivery log), built from
    the same GitHub settings as the worker's client (integrations block, GitHub
    Enterprise Server base URL, retries and pacing).

    Raises:
        NoGitHubClient: the settings hold no App credentials (a personal token cannot
            act as the App); the message names the variables to set.
    """
    from integrations.github import GitHubClients, GitHubConfigError

    github = settings.require_github()
    if github.mode != "app":
        raise NoGitHubClient(
            "the App's webhook delivery log needs the App's credentials: set "
            "THE_LOOP_GITHUB_APP_ID and THE_LOOP_GITHUB_PRIVATE_KEY (or "
            "THE_LOOP_GITHUB_PRIVATE_KEY_PATH), or name the variables holding them in "
            "cli-config.yaml (integrations.github.api.appIdEnv / privateKeyEnv)")
    try:
        return GitHubClients(github).for_app()
    except GitHubConfigError as exc:
        raise NoGitHubClient(str(exc)) from None


def build_providers(
    settings: Settings,
    *,
    needed: Mapping[str, Any] = {},  # noqa: B006 (read only)
    throttle: WriteThrottle | None = None,
    cache: ConditionalCache | None = None,
    which: Which | None = None,
) -> dict[str, Any]:
    """GitHub always; Slack and Jira when configured (a token, URL or transport in the
    environment or ``cli-config.yaml``). Unconfigured, they are left out and the hooks
    that use them skip; ``needed`` (integration -> operations) only names them in the
    start-up log.

    Returns:
        integration -> provider (GitHub's is a :class:`~integrations.providers.GitHubProvider`).

    Raises:
        NoGitHubClient, integrations.providers.ProviderConfigError: naming what to set.
    """
    from integrations.providers import jira_provider, slack_provider

    which = which or _which(settings)
    providers: dict[str, Any] = {}
    github = github_provider(settings, throttle=throttle, cache=cache, which=which)
    if github is not None:
        providers["github"] = github
    slack, jira = settings.slack, settings.jira
    if slack is not None and slack.configured:
        providers["slack"] = slack_provider(slack.transport or "sdk", token=slack.token,
                                            webhook_url=slack.webhook_url)
    elif "slack" in needed:
        log.warning("integration slack: not configured; the hooks that use it will skip "
                    "(set THE_LOOP_SLACK_TRANSPORT / THE_LOOP_SLACK_TOKEN / "
                    "THE_LOOP_SLACK_WEBHOOK_URL to configure it)")
    if jira is not None and jira.configured:
        providers["jira"] = jira_provider(jira.transport or "api", base_url=jira.base_url,
                                          user=jira.user, token=jira.token, auth=jira.auth,
                                          api_version=jira.api_version,
                                          fallback_version=jira.site_api_version,
                                          binary=jira.binary, env=settings.child_env(),
                                          which=which)
    elif "jira" in needed:
        log.warning("integration jira: not configured; the hooks that use it will skip "
                    "(set THE_LOOP_JIRA_TRANSPORT / THE_LOOP_JIRA_URL / THE_LOOP_JIRA_TOKEN "
                    "to configure it)")
    for integration, provider in providers.items():
        reason = getattr(provider, "reason", None) or getattr(provider, "transport", "?")
        log.info("integration %s: transport %s", integration, reason)
    return providers


def redis_client(settings: Settings, profile: Profile = SERVICE) -> redis.Redis:
    """A Redis client for ``REDIS_URL``, or for the primary the Sentinels of
    ``THE_LOOP_REDIS_SENTINELS`` name (:func:`foundation.redis.client.connect`: timeouts,
    keepalive, health checks and retries of ``profile``)."""
    return connect(settings.worker.redis_url, profile, sentinel=settings.worker.sentinel)


# ----------------------------------------------------------------------------- receiver


def build_receiver(settings: Settings, *, connection: redis.Redis | None = None) -> Flask:
    """The webhook receiver's Flask app, with the read API (``/api/v1/``) and the
    dashboard (``/ui/``) beside ``POST /webhook`` (:mod:`the_loop.web`), on the same
    Redis client; the graph they draw is loaded on their first use.

    Args:
        settings: read with ``process="receiver"`` (the webhook secret is required).
        connection: Redis client (default: :func:`webhook.app.make_redis_client`).

    Raises:
        SettingsError: no webhook secret in ``settings``.
    """
    from the_loop.web.app import register
    from webhook.app import EXTENSION_KEY, create_app

    def graph() -> Graph:
        from the_loop.graphs import load_graph  # the hooks: only when a page needs them

        return load_graph(settings.worker.graph_path)

    settings.require_secrets()
    app = create_app(settings.receiver, redis=connection,
                     multiproc_dir=settings.metrics.multiproc_dir)
    register(app, settings, app.extensions[EXTENSION_KEY].redis, graph)
    return app


# ----------------------------------------------------------------------------- worker


def build_worker(
    settings: Settings, connection: redis.Redis | None = None, *, which: Which | None = None
) -> DeliveryProcessor:
    """The worker's processor: Redis, the graph (its hook calls' tools installed here:
    :func:`the_loop.graphs.require_tools`), the providers (throttled, checked against
    every operation the graph's hooks and the worker need, observed by the worker's
    metrics) and the classifier.

    Raises:
        SettingsError (NoGitHubClient among them), graph.compile.GraphError (a
        the_loop.graphs.MissingTool among them: e.g. no Mermaid parser for
        ``lint-artifacts``' diagram checks), integrations.harness.base.HarnessError (a
        graph using mcp-call without a usable harness on this worker),
        integrations.providers.ProviderConfigError,
        integrations.capabilities.CapabilityError: at start-up, naming what to fix.
    """
    from integrations.capabilities import check_capabilities, hooks_needing
    from integrations.classifier import build_classifier
    from integrations.harness.mcp import check_mcp
    from integrations.metrics import ObservedFactory, ObservedIntegration
    from the_loop.graphs import load_graph, require_tools

    worker = settings.worker
    if worker.signer is None:
        log.warning("no review-record signing key (THE_LOOP_SIGNING_KEY_FILE): gate "
                    "decisions are recorded unsigned and no check counts them; make one "
                    "with `the-loop keys generate --out FILE`")
    classifier = build_classifier(settings.classifier.config, settings.classifier.token)
    conn = connection or redis_client(settings)
    graph = load_graph(worker.graph_path)
    require_tools(graph)  # the worker runs every hook: what they need, named now
    # mcp-call runs the harness here, in the worker: checked now, failing closed.
    mcp = check_mcp(settings.harness, graph, settings.environ, settings.runner.home_dir)
    schemas = payload_schemas(settings)
    if settings.require_github().transport == "none":
        # An explicit choice (never a fallback): acknowledge deliveries, advance nothing.
        log.warning("THE_LOOP_GITHUB_TRANSPORT=none: no GitHub transport; deliveries are "
                    "acknowledged and every labelled work item's delivery fails, naming "
                    "the variables to set")
        return build_processor(worker, conn, graph, None, classifier=classifier, mcp=mcp,
                               schemas=schemas)
    needed = required_operations(graph)
    providers = build_providers(settings, needed=needed,
                                throttle=write_throttle(settings, conn),
                                cache=request_cache(settings, conn), which=which)
    # Slack and Jira are opt-in: unconfigured, their hooks skip (notify without Slack).
    check_capabilities(needed, providers, hooks=hooks_needing(graph),
                       optional=OPTIONAL_INTEGRATIONS)
    github = providers.pop("github")
    if dict(worker.reactions).get("enabled") and "add-reaction" not in github.operations:
        log.warning("reactions are enabled but the GitHub transport %s cannot add them",
                    github.transport)
    observed = {name: ObservedIntegration(p, name=name) for name, p in providers.items()}
    # The observed client answers the GitHub port as the one it wraps.
    factory = cast("GitHubFactory", ObservedFactory(github, name="github"))
    processor = build_processor(worker, conn, graph, factory, integrations=observed,
                                classifier=classifier, turns=turn_records(settings, conn),
                                max_turns=settings.harness.max_turns,
                                cost_cap_usd=settings.harness.cost_cap_usd, mcp=mcp,
                                schemas=schemas)
    processor.reconciler = reconciler(settings, conn)
    return processor


def reconciler(settings: Settings, connection: redis.Redis) -> Reconciler | None:
    """The worker's reconciler of missed deliveries (:mod:`workers.reconcile`): GitHub
    as the App (:func:`github_app`), the receiver's dedupe markers, every
    ``THE_LOOP_RECONCILE_INTERVAL``; ``None`` without the App's credentials (a personal
    token cannot read the App's delivery log), said once in the log."""
    from foundation.inbox.enqueue import DeliveryQueue
    from integrations.hook_deliveries import AppHookDeliveries
    from workers.reconcile import ReconcileKeys, Reconciler

    worker = settings.worker
    try:
        app = github_app(settings)
    except NoGitHubClient:
        log.info("no App credentials: missed deliveries are not recovered on their own "
                 "(the reconciler needs the App's delivery log); `the-loop redeliver` "
                 "cannot run either")
        return None
    queue = DeliveryQueue(connection, queue_name=worker.queue, prefix=worker.prefix)
    return Reconciler(connection, ReconcileKeys(worker.prefix), AppHookDeliveries(app),
                      queue.seen, interval=worker.reconcile_interval)


def payload_schemas(settings: Settings) -> PayloadSchemas:
    """The schemas the worker checks payloads against: github.com's, or none on GitHub
    Enterprise Server (``THE_LOOP_GITHUB_API_URL`` other than ``https://api.github.com``),
    whose older payload shapes the vendored schemas do not describe."""
    from foundation.settings import DEFAULT_API_URL
    from foundation.webhook_schema import PayloadSchemas

    return PayloadSchemas(enterprise=settings.require_github().api_url != DEFAULT_API_URL)


def turn_records(settings: Settings, connection: redis.Redis) -> TurnRecords | None:
    """The runner's turn records, or ``None`` when no harness is configured
    (``harness.adapter: none``: agent nodes wait for a person's push)."""
    from foundation.turns import TurnKeys, TurnRecords

    if settings.harness.adapter == "none":
        return None
    return TurnRecords(connection, TurnKeys(settings.worker.prefix), settings.runner.queue,
                       job_timeout=int(settings.harness.turn_timeout) + 3600)


def build_processor(
    settings: WorkerSettings,
    connection: redis.Redis,
    graph: Graph,
    github: GitHubFactory | None,
    *,
    integrations: Mapping[str, Integration] | None = None,
    classifier: Classifier | None = None,
    turns: TurnRecords | None = None,
    max_turns: int = 5,
    cost_cap_usd: float | None = None,
    mcp: McpTools | None = None,
    schemas: PayloadSchemas | None = None,
) -> DeliveryProcessor:
    """The worker's processor from parts already made: every collaborator (the state
    store, the runtime, the repository context, the notices, the inboxes, retries and
    parking, the fan-out queue and the handlers' :class:`~workers.routes.Agent`) is
    built here, once.

    Args:
        settings: the worker's settings.
        connection: the Redis client (the RQ connection).
        graph: the compiled graph.
        github: installation id -> GitHub provider; ``None`` without credentials
            (enrolled work items then fail, naming the variables to set).
        integrations: providers other than GitHub (``slack``, ``jira``).
        classifier: the optional model classifier for gate feedback.
        turns: the runner's turn records (agent nodes' work is ordered as harness
            turns), or ``None`` (no harness).
        max_turns, cost_cap_usd: ``harness.maxTurns`` and ``harness.costCapUsd``.
        mcp: the harness's MCP tool calls for ``mcp-call`` hooks, or ``None``.
        schemas: the payload schemas (default: github.com's, :func:`payload_schemas`).

    No I/O happens here.
    """
    from functools import partial

    from foundation.inbox.dead import Deliveries
    from foundation.inbox.drain import Inboxes
    from foundation.inbox.enqueue import DeliveryQueue
    from graph.runtime import Runtime
    from workers.drain import DeliveryProcessor, fan_out, forward
    from workers.identities import Accounts, IdentityKeys, Installations, Repositories
    from workers.notices import Notices
    from workers.repo_context import RepoContext
    from workers.router import ROUTES
    from workers.routes import Agent
    from workers.state import RedisStateStore

    store = RedisStateStore(connection, settings.prefix, retention=settings.retention)
    keys = IdentityKeys(settings.prefix)
    inboxes = Inboxes(connection, settings, routed=ROUTES)
    queue = DeliveryQueue(connection, queue_name=settings.queue, prefix=settings.prefix)
    accounts = Accounts(connection, keys, ttl=settings.config_ttl,
                        bot_logins=settings.bot_logins)
    agent = Agent(settings, graph, store, Runtime(graph, store),
                  RepoContext(settings, connection, dict(integrations or {}), classifier,
                              mcp=mcp, accounts=accounts),
                  Notices(store, own=accounts.own), github, partial(fan_out, queue), turns=turns,
                  max_turns=max_turns, cost_cap_usd=cost_cap_usd,
                  repositories=Repositories(connection, keys),
                  installations=Installations(connection, keys),
                  forward=partial(forward, queue))
    return DeliveryProcessor(settings, connection, agent, inboxes,
                             Deliveries(connection, settings, store, inboxes), schemas)


# ----------------------------------------------------------------------------- runner


def git_url(settings: Settings) -> Callable[[str], str]:
    """``OWNER/REPO`` -> its clone URL: ``runner.gitUrl`` (``{repo}`` replaced), else
    derived from the GitHub API URL as GitHub lays hosts out: ``https://api.github.com``
    -> ``https://github.com/OWNER/REPO.git``; Enterprise Server ``https://HOST/api/v3``
    -> ``https://HOST/OWNER/REPO.git`` ("About remote repositories", GitHub docs)."""
    template = settings.runner.git_url
    if not template:
        api = settings.require_github().api_url.rstrip("/")
        parts = urllib.parse.urlsplit(api)
        host = parts.netloc.removeprefix("api.") if parts.netloc.startswith("api.") \
            else parts.netloc
        path = parts.path.removesuffix("/api/v3")
        template = f"{parts.scheme}://{host}{path}/{{repo}}.git"
    return lambda repo: template.replace("{repo}", repo)


def build_runner(settings: Settings, connection: redis.Redis | None = None) -> TurnRunner:
    """``the-loop runner``'s :class:`~runner.service.TurnRunner`: the harness (probed and
    its version pinned, failing closed), the workspaces, the GitHub client that opens
    draft pull requests, the turn records and the inbox reports go to.

    Raises:
        SettingsError: ``harness.adapter`` is ``none`` (nothing to run).
        integrations.harness.base.HarnessError: the harness is missing or its version is
            not the pinned one (the message names the fix).
        graph.compile.GraphError, integrations.providers.ProviderConfigError,
        integrations.capabilities.CapabilityError: at start-up, naming what to fix.
    """
    from foundation.inbox.enqueue import DeliveryQueue
    from integrations.capabilities import check_capabilities
    from integrations.harness.factory import build_harness, check_harness
    from runner.service import TurnRunner
    from runner.workspace import Workspaces
    from the_loop.graphs import load_graph

    harness = build_harness(settings.harness, settings.runner.mode)
    if harness is None:
        raise SettingsError(
            "harness.adapter is none: the runner has no harness to run; set "
            "harness.adapter (cli-config.yaml) or THE_LOOP_HARNESS to claude-code, codex "
            "or command")
    check_harness(settings.harness, load_graph(settings.worker.graph_path))
    conn = connection or redis_client(settings)
    records = turn_records(settings, conn)
    assert records is not None
    github_settings = settings.require_github()
    factory: Callable[[int | None], GitHub] | None = None
    token: Callable[[int | None], str | None] | None = None
    if github_settings.token:
        token = lambda installation: github_settings.token  # noqa: E731
    helper: list[str] | None = None
    if github_settings.transport != "none":
        needed = {"github": frozenset({"create-pull-request", "find-pull-request"})}
        providers = build_providers(settings, needed=needed,
                                    throttle=write_throttle(settings, conn),
                                    cache=request_cache(settings, conn))
        check_capabilities(needed, providers, hooks={}, optional=OPTIONAL_INTEGRATIONS)
        github = providers["github"]
        factory = cast("Callable[[int | None], GitHub]", github)
        if github.transport == "cli":
            helper = [github_settings.cli_binary or "gh", "auth", "git-credential"]
        elif github.clients is not None:
            token = github.clients.installation_token
    inbox = DeliveryQueue(conn, queue_name=settings.worker.queue, prefix=settings.worker.prefix)
    clone_url = git_url(settings)

    def workspaces(installation: int | None) -> Workspaces:
        password = (lambda: token(installation)) if token is not None else None
        return Workspaces(Path(settings.runner.workspace_dir), git_url=clone_url,
                          token=password, credential_helper=helper, author=BOT_AUTHOR,
                          env=settings.environ,
                          partial_clone=settings.runner.partial_clone)

    return TurnRunner(records, inbox, harness, settings.harness, settings.runner,
                      workspaces, factory, dict(settings.environ))


#: Who the runner's commits are by: the App's bot, as GitHub names it.
BOT_AUTHOR = ("the-loop[bot]", "the-loop[bot]@users.noreply.github.com")


# ----------------------------------------------------------------------------- commands


@dataclass
class Operator:
    """What the commands work with: the service's Redis state and the worker's GitHub
    client.

    Attributes:
        settings: the settings read once by the command.
        redis: Redis client (:data:`foundation.redis.client.CLI`: a command should not hang).
        store: the service's state store.
        github: the GitHub provider, or ``None`` when none can be built (then
            :attr:`github_error` says why).
        github_error: why no GitHub client could be built, or ``None``.
    """

    settings: Settings
    redis: redis.Redis
    store: RedisStateStore
    github: GitHubProvider | None = None
    github_error: str | None = None
    _graphs: dict[str | None, Graph] = field(default_factory=dict, repr=False)

    def graph(self, path: str | None = None) -> Graph:
        """The compiled graph (``path``, else ``THE_LOOP_GRAPH``, else the shipped one).

        Raises:
            graph.compile.GraphError: the graph does not compile.
        """
        from the_loop.graphs import load_graph

        key = path or self.settings.worker.graph_path
        if key not in self._graphs:
            self._graphs[key] = load_graph(key)
        return self._graphs[key]

    def runtime(self, graph_path: str | None = None) -> Runtime:
        """A runtime over the service's state."""
        from graph.runtime import Runtime

        return Runtime(self.graph(graph_path), self.store)

    def hook_config(self, installation_id: int | None) -> HookConfig:
        """The hooks' configuration for a work item last seen with ``installation_id``:
        the GitHub integration acting for that installation.

        Raises:
            NoGitHubClient: no GitHub client (the reason from :attr:`github_error`), or
                the client for that installation cannot be built.
        """
        from graph.context import HookConfig

        if self.github is None:
            raise NoGitHubClient(self.github_error or "no GitHub transport is configured")
        try:
            client = self.github(installation_id)
        except (ValueError, LookupError) as exc:
            raise NoGitHubClient(
                f"no GitHub client for installation {installation_id}: {exc}") from None
        return HookConfig(integrations={"github": client})


def build_operator(
    settings: Settings, connection: redis.Redis | None = None, *, which: Which | None = None
) -> Operator:
    """The commands' Redis, state store and GitHub client -- the worker's client, built
    the same way (``integrations`` block, GitHub Enterprise Server URL, write throttle).

    A GitHub client that cannot be built is not an error here (``deliveries`` needs
    none); :attr:`Operator.github_error` keeps the reason for the commands that do.
    """
    from workers.state import RedisStateStore

    conn = connection or redis_client(settings, CLI)
    github: GitHubProvider | None = None
    error: str | None = None
    try:
        github = github_provider(settings, throttle=write_throttle(settings, conn),
                                 cache=request_cache(settings, conn), which=which)
        if github is None:
            error = ("THE_LOOP_GITHUB_TRANSPORT (integrations.github.transport) is none: "
                     "set it to auto, api or cli")
    except NoGitHubClient as exc:
        error = str(exc)
    return Operator(settings, conn, RedisStateStore(conn, settings.worker.prefix,
                                                    retention=settings.worker.retention),
                    github, error)
