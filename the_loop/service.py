"""Open the service's runtime (Redis state, GitHub integration) from the command line."""

from __future__ import annotations

import contextlib
import os

import redis

from graph.compile import load_graph
from graph.context import HookConfig
from graph.model import WorkItem
from graph.runtime import Runtime
from the_loop.local import parse_ref
from workers.bootstrap import github_factory
from workers.settings import WorkerSettings
from workers.state import RedisStateStore


def open_service(ref: str, graph_path: str | None = None) -> tuple[Runtime, WorkItem, HookConfig]:
    """Runtime over the service's Redis state for ``ref``, with the GitHub integration
    when credentials are configured (token mode, or App mode with the installation the
    work item was last seen with)."""
    settings = WorkerSettings.from_env()
    store = RedisStateStore(redis.Redis.from_url(settings.redis_url, socket_timeout=5),
                            settings.prefix)
    graph = load_graph(graph_path or settings.graph_path)
    item = parse_ref(ref, settings.spec_dir)
    integrations = {}
    factory = github_factory(os.environ)
    state = store.load(ref)
    if factory is not None and state is not None:
        # Without a client the move is still recorded in state and the event log.
        with contextlib.suppress(Exception):
            integrations["github"] = factory(state.installation_id)
    return Runtime(graph, store), item, HookConfig(integrations=integrations)
