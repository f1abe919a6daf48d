"""The chart's runner: its own Deployment and image, the concurrency and harness values
reaching `the-loop runner`, the workspace volume (emptyDir or a claim), the harness's API key
in the runner pods only, and nothing of it when the runner is disabled. (test_chart.py
renders the runner scenarios through lint, the Kubernetes schemas and the lock-down checks.)
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.deploy.conftest import CHART_DIR, Rendered, containers, env_of, pod_spec, render, walk
from tests.deploy.test_chart import FULLNAME, REDIS, RUNNER, SCENARIOS, WEB, WORKER
from tests.deploy.test_dockerfile import stage

STATE = "/var/lib/the-loop"
KEY_VARS = {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "CODEX_API_KEY",
            "AGENT_API_KEY"}
DEFAULTS = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["runner"]


def runner_container(rendered: Rendered) -> dict[str, Any]:
    (container,) = containers(rendered.get("Deployment", RUNNER))
    return container


def runner_env(rendered: Rendered) -> dict[str, dict[str, Any]]:
    return env_of(runner_container(rendered))


def dockerfile_args() -> dict[str, str]:
    text = (REPO_ROOT / "Dockerfile").read_text()
    return dict(re.findall(r"^ARG ([A-Z_]+)=(\S+)$", text, re.M))


# -- the Deployment ------------------------------------------------------------------


def test_runner_is_on_by_default_and_waits_for_a_person(helm):
    """Defaults: a runner Deployment with the explicit adapter none (today's behaviour),
    the runner image, one replica, two live turns, no API key anywhere."""
    assert DEFAULTS["enabled"] is True and DEFAULTS["harness"]["adapter"] == "none"
    rendered = render(helm)
    deployment = rendered.get("Deployment", RUNNER)
    assert deployment["spec"]["replicas"] == 1
    container = runner_container(rendered)
    assert container["image"] == "the-loop-runner:0.1.0"
    assert container["command"] == ["/usr/bin/tini", "--", "the-loop", "runner"]
    assert "ports" not in container and "readinessProbe" not in container
    env = runner_env(rendered)
    assert env["THE_LOOP_HARNESS"] == {"name": "THE_LOOP_HARNESS", "value": "none"}
    assert env["THE_LOOP_RUNNER_CONCURRENCY"]["value"] == "2"
    assert "THE_LOOP_HARNESS_BINARY" not in env
    assert not KEY_VARS & set(env)
    assert "Harness:                none" in rendered.notes
    assert (yaml.safe_load(rendered.get("ConfigMap", f"{FULLNAME}-config")["data"]
                           ["cli-config.yaml"]) or {}) == {}


@pytest.mark.parametrize("name", ["runner-claude-code-claim",
                                  "runner-codex-chart-secret-shared-claim"])
def test_runner_deployment_carries_its_values(helm, name):
    values = SCENARIOS[name]["runner"]
    rendered = render(helm, SCENARIOS[name])
    deployment = rendered.get("Deployment", RUNNER)
    assert deployment["spec"]["replicas"] == values.get("replicas", 1)
    assert deployment["metadata"]["labels"]["app.kubernetes.io/component"] == "runner"
    container = runner_container(rendered)
    image = {**DEFAULTS["image"], **values.get("image", {})}
    assert container["image"] == f"{image['repository']}:{image['tag'] or '0.1.0'}"
    assert container["imagePullPolicy"] == image["pullPolicy"]
    assert container["resources"] == values.get("resources", DEFAULTS["resources"])
    env = runner_env(rendered)
    assert env["THE_LOOP_HARNESS"]["value"] == values["harness"]["adapter"]
    assert env["THE_LOOP_RUNNER_CONCURRENCY"]["value"] == str(values.get("concurrency", 2))
    if values["harness"].get("binary"):
        assert env["THE_LOOP_HARNESS_BINARY"]["value"] == values["harness"]["binary"]
    else:
        assert "THE_LOOP_HARNESS_BINARY" not in env
    # The runner mints installation tokens for git: the App's credentials, from secret.name.
    for var in ("THE_LOOP_GITHUB_APP_ID", "THE_LOOP_GITHUB_PRIVATE_KEY"):
        assert env[var]["valueFrom"]["secretKeyRef"]["name"] == "the-loop"
    assert not {"THE_LOOP_WEBHOOK_SECRET", "THE_LOOP_SLACK_TOKEN", "THE_LOOP_JIRA_TOKEN"} \
        & set(env)  # only what the runner uses
    assert pod_spec(deployment)["terminationGracePeriodSeconds"] == \
        DEFAULTS["terminationGracePeriodSeconds"]


def test_worker_and_runner_agree_on_the_adapter(helm):
    """The worker queues the turns the runner runs: both get THE_LOOP_HARNESS, the web none."""
    rendered = render(helm, SCENARIOS["runner-claude-code-claim"])
    worker = env_of(containers(rendered.get("Deployment", WORKER))[0])
    web = env_of(containers(rendered.get("Deployment", WEB))[0])
    assert worker["THE_LOOP_HARNESS"] == runner_env(rendered)["THE_LOOP_HARNESS"] == \
        {"name": "THE_LOOP_HARNESS", "value": "claude-code"}
    assert "THE_LOOP_HARNESS" not in web
    # Only the runner has the binary, the concurrency, the workspaces and a HOME to set.
    for env in (worker, web):
        assert not {"THE_LOOP_HARNESS_BINARY", "THE_LOOP_RUNNER_CONCURRENCY",
                    "THE_LOOP_WORKSPACE_DIR", "HOME"} & set(env)


def test_runner_shares_redis_config_and_plain_env_with_the_worker(helm):
    rendered = render(helm, SCENARIOS["runner-claude-code-claim"])
    env = runner_env(rendered)
    worker = env_of(containers(rendered.get("Deployment", WORKER))[0])
    assert env["REDIS_URL"] == worker["REDIS_URL"]
    assert env["THE_LOOP_CONFIG"]["value"] == "/etc/the-loop/cli-config.yaml"
    assert env["THE_LOOP_LOG_LEVEL"]["value"] == "INFO"  # env: every pod
    assert env["THE_LOOP_GITHUB_WRITE_INTERVAL"]["value"] == "1"  # runner.env: runner only
    assert "THE_LOOP_GITHUB_WRITE_INTERVAL" not in worker
    mount = next(m for m in runner_container(rendered)["volumeMounts"] if m["name"] == "config")
    assert mount == {"name": "config", "mountPath": "/etc/the-loop", "readOnly": True}
    # The built-in Redis lets the runner in.
    policy = rendered.get("NetworkPolicy", REDIS)
    allowed = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    labels = rendered.get("Deployment", RUNNER)["spec"]["template"]["metadata"]["labels"]
    assert allowed.items() <= labels.items()
    pdb = rendered.get("PodDisruptionBudget", RUNNER)
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


# -- the harness's API key: the runner only -------------------------------------------


def _references_to(rendered: Rendered, secret_name: str) -> list[str]:
    """``kind/name`` of every object that reads ``secret_name`` (env, envFrom or volume)."""
    found = []
    for obj in rendered.objects:
        for node in walk(obj):
            if not isinstance(node, dict):
                continue
            refs = [node.get("secretKeyRef"), node.get("secretRef")]
            secret_volume = node.get("secret") if isinstance(node.get("secret"), dict) else None
            names = [r.get("name") for r in refs if isinstance(r, dict)]
            if secret_volume:
                names.append(secret_volume.get("secretName"))
            if secret_name in names:
                found.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return sorted(set(found))


@pytest.mark.parametrize("adapter, variable, extra", [
    ("claude-code", "ANTHROPIC_API_KEY", {}),
    ("codex", "OPENAI_API_KEY", {}),
    ("codex", "CODEX_API_KEY", {}),  # codex exec authenticates with this one
    ("command", "AGENT_API_KEY", {"env": "AGENT_API_KEY"}),
    ("claude-code", "CLAUDE_CODE_OAUTH_TOKEN", {"env": "CLAUDE_CODE_OAUTH_TOKEN"}),
])
def test_the_api_key_is_mounted_only_in_the_runner(helm, adapter, variable, extra):
    """The key's Secret is read by the runner Deployment and by nothing else the chart
    renders (web, worker, the Redis StatefulSet, the redeliver CronJob, the helm test pod);
    no other container has a variable of that name."""
    values = {"runner": {"harness": {"adapter": adapter, "apiKey": extra}},
              "redeliver": {"enabled": True}}
    rendered = render(helm, values)
    entry = runner_env(rendered)[variable]
    assert entry == {"name": variable, "valueFrom": {"secretKeyRef": {
        "name": "the-loop-harness", "key": "api-key", "optional": False}}}
    assert _references_to(rendered, "the-loop-harness") == [f"Deployment/{RUNNER}"]
    others = [o for o in rendered.objects if o["kind"] in
              ("Deployment", "StatefulSet", "CronJob", "Pod") and o["metadata"]["name"] != RUNNER]
    assert {o["kind"] for o in others} == {"Deployment", "StatefulSet", "CronJob", "Pod"}
    for obj in others:
        for node in walk(obj):
            if isinstance(node, dict) and "name" in node and ("value" in node
                                                              or "valueFrom" in node):
                assert node["name"] not in KEY_VARS, f"{obj['kind']}/{obj['metadata']['name']}"
    assert "the-loop-harness" not in str([o for o in others])


def test_the_api_key_secret_can_share_secret_name_and_still_reach_only_the_runner(helm):
    values = {"runner": {"harness": {"adapter": "codex",
                                     "apiKey": {"secretName": "the-loop",
                                                "secretKey": "openai-api-key"}}}}
    rendered = render(helm, values)
    assert runner_env(rendered)["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == \
        "openai-api-key"
    for obj in rendered.objects:
        if obj["metadata"]["name"] != RUNNER:
            assert "openai-api-key" not in str(obj), f"{obj['kind']}/{obj['metadata']['name']}"


def test_a_command_adapter_without_a_key_gets_none(helm):
    rendered = render(helm, {"runner": {"harness": {"adapter": "command"}}})
    assert not KEY_VARS & set(runner_env(rendered))
    assert _references_to(rendered, "the-loop-harness") == []


def test_the_chart_creates_the_key_secret_only_from_a_value(helm):
    assert DEFAULTS["harness"]["apiKey"]["value"] == ""  # nothing secret in values.yaml
    assert "Secret" not in render(helm, {"runner": {"harness": {"adapter": "codex"}}}).kinds()
    rendered = render(helm, SCENARIOS["runner-codex-chart-secret-shared-claim"])
    (secret,) = rendered.of_kind("Secret")
    assert secret["metadata"]["name"] == "codex-key" and secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["openai"]).decode() == "not-a-real-key"
    assert runner_env(rendered)["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "codex-key", "key": "openai", "optional": False}
    assert _references_to(rendered, "codex-key") == [f"Deployment/{RUNNER}"]
    # A key given with --set-file keeps no trailing newline.
    again = render(helm, {"runner": {"harness": {"adapter": "codex",
                                                 "apiKey": {"value": "k\n"}}}})
    assert base64.b64decode(again.get("Secret", "the-loop-harness")["data"]["api-key"]) == b"k"


def test_a_key_variable_also_given_as_plain_env_is_refused(helm):
    values = {"runner": {"harness": {"adapter": "command", "apiKey": {"env": "AGENT_KEY"}},
                         "env": {"AGENT_KEY": "oops"}}}
    with pytest.raises(helm.HelmError) as caught:
        render(helm, values)
    assert "AGENT_KEY is the harness's API key" in str(caught.value)


# -- the workspace volume ----------------------------------------------------------------


def _state_volume(rendered: Rendered) -> dict[str, Any]:
    spec = pod_spec(rendered.get("Deployment", RUNNER))
    return next(v for v in spec["volumes"] if v["name"] == "state")


def test_workspaces_and_home_live_on_the_state_volume(helm):
    """HOME and THE_LOOP_WORKSPACE_DIR are directories of the one writable volume, made by
    the pod's own user in an init container (not root-owned subPath mounts)."""
    rendered = render(helm)
    container = runner_container(rendered)
    env = runner_env(rendered)
    assert env["HOME"]["value"] == f"{STATE}/home"
    assert env["THE_LOOP_WORKSPACE_DIR"]["value"] == f"{STATE}/workspaces"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[STATE] == {"name": "state", "mountPath": STATE}
    assert mounts["/tmp"]["name"] == "tmp"
    assert not [m for m in container["volumeMounts"] if "subPath" in m]
    spec = pod_spec(rendered.get("Deployment", RUNNER))
    (init,) = spec["initContainers"]
    assert init["image"] == container["image"]
    assert init["command"][:4] == ["mkdir", "-p", "-m", "0700"]
    assert set(init["command"][4:]) == {env["HOME"]["value"],
                                        env["THE_LOOP_WORKSPACE_DIR"]["value"]}
    assert init["volumeMounts"] == [{"name": "state", "mountPath": STATE}]
    assert init["securityContext"] == container["securityContext"]
    # The same paths as the runner image's (docker run without the chart).
    image_env = " ".join(a for k, a in stage("runner") if k == "ENV")
    assert f"HOME={STATE}/home" in image_env
    assert f"THE_LOOP_WORKSPACE_DIR={STATE}/workspaces" in image_env


def test_workspace_is_an_emptydir_by_default(helm):
    rendered = render(helm)
    assert _state_volume(rendered) == {"name": "state", "emptyDir": {"sizeLimit": "20Gi"}}
    assert "PersistentVolumeClaim" not in rendered.kinds()
    assert "strategy" not in rendered.get("Deployment", RUNNER)["spec"]  # rolling update
    tmp = next(v for v in pod_spec(rendered.get("Deployment", RUNNER))["volumes"]
               if v["name"] == "tmp")
    assert tmp == {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}


def test_workspace_claim_created_by_the_chart(helm):
    rendered = render(helm, SCENARIOS["runner-claude-code-claim"])
    claim = rendered.get("PersistentVolumeClaim", RUNNER)
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                             "resources": {"requests": {"storage": "50Gi"}}}
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert _state_volume(rendered) == {"name": "state",
                                       "persistentVolumeClaim": {"claimName": RUNNER}}
    # A ReadWriteOnce claim attaches to one pod: a rollout stops the old pod first.
    assert rendered.get("Deployment", RUNNER)["spec"]["strategy"] == {"type": "Recreate"}
    assert f"Workspaces:             PersistentVolumeClaim {RUNNER}" in rendered.notes


def test_workspace_existing_shared_claim(helm):
    rendered = render(helm, SCENARIOS["runner-codex-chart-secret-shared-claim"])
    assert "PersistentVolumeClaim" not in rendered.kinds()
    assert _state_volume(rendered) == {"name": "state",
                                       "persistentVolumeClaim": {"claimName": "shared-work"}}
    deployment = rendered.get("Deployment", RUNNER)
    assert deployment["spec"]["replicas"] == 2 and "strategy" not in deployment["spec"]


def test_two_replicas_on_a_readwriteonce_claim_are_refused(helm):
    values = {"runner": {"replicas": 2, "workspace": {"persistence": {"enabled": True}}}}
    with pytest.raises(helm.HelmError) as caught:
        render(helm, values)
    assert "runner.replicas is 2" in str(caught.value)
    assert "ReadWriteMany" in str(caught.value)


# -- the harness version in cli-config.yaml ------------------------------------------------


def _cli_config(rendered: Rendered) -> dict[str, Any]:
    text = rendered.get("ConfigMap", f"{FULLNAME}-config")["data"]["cli-config.yaml"]
    return yaml.safe_load(text) or {}


@pytest.mark.parametrize("adapter, arg", [("claude-code", "CLAUDE_CODE_VERSION"),
                                          ("codex", "CODEX_VERSION")])
def test_the_image_pin_is_the_default_harness_version(helm, adapter, arg):
    """The runner checks `<binary> --version` against harness.version: by default the
    version the runner image installs (the Dockerfile's ARG)."""
    rendered = render(helm, {"runner": {"harness": {"adapter": adapter}}})
    assert _cli_config(rendered) == {"version": 2,
                                     "harness": {"version": dockerfile_args()[arg]}}
    assert dockerfile_args()[arg] in rendered.notes


def test_an_explicit_version_wins_and_a_config_version_is_kept(helm):
    rendered = render(helm, SCENARIOS["runner-command-adapter"])
    assert _cli_config(rendered)["harness"] == {"version": "1.4.0"}
    config = {"version": 2, "harness": {"version": "2.0.0", "maxTurns": 3}}
    kept = render(helm, {"config": config, "runner": {"harness": {"adapter": "claude-code"}}})
    assert _cli_config(kept) == config
    both = render(helm, {"config": config,
                         "runner": {"harness": {"adapter": "claude-code", "version": "2.1.0"}}})
    assert _cli_config(both) == {"version": 2, "harness": {"version": "2.1.0", "maxTurns": 3}}


def test_no_version_is_added_for_adapter_none_or_a_disabled_runner(helm):
    for values in ({}, {"runner": {"enabled": False, "harness": {"adapter": "codex"}}}):
        assert _cli_config(render(helm, values)) == {}


# -- disabled -------------------------------------------------------------------------------


def test_runner_disabled_renders_nothing_of_it(helm):
    values = {"runner": {"enabled": False, "harness": {"adapter": "claude-code",
                                                       "apiKey": {"value": "not-a-key"}},
                         "workspace": {"persistence": {"enabled": True}}}}
    rendered = render(helm, values)
    names = {(o["kind"], o["metadata"]["name"]) for o in rendered.objects}
    assert not [n for n in names if n[1] == RUNNER]
    assert not {"Secret", "PersistentVolumeClaim"} & rendered.kinds()
    worker = env_of(containers(rendered.get("Deployment", WORKER))[0])
    assert "THE_LOOP_HARNESS" not in worker  # cli-config.yaml decides, as before
    assert "Runner:                 disabled" in rendered.notes
    assert f"deployment/{RUNNER}" not in rendered.notes


# -- values.schema.json -----------------------------------------------------------------


@pytest.mark.parametrize("bad, where", [
    ({"runner": {"harness": {"adapter": "claude"}}}, "/runner/harness/adapter"),
    ({"runner": {"concurrency": 0}}, "/runner/concurrency"),
    ({"runner": {"harness": {"apiKey": {"env": "not a name"}}}}, "/runner/harness/apiKey/env"),
    ({"runner": {"env": {"ANTHROPIC_API_KEY": "sk"}}}, "/runner/env/ANTHROPIC_API_KEY"),
    ({"env": {"OPENAI_API_KEY": "sk"}}, "/env/OPENAI_API_KEY"),
    ({"worker": {"env": {"THE_LOOP_HARNESS": "codex"}}}, "use runner.harness.adapter"),
    ({"runner": {"env": {"THE_LOOP_RUNNER_CONCURRENCY": "8"}}}, "use runner.concurrency"),
    ({"runner": {"workspace": {"persistence": {"enabled": True, "size": "lots"}}}},
     "/runner/workspace/persistence/size"),
    ({"runner": {"concurency": 3}}, "concurency"),
])
def test_schema_rejects_wrong_runner_values(helm, bad, where):
    with pytest.raises(helm.HelmValuesError) as caught:
        render(helm, bad)
    assert where in str(caught.value)

