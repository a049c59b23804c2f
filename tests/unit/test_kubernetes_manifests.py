"""The Kubernetes manifests of deploy/kubernetes (shown by docs/how-to/kubernetes.md): each
parses, the autoscalers target the Deployment and scale on a metric the supervisor exports,
the ConfigMap's queues.yaml is a valid configuration whose budgets fit the container, and the
guide shows the very files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from supervisor.config import parse_config
from supervisor.config.units import parse_size
from supervisor.observability.families import QueueSnapshot, children_families, readiness
from supervisor.observability.view import MasterCounters, MasterView, PoolView

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def exported_metrics() -> dict[str, dict[str, float]]:
    pool = PoolView(processes=3, ready=3, queues=("invoices",), desired=3, need=2.5)
    master = MasterView({"work": pool}, (), MasterCounters(), True, False)
    return {
        f.name: {dict(s.labels).get("pool", ""): s.value for s in f.samples}
        for f in children_families(master)
    }


def test_the_deployment_runs_a_valid_elastic_configuration_within_its_limits() -> None:
    docs = documents("deployment.yaml")
    config_map = by_kind(docs, "ConfigMap")
    deployment = by_kind(docs, "Deployment")
    config = parse_config(config_map["data"]["queues.yaml"], source="queues.yaml", env={})
    scaling = config.pools["work"].scaling
    assert scaling is not None and (scaling.min, scaling.max) == (1, 6)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    limit = parse_size(container["resources"]["limits"]["memory"].replace("Gi", "GiB"), "")
    assert config.budget.memory is not None and config.budget.memory < limit
    assert config.metrics.port == container["ports"][0]["containerPort"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_keda_scales_the_deployment_on_the_fleet_need() -> None:
    (scaled,) = documents("keda-scaledobject.yaml")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1" and scaled["kind"] == "ScaledObject"
    deployment = by_kind(documents("deployment.yaml"), "Deployment")
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    metric = re.fullmatch(r'sum\((\w+)\{pool="(\w+)"\}\)', trigger["metadata"]["query"])
    assert metric is not None
    name, pool = metric.groups()
    assert pool in exported_metrics()[name]
    assert float(trigger["metadata"]["threshold"]) == 6  # the pool's max


def test_the_hpa_scales_the_deployment_on_the_same_metric() -> None:
    (hpa,) = documents("hpa.yaml")
    assert (hpa["apiVersion"], hpa["kind"]) == ("autoscaling/v2", "HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "pgq-supervisor")
    (metric,) = hpa["spec"]["metrics"]
    pods = metric["pods"]
    assert pods["metric"]["name"] in exported_metrics()
    assert pods["metric"]["selector"]["matchLabels"]["pool"] == "work"
    assert pods["target"] == {"type": "AverageValue", "averageValue": "6"}


def test_the_metrics_the_autoscalers_read_are_exported() -> None:
    metrics = exported_metrics()
    assert metrics["pgq_pool_need"] == {"work": 2.5}
    assert metrics["pgq_pool_desired"] == {"work": 3}


def test_a_growing_elastic_pool_stays_ready() -> None:
    growing = PoolView(processes=4, ready=1, queues=("q",), desired=4, minimum=1)
    fixed = PoolView(processes=4, ready=1, queues=("q",))
    views = [MasterView({"p": p}, (), MasterCounters(), True, False) for p in (growing, fixed)]
    snapshot = QueueSnapshot(queues=[], taken=0.0)
    assert readiness(views[0], snapshot, 0.0, 60.0) == []
    assert readiness(views[1], snapshot, 0.0, 60.0) == ["pool p: 1 of 4 children ready"]


def test_the_guide_shows_these_files() -> None:
    guide = (ROOT / "docs" / "how-to" / "kubernetes.md").read_text()
    for name in ("deployment.yaml", "keda-scaledobject.yaml", "hpa.yaml"):
        assert f'--8<-- "deploy/kubernetes/{name}"' in guide
