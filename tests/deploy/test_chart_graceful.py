"""The chart's graceful stop: the runner's drain (``runner.drainSeconds`` ->
``THE_LOOP_RUNNER_DRAIN_SECONDS``) fits in its pods' grace period, the receiver sleeps in a
preStop hook while its endpoints drain and its grace covers that and gunicorn's 30 s, and
each of receiver, worker and runner has a PodDisruptionBudget (refused values fail the
render, naming the value); and the workers' reconcile interval."""

from __future__ import annotations

import pytest
import yaml

from tests.deploy.conftest import CHART_DIR, containers, env_of, pod_spec, render
from tests.deploy.test_chart import RUNNER, WEB, WORKER

VALUES = yaml.safe_load((CHART_DIR / "values.yaml").read_text())


def test_the_runner_drains_within_its_grace_period(helm):
    rendered = render(helm)
    deployment = rendered.get("Deployment", RUNNER)
    env = env_of(containers(deployment)[0])
    drain = VALUES["runner"]["drainSeconds"]
    assert env["THE_LOOP_RUNNER_DRAIN_SECONDS"]["value"] == str(drain) == "25"
    assert pod_spec(deployment)["terminationGracePeriodSeconds"] >= drain + 15
    custom = render(helm, {"runner": {"drainSeconds": 100,
                                      "terminationGracePeriodSeconds": 120}})
    assert env_of(containers(custom.get("Deployment", RUNNER))[0])[
        "THE_LOOP_RUNNER_DRAIN_SECONDS"]["value"] == "100"


def test_the_runner_mirrors_are_partial_clones_unless_turned_off(helm):
    def value(rendered) -> str:
        return env_of(containers(rendered.get("Deployment", RUNNER))[0])[
            "THE_LOOP_RUNNER_PARTIAL_CLONE"]["value"]

    assert VALUES["runner"]["partialClone"] is True
    assert value(render(helm)) == "true"
    assert value(render(helm, {"runner": {"partialClone": False}})) == "false"
    with pytest.raises(Exception, match="partialClone"):
        render(helm, {"runner": {"env": {"THE_LOOP_RUNNER_PARTIAL_CLONE": "false"}}})


def test_a_grace_period_shorter_than_the_drain_is_refused(helm):
    with pytest.raises(Exception, match="drainSeconds"):
        render(helm, {"runner": {"drainSeconds": 100}})
    with pytest.raises(Exception, match="preStopSleepSeconds"):
        render(helm, {"web": {"preStopSleepSeconds": 20}})


def test_the_receiver_sleeps_before_gunicorn_stops(helm):
    rendered = render(helm)
    web = rendered.get("Deployment", WEB)
    (container,) = containers(web)
    sleep = VALUES["web"]["preStopSleepSeconds"]
    assert container["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", str(sleep)]}}
    assert pod_spec(web)["terminationGracePeriodSeconds"] >= sleep + 30
    for name in (WORKER, RUNNER):
        assert "lifecycle" not in containers(rendered.get("Deployment", name))[0]


def test_each_process_has_a_disruption_budget_and_values_turn_them_off(helm):
    rendered = render(helm)
    for name in (WEB, WORKER, RUNNER):
        labels = rendered.get("Deployment", name)["spec"]["template"]["metadata"]["labels"]
        pdb = rendered.get("PodDisruptionBudget", name)
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    off = render(helm, {"podDisruptionBudget": {"enabled": False}})
    assert "PodDisruptionBudget" not in off.kinds()


def test_the_workers_reconcile_interval_reaches_them_and_a_bad_one_is_refused(helm):
    rendered = render(helm)
    env = env_of(containers(rendered.get("Deployment", WORKER))[0])
    assert env["THE_LOOP_RECONCILE_INTERVAL"]["value"] == VALUES["worker"][
        "reconcileInterval"] == "10m"
    # The reconciler acts as the App: the workers have its credentials.
    assert {"THE_LOOP_GITHUB_APP_ID", "THE_LOOP_GITHUB_PRIVATE_KEY"} <= set(env)
    custom = render(helm, {"worker": {"reconcileInterval": "1h"}})
    assert env_of(containers(custom.get("Deployment", WORKER))[0])[
        "THE_LOOP_RECONCILE_INTERVAL"]["value"] == "1h"
    with pytest.raises(Exception, match="reconcileInterval"):
        render(helm, {"worker": {"reconcileInterval": "ten minutes"}})
