"""Fixtures of the read API and dashboard tests: a seeded deployment in the test Redis
and the receiver's app (with ``/api/v1/`` and ``/ui/``) over it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from foundation.settings import Settings
from tests.web.seed import Seeded, seed
from the_loop.wiring import build_receiver

TOKEN = "tok-" + "7f3a9c" * 6
OTHER_TOKEN = "tok-" + "c0ffee" * 6
WEBHOOK_SECRET = "whsec-dashboard-tests-0001"


def environment(redis_ns, **extra: str) -> dict[str, str]:
    """The receiver's environment over the namespace, with API tokens."""
    return {
        "REDIS_URL": redis_ns.url,
        "THE_LOOP_REDIS_PREFIX": redis_ns.prefix,
        "THE_LOOP_QUEUE": redis_ns.queue_name,
        "THE_LOOP_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "THE_LOOP_API_TOKENS": f"{TOKEN},{OTHER_TOKEN}",
        **extra,
    }


@dataclass
class Site:
    """The receiver's app, its test client and the seeded state."""

    app: Any
    client: Any
    seeded: Seeded
    env: dict[str, str]

    def get(self, path: str, *, token: str | None = TOKEN, **kwargs: Any) -> Any:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.client.get(path, headers=headers, **kwargs)


def make_site(redis_ns, seeded: Seeded, **extra: str) -> Site:
    env = environment(redis_ns, **extra)
    app = build_receiver(Settings.from_env(env, process="receiver"), connection=redis_ns.client)
    return Site(app, app.test_client(), seeded, env)


@pytest.fixture
def seeded(redis_ns) -> Seeded:
    return seed(redis_ns.client, redis_ns.prefix, redis_ns.queue_name)


@pytest.fixture
def site(redis_ns, seeded) -> Site:
    return make_site(redis_ns, seeded)
