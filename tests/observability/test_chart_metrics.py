"""The chart exposes both metrics endpoints to a Prometheus that discovers pods by
annotation: the web's /metrics on its http port, the worker's on its metrics port."""

from __future__ import annotations

import pytest

from tests.deploy.conftest import CHART_DIR, RELEASE, containers, env_of, render, require_module

FULLNAME = f"{RELEASE}-the-loop"
WEB, WORKER = f"{FULLNAME}-web", f"{FULLNAME}-worker"
OLDEST_KUBE = "1.25.0"


@pytest.fixture(scope="module")
def helm():
    return require_module("helm_python", "helm-python-sdk")


def annotations(workload: dict) -> dict:
    return workload["spec"]["template"]["metadata"].get("annotations") or {}


def test_defaults_annotate_web_and_worker_and_open_the_worker_port(helm):
    rendered = render(helm)
    web = rendered.get("Deployment", WEB)
    assert {k: v for k, v in annotations(web).items() if k.startswith("prometheus.io/")} == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "8080",
        "prometheus.io/path": "/metrics"}
    worker = rendered.get("Deployment", WORKER)
    (container,) = containers(worker)
    assert container["ports"] == [{"name": "metrics", "containerPort": 9101, "protocol": "TCP"}]
    assert env_of(container)["THE_LOOP_WORKER_METRICS_PORT"]["value"] == "9101"
    assert annotations(worker)["prometheus.io/port"] == "9101"
    assert annotations(worker)["prometheus.io/path"] == "/metrics"
    # No PROMETHEUS_MULTIPROC_DIR: gunicorn_conf.py makes one under the writable /tmp.
    for deployment in (web, worker):
        (c,) = containers(deployment)
        assert "PROMETHEUS_MULTIPROC_DIR" not in env_of(c)
        assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"])


def test_worker_metrics_off_and_annotations_off(helm):
    kubernetes_validate = require_module("kubernetes_validate", "kubernetes-validate")
    values = {"web": {"port": 9000, "metrics": {"annotations": False}},
              "worker": {"replicas": 1, "metrics": {"port": 0, "annotations": True}}}
    rendered = render(helm, values)
    web = rendered.get("Deployment", WEB)
    worker = rendered.get("Deployment", WORKER)
    assert not any(k.startswith("prometheus.io/") for k in annotations(web))
    assert not any(k.startswith("prometheus.io/") for k in annotations(worker))
    (container,) = containers(worker)
    assert "ports" not in container
    assert env_of(container)["THE_LOOP_WORKER_METRICS_PORT"]["value"] == "0"
    for obj in (web, worker):
        kubernetes_validate.validate(obj, OLDEST_KUBE, strict=True)
    report = helm.lint(str(CHART_DIR), values, strict=True, namespace="loop")
    assert report["errors"] == []


def test_schema_refuses_a_bad_worker_metrics_port(helm):
    with pytest.raises(Exception, match="port"):
        render(helm, {"worker": {"metrics": {"port": 70000}}})
