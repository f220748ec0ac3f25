"""The Helm chart ``k8s/trainguard``, linted and rendered by a real Helm engine.

The engine is Helm's own Go SDK (v4), bundled in the PyPI package ``helm-python-sdk`` (import
``helm_python``): no ``helm`` binary is needed. Where it is not installed, these tests skip; the
RBAC rule files are still checked against the adapters without it (``tests/test_k8s_rbac.py``).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from responder.schedulers.kubernetes.api import PERMISSIONS
from responder.schedulers.kubernetes.jobset import JobSetSettings
from responder.schedulers.kubernetes.pytorchjob import PyTorchJobSettings
from responder.settings import Settings
from tests.fake_k8s import require_module

helm = require_module("helm_python", "helm-python-sdk (Helm's engine, no binary needed)")

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "k8s" / "trainguard"
RULES = ROOT / "alert_rules"


def render(values: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Rendered objects by kind (NOTES.txt under the key 'NOTES')."""
    with helm.Chart.load(str(CHART)) as chart:
        files: dict[str, str] = chart.render(values or {}, name="tg", namespace="trainguard", is_install=True)
    objects: dict[str, list[dict[str, Any]]] = {}
    for path, text in files.items():
        if path.endswith("NOTES.txt"):
            objects["NOTES"] = [{"text": text}]
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.setdefault(doc["kind"], []).append(doc)
    return objects


def one(objects: dict[str, list[dict[str, Any]]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects.get(kind, []) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {[o['metadata']['name'] for o in objects.get(kind, [])]}"
    return found[0]


def granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }


def test_helm_lint_is_clean() -> None:
    result = helm.lint(str(CHART), strict=True, namespace="trainguard")
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] > 1] == []  # info only (no icon)


def test_default_render_has_every_part() -> None:
    objects = render()
    kinds = {kind: sorted(o["metadata"]["name"] for o in objs) for kind, objs in objects.items() if kind != "NOTES"}
    assert kinds == {
        "ConfigMap": ["tg-trainguard"],
        "Secret": ["tg-trainguard-tokens"],
        "ServiceAccount": ["tg-trainguard"],
        "ClusterRole": ["tg-trainguard"],
        "ClusterRoleBinding": ["tg-trainguard"],
        "PersistentVolumeClaim": ["tg-trainguard-data"],
        "Deployment": ["tg-trainguard"],
        "Service": ["tg-trainguard", "tg-trainguard-exporter"],
        "DaemonSet": ["tg-trainguard-exporter"],
        "ServiceMonitor": ["tg-trainguard", "tg-trainguard-exporter"],
        "PrometheusRule": ["tg-trainguard"],
        "NetworkPolicy": ["tg-trainguard", "tg-trainguard-exporter"],
    }


def test_responder_deployment_runs_non_root_with_probes() -> None:
    objects = render()
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "trainguard:0.1.0"
    assert container["args"] == ["serve", "--config", "/etc/trainguard/config.yaml"]
    assert container["ports"] == [{"name": "http", "containerPort": 9480, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "tg-trainguard-data"}
    assert volumes["tokens"]["secret"]["secretName"] == "tg-trainguard-tokens"
    assert pod["serviceAccountName"] == "tg-trainguard"
    service = one(objects, "Service", "tg-trainguard")
    assert service["spec"]["ports"][0]["port"] == 9480


def test_the_rendered_config_is_a_valid_responder_config() -> None:
    objects = render(
        {
            "clusters": {
                "k8s": None,
                "prod": {"mode": "act", "nodes": 512, "scheduler": {"kind": "jobset", "stop_mode": "delete"}},
                "research": {"scheduler": {"kind": "pytorchjob", "verify_timeout_s": 60}, "policy": {"app": "stop"}},
            },
            "responder": {"prometheusUrl": "http://prometheus:9090", "config": {"correlation_window_s": 2.0}},
        }
    )
    config = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])
    assert config["webhook_token_file"] == "/etc/trainguard/tokens/webhook-token"
    assert config["correlation_window_s"] == 2.0
    prod = dict(config["clusters"]["prod"]["scheduler"])
    research = dict(config["clusters"]["research"]["scheduler"])
    assert prod == {"kind": "jobset", "stop_mode": "delete", "in_cluster": True, "cluster": "prod"}
    assert prod.pop("kind") == "jobset"
    assert JobSetSettings(**prod).stop_mode == "delete"
    assert research.pop("kind") == "pytorchjob"
    assert PyTorchJobSettings(**research).verify_timeout_s == 60
    settings = Settings(**{k: v for k, v in config.items() if not k.endswith("token_file")})
    assert settings.clusters["prod"].mode == "act"
    assert settings.clusters["prod"].nodes == 512
    assert settings.prometheus_url == "http://prometheus:9090"


def test_cluster_role_grants_exactly_what_the_adapters_use() -> None:
    jobset_only = granted(one(render(), "ClusterRole"))
    both = granted(
        one(
            render(
                {"clusters": {"k8s": {"scheduler": {"kind": "jobset"}}, "b": {"scheduler": {"kind": "pytorchjob"}}}}
            ),
            "ClusterRole",
        )
    )
    assert both == PERMISSIONS
    assert ("kubeflow.org", "pytorchjobs", "get") not in jobset_only
    assert ("", "pods", "delete") not in jobset_only  # only the PyTorchJob restart deletes pods
    binding = one(render(), "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tg-trainguard", "namespace": "trainguard"}]


def test_no_kubernetes_scheduler_means_no_cluster_role_and_no_token() -> None:
    # null removes the chart's default cluster `k8s` (Helm merges user values into the defaults)
    objects = render({"clusters": {"k8s": None, "lab": {"scheduler": {"kind": "slurm", "transport": "ssh"}}}})
    assert "ClusterRole" not in objects
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False


def test_exporter_daemonset() -> None:
    daemonset = one(render({"exporter": {"cluster": "prod"}}), "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"][:4] == ["exporter", "--listen=0.0.0.0", "--port=9481", "--progress-dir=/run/trainguard"]
    assert "--log=/var/log/trainguard/**/*.log" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["TRAINGUARD_CLUSTER"]["value"] == "prod"
    assert env["TRAINGUARD_NODE"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {"logs": "/var/log/trainguard", "progress": "/run/trainguard"}
    assert all(m.get("readOnly") for m in container["volumeMounts"] if m["name"] in host_paths)
    assert pod["tolerations"] == [{"operator": "Exists"}]  # keeps running on isolated nodes
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_prometheus_rule_carries_the_repository_rules_unchanged() -> None:
    rule = one(render({"monitoring": {"prometheusRule": {"profile": "fast"}}}), "PrometheusRule")
    expected: list[dict[str, Any]] = []
    for path in sorted(RULES.glob("*.yml")):
        expected.extend(yaml.safe_load(path.read_text())["groups"])
    expected.extend(yaml.safe_load((RULES / "profiles" / "fast.yml").read_text())["groups"])
    assert rule["spec"]["groups"] == expected  # {{ $labels.x }} in annotations passed through, not evaluated


def test_alertmanager_config_points_at_the_responder_with_the_token() -> None:
    objects = render({"monitoring": {"alertmanagerConfig": {"enabled": True}}})
    config = one(objects, "AlertmanagerConfig")
    [webhook] = config["spec"]["receivers"][0]["webhookConfigs"]
    assert webhook["url"] == "http://tg-trainguard.trainguard.svc:9480/v1/alerts"
    assert webhook["httpConfig"]["authorization"]["credentials"] == {
        "name": "tg-trainguard-tokens",
        "key": "webhook-token",
    }
    notes = objects["NOTES"][0]["text"]
    assert "url: http://tg-trainguard.trainguard.svc:9480/v1/alerts" in notes


def test_given_tokens_are_stored_and_an_existing_secret_is_used_as_is() -> None:
    secret = one(render({"auth": {"webhookToken": "w" * 32, "operatorToken": "o" * 32}}), "Secret")
    assert base64.b64decode(secret["data"]["webhook-token"]) == b"w" * 32
    assert base64.b64decode(secret["data"]["operator-token"]) == b"o" * 32
    generated = one(render(), "Secret")
    assert len(base64.b64decode(generated["data"]["webhook-token"])) == 48
    objects = render({"auth": {"existingSecret": "mine"}})
    assert "Secret" not in objects
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tokens", "secret": {"secretName": "mine", "defaultMode": 0o400}} in volumes


def test_network_policy_limits_ingress_and_egress() -> None:
    policy = one(render(), "NetworkPolicy", "tg-trainguard")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    [ingress] = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert ingress["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == {53, 443, 6443}


def test_monitoring_objects_can_be_switched_off() -> None:
    objects = render(
        {
            "monitoring": {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}},
            "persistence": {"enabled": False},
            "networkPolicy": {"enabled": False},
            "exporter": {"enabled": False},
        }
    )
    assert not {"ServiceMonitor", "PrometheusRule", "PersistentVolumeClaim", "NetworkPolicy", "DaemonSet"} & set(
        objects
    )
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "emptyDir": {}} in volumes


def test_packaged_chart_carries_the_rule_files_not_their_tests(tmp_path: Path) -> None:
    import tarfile  # noqa: PLC0415

    archive = helm.package(str(CHART), destination=str(tmp_path))
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    rules = {n for n in names if n.startswith("trainguard/rules/")}
    assert {f"trainguard/rules/{p.name}" for p in RULES.glob("*.yml")} <= rules
    assert "trainguard/rules/profiles/production.yml" in rules
    assert not any("/tests/" in n or "/alertmanager/" in n or "/prometheus/" in n for n in rules)
    assert "trainguard/files/rbac/jobset.yaml" in names


def test_replicas_on_postgresql_share_the_store_and_roll() -> None:
    objects = render(
        {
            "responder": {"replicas": 3},
            "database": {"url": "postgresql://trainguard@db.internal:5432/trainguard", "passwordSecret": "tg-db"},
        }
    )
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate"}
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["env"] == [
        {"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "tg-db", "key": "password"}}}
    ]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {}}
    assert "PersistentVolumeClaim" not in objects  # SQLite's volume is not needed
    config = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])
    settings = Settings.model_validate(config)
    assert settings.store.url == "postgresql://trainguard@db.internal:5432/trainguard"
    assert "PostgreSQL" in objects["NOTES"][0]["text"]


def test_sqlite_refuses_a_second_replica_and_a_password_in_the_url() -> None:
    with pytest.raises(Exception, match=r"responder.replicas > 1 needs database.url"):
        render({"responder": {"replicas": 2}})
    with pytest.raises(Exception, match=r"database"):
        render({"database": {"url": "postgresql://trainguard:secret@db:5432/trainguard"}})
    default = one(render(), "Deployment")
    assert default["spec"]["strategy"] == {"type": "Recreate"}
    assert "env" not in default["spec"]["template"]["spec"]["containers"][0]
