"""The chart's runner HOME on shared storage (``runner.home.sharedClaim``): an existing
ReadWriteMany claim mounted at the runner's HOME in every runner pod, beside (over) the
workspace volume; without it HOME stays on that volume (docs/operations.md, "Agent
sessions across runners")."""

from __future__ import annotations

import pytest

from tests.deploy.conftest import pod_spec, render
from tests.deploy.test_chart import RUNNER
from tests.deploy.test_chart_runner import STATE, runner_container, runner_env

HOME = f"{STATE}/home"


def test_home_stays_on_the_workspace_volume_without_a_shared_claim(helm):
    rendered = render(helm)
    spec = pod_spec(rendered.get("Deployment", RUNNER))
    assert "home" not in {v["name"] for v in spec["volumes"]}
    assert HOME not in {m["mountPath"] for m in runner_container(rendered)["volumeMounts"]}


def test_a_shared_claim_is_the_home_of_every_runner_pod(helm):
    values = {"runner": {"replicas": 3, "home": {"sharedClaim": "sessions-rwx"}}}
    rendered = render(helm, values)
    spec = pod_spec(rendered.get("Deployment", RUNNER))
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["home"] == {"name": "home",
                               "persistentVolumeClaim": {"claimName": "sessions-rwx"}}
    assert "emptyDir" in volumes["state"]  # the workspaces stay the pod's own
    mounts = {m["mountPath"]: m["name"] for m in runner_container(rendered)["volumeMounts"]}
    assert mounts[HOME] == "home" and mounts[STATE] == "state"
    assert runner_env(rendered)["HOME"]["value"] == HOME
    # The init container makes HOME on the claim as the pod's user (mkdir -p keeps it).
    (init,) = spec["initContainers"]
    assert {"name": "home", "mountPath": HOME} in init["volumeMounts"]
    assert HOME in init["command"]
    assert rendered.get("Deployment", RUNNER)["spec"]["replicas"] == 3
    assert "strategy" not in rendered.get("Deployment", RUNNER)["spec"]  # rolling update


def test_a_shared_claim_must_be_a_claim_name(helm):
    with pytest.raises(helm.HelmError):
        render(helm, {"runner": {"home": {"sharedClaim": "Not A Name"}}})
