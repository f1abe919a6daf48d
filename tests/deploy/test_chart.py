"""The Helm chart: rendered and linted through Helm's own Go SDK (helm-python-sdk), every
manifest validated against the Kubernetes schemas (kubernetes-validate, strict: unknown
fields fail), and the properties that matter asserted on the rendered objects."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
import yaml

from foundation.config.deployment import load_cli_config
from foundation.config.loader import CLI_CONFIG, schema
from tests.deploy.conftest import (
    CHART_DIR,
    RELEASE,
    Rendered,
    containers,
    env_of,
    pod_spec,
    render,
    walk,
)

FULLNAME = f"{RELEASE}-the-loop"
WEB, WORKER, REDIS = f"{FULLNAME}-web", f"{FULLNAME}-worker", f"{FULLNAME}-redis"
RUNNER = f"{FULLNAME}-runner"
BUILTIN_REDIS_URL = f"redis://{REDIS}:6379/0"
# Every variable whose value is a credential; each must come from a secretKeyRef.
SECRET_VARS = {
    "THE_LOOP_WEBHOOK_SECRET", "THE_LOOP_GITHUB_APP_ID", "THE_LOOP_GITHUB_PRIVATE_KEY",
    "THE_LOOP_SLACK_TOKEN", "THE_LOOP_SLACK_WEBHOOK_URL", "THE_LOOP_JIRA_TOKEN",
    "THE_LOOP_API_TOKENS", "THE_LOOP_GITHUB_CLIENT_SECRET", "THE_LOOP_UI_SESSION_SECRET",
}
#: The web's optional credentials (the read API and the dashboard).
WEB_OPTIONAL = (("THE_LOOP_API_TOKENS", "apiTokens"),
                ("THE_LOOP_GITHUB_CLIENT_SECRET", "githubClientSecret"),
                ("THE_LOOP_UI_SESSION_SECRET", "uiSessionSecret"))
CLI_SCHEMA_HAS_HARNESS = "harness" in schema(CLI_CONFIG)["properties"]
# kubeVersion in Chart.yaml is >=1.25; check the oldest supported and the newest schemas.
OLDEST_KUBE = "1.25.0"

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "external-redis-ingress-hpa": {
        "image": {"repository": "registry.example.com/acme/the-loop", "tag": "0.1.0"},
        "imagePullSecrets": [{"name": "registry"}],
        "secret": {"name": "acme-loop"},
        "config": {"version": 2, "queue": {"name": "the-loop"}},
        "env": {"THE_LOOP_LOG_LEVEL": "DEBUG", "THE_LOOP_GITHUB_WRITE_INTERVAL": 2},
        "web": {"env": {"THE_LOOP_ACCESS_LOG": "-"}, "autoscaling": {"enabled": True},
                "gunicorn": {"workers": 4, "threads": 8}},
        "worker": {"replicas": 3, "env": {"THE_LOOP_LOCK_TIMEOUT": "600"}},
        "ingress": {"enabled": True, "className": "nginx", "host": "loop.example.com",
                    "tlsSecretName": "loop-tls",
                    "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"}},
        "redis": {"url": "rediss://redis.example.com:6380/2"},
        "serviceAccount": {"create": False, "name": "loop-sa"},
    },
    "redis-url-in-secret": {
        "redis": {"urlSecretKey": "redis-url"},
        "secret": {"keys": {"slackToken": "", "slackWebhookUrl": "", "jiraToken": ""}},
    },
    "builtin-redis-ephemeral": {
        "redis": {"persistence": {"enabled": False}, "networkPolicy": {"enabled": False}},
        "podDisruptionBudget": {"enabled": False},
        "web": {"replicas": 1, "port": 9000},
        "service": {"type": "LoadBalancer", "port": 443},
    },
    # The runner (tests/deploy/test_chart_runner.py asserts what each of these does).
    "runner-claude-code-claim": {
        "env": {"THE_LOOP_LOG_LEVEL": "INFO"},
        "runner": {"harness": {"adapter": "claude-code"}, "concurrency": 4,
                   "env": {"THE_LOOP_GITHUB_WRITE_INTERVAL": 1},
                   "workspace": {"persistence": {"enabled": True, "size": "50Gi",
                                                 "storageClass": "fast"}},
                   "resources": {"requests": {"cpu": "1", "memory": "2Gi"},
                                 "limits": {"memory": "6Gi"}}},
    },
    "runner-codex-chart-secret-shared-claim": {
        "runner": {"replicas": 2,
                   "image": {"repository": "registry.example.com/acme/the-loop-runner",
                             "tag": "0.1.0-r1", "pullPolicy": "Always"},
                   "harness": {"adapter": "codex", "binary": "/opt/harness/bin/codex",
                               "version": "0.171.0",
                               "apiKey": {"secretName": "codex-key", "secretKey": "openai",
                                          "value": "not-a-real-key"}},
                   "workspace": {"persistence": {"enabled": True,
                                                 "existingClaim": "shared-work",
                                                 "accessModes": ["ReadWriteMany"]}}},
    },
    "runner-command-adapter": {
        "runner": {"harness": {"adapter": "command", "version": "1.4.0",
                               "apiKey": {"env": "AGENT_API_KEY"}}},
    },
    "runner-disabled": {"runner": {"enabled": False}},
    # An external Sentinel set, the primary's password in the Secret, durable 202s
    # (tests/deploy/test_chart_sentinel.py asserts what it does).
    "sentinel-replicas": {
        "redis": {"urlSecretKey": "redis-url",
                  "sentinel": {"hosts": ["redis-node-0.redis-headless.db.svc:26379",
                                         "redis-node-1.redis-headless.db.svc:26379",
                                         "redis-node-2.redis-headless.db.svc:26379"],
                               "masterName": "mymaster",
                               "passwordSecretKey": "redis-sentinel-password"},
                  "receiverReplicas": 1, "receiverReplicasTimeoutMs": 250},
    },
}


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def scenario(request, helm) -> tuple[str, dict[str, Any], Rendered]:
    name = request.param
    return name, SCENARIOS[name], render(helm, SCENARIOS[name])


def _deployments(rendered: Rendered) -> list[str]:
    """The-loop's Deployments in this release: web, worker and (when enabled) runner."""
    names = {d["metadata"]["name"] for d in rendered.of_kind("Deployment")}
    return [n for n in (WEB, WORKER, RUNNER) if n in names]


def _components(rendered: Rendered) -> list[tuple[str, str]]:
    return [(n, n.rsplit("-", 1)[1]) for n in _deployments(rendered)]


# -- Helm: lint and render ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_helm_lint_is_clean(helm, name):
    for kube in (f"v{OLDEST_KUBE}", None):
        report = helm.lint(str(CHART_DIR), SCENARIOS[name], strict=True, namespace="loop",
                           kube_version=kube)
        problems = [m for m in report["messages"] if m["severity"] >= 2]  # warning, error
        assert report["errors"] == [] and problems == [], json.dumps(report, indent=2)


def test_every_manifest_is_valid_kubernetes(scenario, kubernetes_validate):
    name, _, rendered = scenario
    assert rendered.objects, f"{name}: nothing rendered"
    latest = kubernetes_validate.utils.latest_version()
    for obj in rendered.objects:
        for version in (OLDEST_KUBE, latest):
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(str(p) for p in exc.path)
                pytest.fail(f"{name}: {obj['kind']}/{obj['metadata']['name']} invalid for "
                            f"Kubernetes {version} at {where}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                pytest.fail(f"{name}: {exc.message}")


def test_the_validator_is_strict(kubernetes_validate, helm):
    """Negative control: a misspelt field in a rendered Deployment is caught."""
    deployment = render(helm).get("Deployment", WORKER)
    containers(deployment)[0]["comand"] = ["the-loop", "worker"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, OLDEST_KUBE, strict=True)


# -- what the release must do ---------------------------------------------------------


def test_worker_runs_the_loop_worker_and_web_runs_the_receiver(scenario):
    name, values, rendered = scenario
    (worker,) = containers(rendered.get("Deployment", WORKER))
    assert worker["command"] == ["the-loop", "worker"]
    # The worker's only port is its /metrics (tests/observability/test_chart_metrics.py).
    assert [p["name"] for p in worker.get("ports", [])] in ([], ["metrics"])
    assert "readinessProbe" not in worker
    (web,) = containers(rendered.get("Deployment", WEB))
    port = values.get("web", {}).get("port", 8080)
    assert web["command"] == ["the-loop", "serve", "--host", "0.0.0.0", "--port", str(port)]
    assert web["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    image = values.get("image", {})
    expected = f"{image.get('repository', 'the-loop')}:{image.get('tag') or '0.1.0'}"
    assert web["image"] == worker["image"] == expected


def test_probes_hit_readyz_and_healthz_on_the_web_port(scenario):
    _, _, rendered = scenario
    (web,) = containers(rendered.get("Deployment", WEB))
    assert web["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert web["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert web["ports"][0]["name"] == "http"


def test_secrets_are_referenced_never_inlined(scenario):
    name, values, rendered = scenario
    secret_name = values.get("secret", {}).get("name", "the-loop")
    api_key = values.get("runner", {}).get("harness", {}).get("apiKey", {})
    created = [s["metadata"]["name"] for s in rendered.of_kind("Secret")]
    # The chart never writes secret.name; only runner.harness.apiKey.value makes a Secret.
    assert created == ([api_key.get("secretName", "the-loop-harness")]
                       if api_key.get("value") else []), created
    for deployment in rendered.of_kind("Deployment"):
        for container in containers(deployment):
            for var, entry in env_of(container).items():
                if var in SECRET_VARS:
                    assert "value" not in entry, f"{name}: {var} is inlined"
                    assert entry["valueFrom"]["secretKeyRef"]["name"] == secret_name
    web = env_of(containers(rendered.get("Deployment", WEB))[0])
    worker = env_of(containers(rendered.get("Deployment", WORKER))[0])
    # Each process gets only the credentials it uses.
    keys = values.get("secret", {}).get("keys", {})
    optional = {var for var, key in WEB_OPTIONAL if keys.get(key) != ""}
    assert SECRET_VARS & set(web) == {"THE_LOOP_WEBHOOK_SECRET"} | optional
    for var in optional:
        assert web[var]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert "THE_LOOP_WEBHOOK_SECRET" not in worker
    ref = web["THE_LOOP_WEBHOOK_SECRET"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret_name, "key": "webhook-secret", "optional": False}
    for var in ("THE_LOOP_GITHUB_APP_ID", "THE_LOOP_GITHUB_PRIVATE_KEY"):
        assert worker[var]["valueFrom"]["secretKeyRef"]["optional"] is False
    keys = values.get("secret", {}).get("keys", {})
    for var, key in (("THE_LOOP_SLACK_TOKEN", "slackToken"),
                     ("THE_LOOP_SLACK_WEBHOOK_URL", "slackWebhookUrl"),
                     ("THE_LOOP_JIRA_TOKEN", "jiraToken")):
        if keys.get(key) == "":
            assert var not in worker
        else:
            assert worker[var]["valueFrom"]["secretKeyRef"]["optional"] is True


def test_redis_url_reaches_both_deployments(scenario):
    name, values, rendered = scenario
    redis_values = values.get("redis", {})
    urls = {}
    for deployment in (WEB, WORKER):
        (container,) = containers(rendered.get("Deployment", deployment))
        urls[deployment] = env_of(container)["REDIS_URL"]
    assert urls[WEB] == urls[WORKER]
    entry = urls[WEB]
    if redis_values.get("url"):
        assert entry == {"name": "REDIS_URL", "value": redis_values["url"]}
        assert "StatefulSet" not in rendered.kinds()
    elif redis_values.get("urlSecretKey"):
        # With Sentinel too: the URL then gives the primary's password, database and TLS.
        secret_name = values.get("secret", {}).get("name", "the-loop")
        assert entry["valueFrom"]["secretKeyRef"] == {"name": secret_name,
                                                      "key": redis_values["urlSecretKey"]}
        assert "StatefulSet" not in rendered.kinds()
    elif redis_values.get("sentinel", {}).get("hosts"):
        assert entry == {"name": "REDIS_URL", "value": "redis://sentinel-managed/0"}
        assert "StatefulSet" not in rendered.kinds()
    else:
        assert entry == {"name": "REDIS_URL", "value": BUILTIN_REDIS_URL}
        _assert_builtin_redis_serves(rendered, redis_values)


def _assert_builtin_redis_serves(rendered: Rendered, redis_values: dict[str, Any]) -> None:
    service = rendered.get("Service", REDIS)
    statefulset = rendered.get("StatefulSet", REDIS)
    assert statefulset["spec"]["replicas"] == 1
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["port"] == 6379
    (redis,) = containers(statefulset)
    assert redis["ports"][0]["containerPort"] == 6379
    args = redis["args"]
    assert args[0] == "redis-server"
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--dir") + 1] == "/data"
    assert {"name": "data", "mountPath": "/data"} in redis["volumeMounts"]
    if redis_values.get("persistence", {}).get("enabled", True):
        (claim,) = statefulset["spec"]["volumeClaimTemplates"]
        assert claim["metadata"]["name"] == "data"
        assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    else:
        assert "volumeClaimTemplates" not in statefulset["spec"]
        assert {"name": "data", "emptyDir": {}} in pod_spec(statefulset)["volumes"]
    if redis_values.get("networkPolicy", {}).get("enabled", True):
        policy = rendered.get("NetworkPolicy", REDIS)
        allowed = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
        for deployment in (WEB, WORKER):
            labels = rendered.get("Deployment", deployment)["spec"]["template"]["metadata"]
            assert allowed.items() <= labels["labels"].items()


def test_config_file_is_mounted_where_the_loop_config_points(scenario):
    _, values, rendered = scenario
    configmap = rendered.get("ConfigMap", f"{FULLNAME}-config")
    text = configmap["data"]["cli-config.yaml"]
    mounted = yaml.safe_load(text) or {}
    given = values.get("config", {})
    # The chart's one addition: harness.version from runner.harness (test_chart_runner.py),
    # with the file's version when config gave none.
    added = None
    if mounted.get("harness", {}).get("version") != given.get("harness", {}).get("version"):
        added = mounted["harness"].pop("version")
        if not mounted["harness"] and "harness" not in given:
            del mounted["harness"]
        if "version" not in given:
            del mounted["version"]
    assert mounted == given
    # the-loop itself accepts the mounted file (its harness section too, once the file's
    # schema defines one).
    checked = text if added is None or CLI_SCHEMA_HAS_HARNESS else (
        yaml.safe_dump(mounted) if mounted else None)
    load_cli_config(checked, "cli-config.yaml")
    for deployment in _deployments(rendered):
        workload = rendered.get("Deployment", deployment)
        (container,) = containers(workload)
        env = env_of(container)
        assert env["THE_LOOP_CONFIG"]["value"] == "/etc/the-loop/cli-config.yaml"
        mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
        assert mount["mountPath"] == "/etc/the-loop" and mount["readOnly"] is True
        volume = next(v for v in pod_spec(workload)["volumes"] if v["name"] == "config")
        assert volume["configMap"]["name"] == configmap["metadata"]["name"]
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert len(annotations["checksum/config"]) == 64  # pods roll when the config changes


def test_plain_env_reaches_the_right_pods(scenario):
    _, values, rendered = scenario
    for deployment, component in _components(rendered):
        env = env_of(containers(rendered.get("Deployment", deployment))[0])
        expected = {**values.get("env", {}), **values.get(component, {}).get("env", {})}
        for var, value in expected.items():
            assert env[var] == {"name": var, "value": str(value)}
    web = env_of(containers(rendered.get("Deployment", WEB))[0])
    gunicorn = values.get("web", {}).get("gunicorn", {})
    assert web["THE_LOOP_WEB_WORKERS"]["value"] == str(gunicorn.get("workers", 2))
    assert web["THE_LOOP_WEB_THREADS"]["value"] == str(gunicorn.get("threads", 1))


def test_pods_are_locked_down(scenario):
    name, _, rendered = scenario
    workloads = rendered.of_kind("Deployment") + rendered.of_kind("StatefulSet") \
        + rendered.of_kind("Pod")
    assert len(workloads) >= 3
    for workload in workloads:
        spec = pod_spec(workload)
        what = f"{name}: {workload['kind']}/{workload['metadata']['name']}"
        assert spec["securityContext"]["runAsNonRoot"] is True, what
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, what
        assert spec["automountServiceAccountToken"] is False, what
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, what
            assert sc["readOnlyRootFilesystem"] is True, what
            assert sc["capabilities"] == {"drop": ["ALL"]}, what
            assert "resources" in container and container["resources"]["requests"], what
    for deployment in (WEB, WORKER):
        workload = rendered.get("Deployment", deployment)
        (container,) = containers(workload)
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
        tmp = next(v for v in pod_spec(workload)["volumes"] if v["name"] == "tmp")
        assert "emptyDir" in tmp
        assert pod_spec(workload)["securityContext"]["runAsUser"] == 10001  # Dockerfile's USER


def test_service_ingress_and_scaling_point_at_the_web_pods(scenario):
    name, values, rendered = scenario
    web = rendered.get("Deployment", WEB)
    labels = web["spec"]["template"]["metadata"]["labels"]
    assert web["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = rendered.get("Service", FULLNAME)
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "web"
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert service["spec"]["ports"][0]["port"] == values.get("service", {}).get("port", 80)

    ingress_values = values.get("ingress", {})
    if ingress_values.get("enabled"):
        ingress = rendered.get("Ingress", FULLNAME)
        (rule,) = ingress["spec"]["rules"]
        assert rule["host"] == ingress_values["host"]
        (path,) = rule["http"]["paths"]
        assert path["path"] == "/webhook" and path["pathType"] == "Exact"
        assert path["backend"]["service"] == {"name": FULLNAME, "port": {"name": "http"}}
        assert ingress["spec"]["tls"] == [{"hosts": [ingress_values["host"]],
                                           "secretName": ingress_values["tlsSecretName"]}]
        assert "https://loop.example.com/webhook" in rendered.notes
    else:
        assert "Ingress" not in rendered.kinds()

    if values.get("web", {}).get("autoscaling", {}).get("enabled"):
        hpa = rendered.get("HorizontalPodAutoscaler", WEB)
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": WEB}
        assert "replicas" not in web["spec"]  # the HPA owns the count
    else:
        assert "HorizontalPodAutoscaler" not in rendered.kinds()
        assert web["spec"]["replicas"] == values.get("web", {}).get("replicas", 2)

    if values.get("podDisruptionBudget", {}).get("enabled", True):
        for deployment in _deployments(rendered):
            pdb = rendered.get("PodDisruptionBudget", deployment)
            pods = rendered.get("Deployment", deployment)["spec"]["template"]["metadata"]
            assert pdb["spec"]["selector"]["matchLabels"].items() <= pods["labels"].items()
            assert pdb["spec"]["maxUnavailable"] == 1
    else:
        assert "PodDisruptionBudget" not in rendered.kinds()


def test_service_account_and_pull_secrets(scenario):
    _, values, rendered = scenario
    sa_values = values.get("serviceAccount", {})
    expected = sa_values.get("name") or FULLNAME
    for deployment in _deployments(rendered):
        spec = pod_spec(rendered.get("Deployment", deployment))
        assert spec["serviceAccountName"] == expected
        assert spec.get("imagePullSecrets", []) == values.get("imagePullSecrets", [])
    assert ("ServiceAccount" in rendered.kinds()) == sa_values.get("create", True)


def test_helm_test_pod_checks_readyz_through_the_service(scenario):
    _, values, rendered = scenario
    pod = rendered.get("Pod", f"{FULLNAME}-test-readyz")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["command"][-1]
    port = values.get("service", {}).get("port", 80)
    assert f"http://{FULLNAME}:{port}/readyz" in script


def _with_versions(tmp_path, version: str, app_version: str):
    """A copy of the chart whose Chart.yaml says ``version`` and ``appVersion``."""
    copy = tmp_path / f"the-loop-{version}"
    shutil.copytree(CHART_DIR, copy)
    chart = yaml.safe_load((copy / "Chart.yaml").read_text())
    assert chart["version"] != version and chart["appVersion"] != app_version
    chart.update(version=version, appVersion=app_version)
    (copy / "Chart.yaml").write_text(yaml.safe_dump(chart, sort_keys=False))
    return copy


def test_upgrading_the_loop_leaves_the_builtin_redis_pod_alone(helm, tmp_path):
    """A new chart or app version changes no field of the Redis pod template, so the
    StatefulSet does not restart Redis (docs/upgrade.md: no 503s from an upgrade)."""
    def templates(chart_dir) -> dict[str, Any]:
        with helm.Chart.load(str(chart_dir)) as chart:
            rendered = Rendered(chart.render(None, name=RELEASE, namespace="loop",
                                             is_install=False))
        return {kind: rendered.get(kind, name)["spec"]["template"]
                for kind, name in (("StatefulSet", REDIS), ("Deployment", WEB))}

    before = templates(CHART_DIR)
    after = templates(_with_versions(tmp_path, "9.8.7", "9.8.7"))
    assert after["StatefulSet"] == before["StatefulSet"]
    # Negative control: the bump did reach the release (the-loop's own pods do roll).
    assert after["Deployment"] != before["Deployment"]
    labels = before["StatefulSet"]["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/name": "the-loop",
                      "app.kubernetes.io/instance": RELEASE,
                      "app.kubernetes.io/component": "redis"}


def test_no_rendered_value_looks_like_a_credential(helm):
    """Nothing in the rendered defaults carries a PEM block or a token-looking literal."""
    rendered = render(helm, SCENARIOS["external-redis-ingress-hpa"])
    for obj in rendered.objects:
        for value in walk(obj):
            if isinstance(value, str):
                assert "PRIVATE KEY" not in value
                assert not value.startswith(("ghp_", "ghs_", "xoxb-", "xoxp-"))


# -- values.schema.json ---------------------------------------------------------------


@pytest.mark.parametrize("bad, where", [
    ({"web": {"replicas": "two"}}, "/web/replicas"),
    ({"worker": {"replicas": -1}}, "/worker/replicas"),
    ({"redis": {"url": "http://redis:6379"}}, "/redis/url"),
    ({"ingress": {"enabled": True}}, "/ingress/host"),
    ({"env": {"THE_LOOP_WEBHOOK_SECRET": "s3cret"}}, "/env/THE_LOOP_WEBHOOK_SECRET"),
    ({"web": {"env": {"THE_LOOP_GITHUB_PRIVATE_KEY": "pem"}}},
     "/web/env/THE_LOOP_GITHUB_PRIVATE_KEY"),
    ({"env": {"THE_LOOP_WEB_WORKERS": 4}}, "use web.gunicorn.workers"),
    ({"worker": {"env": {"THE_LOOP_WORKER_METRICS_PORT": "0"}}}, "use worker.metrics.port"),
    ({"env": {"not-a-name": "x"}}, "not-a-name"),
    ({"secret": {"name": "Not_A_Name"}}, "/secret/name"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"replicas": 3}, "replicas"),  # a misplaced key is refused, not ignored
])
def test_schema_rejects_wrong_values_at_install(helm, bad, where):
    with pytest.raises(helm.HelmValuesError) as caught:
        render(helm, bad)
    assert where in str(caught.value)
    report = helm.lint(str(CHART_DIR), bad, strict=True)
    assert report["errors"], f"helm lint accepted {bad}"


def _refused_env(helm) -> dict[str, str]:
    with helm.Chart.load(str(CHART_DIR)) as chart:
        properties = chart.schema["definitions"]["plainEnv"]["properties"]
    return {name: rule["const"] for name, rule in properties.items()}


def test_schema_refuses_every_variable_the_chart_sets_or_that_serve_ignores(helm):
    """What a template sets (beyond the user's own env) must be refused under env, or the
    pod would get the variable twice (and one of the two silently loses)."""
    refused = set(_refused_env(helm))
    set_by_chart: set[str] = set()
    for values in SCENARIOS.values():
        rendered = render(helm, values)
        # A command adapter's own key variable cannot be listed in advance: the template
        # refuses it in env instead (test_chart_runner.py).
        own_key = {values.get("runner", {}).get("harness", {}).get("apiKey", {}).get("env")}
        for deployment, component in _components(rendered):
            given = {**values.get("env", {}), **values.get(component, {}).get("env", {})}
            (container,) = containers(rendered.get("Deployment", deployment))
            set_by_chart |= set(env_of(container)) - set(given) - own_key
    assert {"THE_LOOP_HARNESS", "THE_LOOP_RUNNER_CONCURRENCY", "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY", "HOME"} <= set_by_chart  # the runner scenarios did render
    assert set_by_chart - refused == set()
    assert SECRET_VARS | {"GH_TOKEN", "GITHUB_TOKEN"} <= refused
    assert {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN",
            "CODEX_API_KEY"} <= refused  # the harness's keys: runner.harness.apiKey only
    # `the-loop serve --host 0.0.0.0 --port N` ignores these two: web.port sets the port.
    assert {"PORT", "THE_LOOP_BIND"} <= refused


@pytest.mark.parametrize("where", ["env", "web.env", "worker.env", "runner.env"])
def test_schema_names_the_path_and_the_fix_of_a_refused_variable(helm, where):
    for name, reason in _refused_env(helm).items():
        values: dict[str, Any] = {name: "4"}
        for part in reversed(where.split(".")):
            values = {part: values}
        with pytest.raises(helm.HelmValuesError) as caught:
            render(helm, values)
        message = str(caught.value)
        assert f"at '/{where.replace('.', '/')}/{name}'" in message
        assert reason in message and reason.startswith("refused here: ")
        # Typing the reason itself as the value does not get through either.
        values_again = json.loads(json.dumps(values).replace('"4"', json.dumps(reason)))
        with pytest.raises(helm.HelmValuesError):
            render(helm, values_again)


def test_schema_accepts_the_shipped_defaults(helm):
    with helm.Chart.load(str(CHART_DIR)) as chart:
        chart.validate_schema(chart.values)
        assert chart.values["config"] == {}
        assert chart.schema is not None and chart.schema["additionalProperties"] is False


def test_values_yaml_holds_no_secret_values():
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert set(values["secret"]) == {"name", "keys"}  # only names of things in the Secret
    for value in walk(values):
        if isinstance(value, str):
            assert "PRIVATE KEY" not in value and not value.startswith(("ghp_", "xox"))
