"""Build the worker's object graph from the environment (the one composition root)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis

from graph.compile import load_graph
from workers.service import DeliveryProcessor, GitHubFactory
from workers.settings import WorkerSettings

log = logging.getLogger("the_loop.worker")


def github_factory(env: Mapping[str, str]) -> GitHubFactory | None:
    """Installation id -> GitHub provider, or ``None`` when no credentials are configured.

    Raises:
        integrations.github.GitHubConfigError: credentials are set but malformed.
    """
    from integrations.github import GitHubClients, GitHubSettings

    settings = GitHubSettings.from_env(env)
    if settings.mode is None:
        log.warning("no GitHub credentials configured; enrolled work items cannot advance")
        return None
    return GitHubClients(settings).for_installation


def build_processor(
    env: Mapping[str, str], connection: redis.Redis | None = None
) -> DeliveryProcessor:
    """Settings, Redis, graph and GitHub clients from ``env``.

    Raises:
        workers.settings.SettingsError, graph.compile.GraphError,
        integrations.github.GitHubConfigError: at start-up, naming what to fix.
    """
    settings = WorkerSettings.from_env(env)
    conn = connection or redis.Redis.from_url(settings.redis_url)
    graph = load_graph(settings.graph_path)
    return DeliveryProcessor(settings, conn, graph, github_factory(env))
