"""The chart against an external Redis Sentinel set (``redis.sentinel``) and the
receiver's durable acknowledgement (``redis.receiverReplicas``): every pod finds the
primary through the Sentinels, the Sentinels' password comes from the Secret, and only
the web pods wait for replicas."""

from __future__ import annotations

import pytest

from tests.deploy.conftest import containers, env_of, render
from tests.deploy.test_chart import REDIS, RUNNER, SCENARIOS, WEB, WORKER

HOSTS = ["s-0.sentinel.db.svc:26379", "s-1.sentinel.db.svc:26379"]


def _envs(rendered, *deployments):
    return {d: env_of(containers(rendered.get("Deployment", d))[0]) for d in deployments}


def test_every_pod_finds_the_primary_through_the_sentinels(helm):
    values = SCENARIOS["sentinel-replicas"]
    rendered = render(helm, {**values, "runner": {"harness": {"adapter": "claude-code"}}})
    envs = _envs(rendered, WEB, WORKER, RUNNER)
    sentinel = values["redis"]["sentinel"]
    for deployment, env in envs.items():
        assert env["THE_LOOP_REDIS_SENTINELS"]["value"] == ",".join(sentinel["hosts"]), \
            deployment
        assert env["THE_LOOP_REDIS_SENTINEL_MASTER"]["value"] == "mymaster"
        assert env["THE_LOOP_REDIS_SENTINEL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "the-loop", "key": "redis-sentinel-password"}
        assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"]["key"] == "redis-url"
    # Only the receiver waits for replicas.
    assert envs[WEB]["THE_LOOP_RECEIVER_REPLICAS"]["value"] == "1"
    assert envs[WEB]["THE_LOOP_RECEIVER_REPLICAS_TIMEOUT_MS"]["value"] == "250"
    assert "THE_LOOP_RECEIVER_REPLICAS" not in envs[WORKER]
    assert not [o for o in rendered.of_kind("StatefulSet") if o["metadata"]["name"] == REDIS]


def test_without_sentinel_nothing_of_it_is_set_and_202_needs_no_replica(helm):
    rendered = render(helm)
    envs = _envs(rendered, WEB, WORKER)
    for env in envs.values():
        assert not {"THE_LOOP_REDIS_SENTINELS", "THE_LOOP_REDIS_SENTINEL_MASTER",
                    "THE_LOOP_REDIS_SENTINEL_PASSWORD"} & set(env)
    assert envs[WEB]["THE_LOOP_RECEIVER_REPLICAS"]["value"] == "0"
    assert envs[WEB]["THE_LOOP_RECEIVER_REPLICAS_TIMEOUT_MS"]["value"] == "500"


def test_a_sentinel_set_without_a_password_key_sets_no_password(helm):
    rendered = render(helm, {"redis": {"sentinel": {"hosts": HOSTS, "masterName": "m"}}})
    env = _envs(rendered, WORKER)[WORKER]
    assert "THE_LOOP_REDIS_SENTINEL_PASSWORD" not in env
    assert env["REDIS_URL"]["value"] == "redis://sentinel-managed/0"


def test_hosts_without_a_master_name_are_refused_with_the_fix(helm):
    with pytest.raises(Exception, match="redis.sentinel.masterName"):
        render(helm, {"redis": {"sentinel": {"hosts": HOSTS}}})


@pytest.mark.parametrize("bad", [
    {"redis": {"sentinel": {"hosts": ["no-port"], "masterName": "m"}}},
    {"redis": {"sentinel": {"hosts": ["a:1,b:2"], "masterName": "m"}}},
    {"redis": {"sentinel": {"hosts": HOSTS, "masterName": "has space"}}},
    {"redis": {"sentinel": {"hosts": HOSTS, "masterName": "m", "password": "x"}}},
    {"redis": {"receiverReplicas": -1}},
    {"redis": {"receiverReplicasTimeoutMs": 0}},
    {"env": {"THE_LOOP_REDIS_SENTINELS": "a:1"}},
    {"web": {"env": {"THE_LOOP_RECEIVER_REPLICAS": "1"}}},
])
def test_the_schema_refuses_bad_sentinel_values(helm, bad):
    with pytest.raises(helm.HelmValuesError):
        render(helm, bad)
