"""The chart's optional redelivery CronJob (``redeliver.enabled``): `the-loop redeliver`
on a schedule, with the App's credentials from the Secret, locked down like every pod."""

from __future__ import annotations

import pytest

from tests.deploy.conftest import RELEASE, containers, env_of, pod_spec, render

CRONJOB = f"{RELEASE}-the-loop-redeliver"
VALUES = {"redeliver": {"enabled": True, "schedule": "*/10 * * * *", "since": "2h"},
          "env": {"THE_LOOP_GITHUB_API_URL": "https://github.example.com/api/v3"}}


def test_no_cronjob_unless_enabled(helm):
    assert not render(helm).of_kind("CronJob")


def test_the_cronjob_runs_redeliver_as_the_app(helm, kubernetes_validate):
    rendered = render(helm, VALUES)
    cronjob = rendered.get("CronJob", CRONJOB)
    assert cronjob["spec"]["schedule"] == "*/10 * * * *"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    job = {"spec": cronjob["spec"]["jobTemplate"]["spec"]}
    spec = pod_spec(job)
    (container,) = containers(job)
    assert container["command"] == ["the-loop", "redeliver", "--since", "2h"]
    env = env_of(container)
    for name in ("THE_LOOP_GITHUB_APP_ID", "THE_LOOP_GITHUB_PRIVATE_KEY"):
        assert "secretKeyRef" in env[name]["valueFrom"], name
    assert env["THE_LOOP_GITHUB_API_URL"]["value"] == "https://github.example.com/api/v3"
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"]
    latest = kubernetes_validate.utils.latest_version()
    for version in ("1.25.0", latest):
        kubernetes_validate.validate(cronjob, version, strict=True)


@pytest.mark.parametrize("bad", [
    {"redeliver": {"enabled": True, "schedule": "*/10 * * * *", "since": "soon"}},
    {"redeliver": {"enabled": "yes", "schedule": "*/10 * * * *", "since": "1h"}},
    {"redeliver": {"enabled": True, "schedule": "*/10 * * * *", "since": "1h", "x": 1}},
])
def test_the_schema_refuses_bad_redeliver_values(helm, bad):
    with pytest.raises(Exception, match="redeliver"):
        render(helm, bad)
