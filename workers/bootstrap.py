"""Build the worker's object graph from the environment (the one composition root)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis

from graph.compile import Graph, load_graph
from workers.service import DeliveryProcessor, GitHubFactory
from workers.settings import WorkerSettings

log = logging.getLogger("the_loop.worker")

#: Operations the worker itself calls outside any hook, on every work item: the
#: repository config and artifacts (get-file), a pull request's head (get-pull-request),
#: the status and notice comments (list-comments, comment, update-comment) and who may
#: decide (get-permission). (Reactions, ``add-reaction``, are best effort: a transport
#: without it only loses them, with a warning at start-up.)
WORKER_OPERATIONS: dict[str, frozenset[str]] = {
    "github": frozenset(
        {"get-file", "get-pull-request", "list-comments", "comment", "update-comment",
         "get-permission"}
    ),
}


#: Integrations a deployment may leave unconfigured (the hooks using them then skip).
OPTIONAL_INTEGRATIONS = frozenset({"slack", "jira"})


def required_operations(graph: Graph) -> dict[str, frozenset[str]]:
    """Integration -> operations this worker needs: the graph's hooks' plus its own."""
    needed = {k: set(v) for k, v in graph.required_operations().items()}
    for integration, ops in WORKER_OPERATIONS.items():
        needed.setdefault(integration, set()).update(ops)
    return {k: frozenset(v) for k, v in sorted(needed.items())}


def github_factory(env: Mapping[str, str]) -> GitHubFactory | None:
    """Installation id -> GitHub provider (the transport ``THE_LOOP_GITHUB_TRANSPORT``
    selects), or ``None`` when no transport is available (the command line then works on
    state alone; the worker instead fails at start-up, see :func:`build_processor`).

    Raises:
        integrations.github.GitHubConfigError: credentials are set but malformed.
        integrations.providers.ProviderConfigError: an explicit transport that cannot run.
    """
    from integrations.providers import ProviderConfigError, github_provider_from_env

    try:
        return github_provider_from_env(env)
    except ProviderConfigError:
        if (env.get("THE_LOOP_GITHUB_TRANSPORT") or "auto").strip().lower() != "auto":
            raise
        log.warning("no GitHub transport available; enrolled work items cannot advance")
        return None


def write_limits(env: Mapping[str, str]) -> dict[str, int]:
    """GitHub's write budget per installation: ``THE_LOOP_GITHUB_WRITES_PER_MINUTE``
    (default 80) and ``THE_LOOP_GITHUB_WRITES_PER_HOUR`` (default 500), GitHub's secondary
    rate limits for content creation (a GitHub Enterprise Server's admin may set others).

    Raises:
        workers.settings.SettingsError: not a whole number, or per minute > per hour.
    """
    from workers.settings import SettingsError

    limits = {}
    for key, name, default in (("per_minute", "THE_LOOP_GITHUB_WRITES_PER_MINUTE", 80),
                               ("per_hour", "THE_LOOP_GITHUB_WRITES_PER_HOUR", 500)):
        raw = (env.get(name) or "").strip()
        try:
            limits[key] = int(raw) if raw else default
        except ValueError:
            raise SettingsError(f"{name} must be a whole number of writes") from None
        if limits[key] < 11:
            raise SettingsError(f"{name} must be at least 11")
    if limits["per_minute"] > limits["per_hour"]:
        raise SettingsError("THE_LOOP_GITHUB_WRITES_PER_MINUTE must not exceed "
                            "THE_LOOP_GITHUB_WRITES_PER_HOUR")
    return limits


def build_processor(
    env: Mapping[str, str], connection: redis.Redis | None = None
) -> DeliveryProcessor:
    """Settings, Redis, graph and the integrations' providers from ``env``; then the
    capability check: every operation the graph's hooks (and the worker) need must be
    implemented by the configured transport of its integration.

    GitHub writes are spaced per installation across all workers through ``connection``
    (:class:`integrations.throttle.WriteThrottle`).

    Raises:
        workers.settings.SettingsError, graph.compile.GraphError,
        integrations.github.GitHubConfigError, integrations.providers.ProviderConfigError,
        integrations.capabilities.CapabilityError: at start-up, naming what to fix.
    """
    from integrations.capabilities import check_capabilities, hooks_needing
    from integrations.providers import build_providers
    from integrations.throttle import WriteThrottle
    from the_loop.config.deployment import cli_config_from_env
    from workers.deployment import effective_env

    settings = WorkerSettings.from_env(env)
    # cli-config.yaml's integrations block (transports, which variables hold credentials);
    # the environment wins. A bad or legacy file already failed in WorkerSettings.
    deployment = cli_config_from_env(env)
    env = effective_env(env, deployment)
    from integrations.classifier import build_classifier

    classifier = build_classifier(deployment.classification, env)
    conn = connection or redis.Redis.from_url(settings.redis_url)
    graph = load_graph(settings.graph_path)
    needed = required_operations(graph)
    if (env.get("THE_LOOP_GITHUB_TRANSPORT") or "").strip().lower() == "none":
        # An explicit choice (never a fallback): acknowledge deliveries, advance nothing.
        log.warning("THE_LOOP_GITHUB_TRANSPORT=none: no GitHub transport; deliveries are "
                    "acknowledged and every labelled work item's delivery fails, naming "
                    "the variables to set")
        return DeliveryProcessor(settings, conn, graph, None, classifier=classifier)
    providers = build_providers(env, needed=needed,
                                throttle=WriteThrottle(conn, settings.prefix, **write_limits(env)))
    # Slack and Jira are opt-in: unconfigured, their hooks skip (notify without Slack).
    check_capabilities(needed, providers, hooks=hooks_needing(graph),
                       optional=OPTIONAL_INTEGRATIONS)
    github = providers.pop("github")
    if dict(settings.reactions).get("enabled") and "add-reaction" not in github.operations:
        log.warning("reactions are enabled but the GitHub transport %s cannot add them",
                    github.transport)
    return DeliveryProcessor(settings, conn, graph, github, integrations=providers,
                             classifier=classifier)
