"""The chart as published (issue 14): ``helm package`` makes a ``.tgz`` with the rules inside (no
symlink left), which renders on its own and is checked against ``values.schema.json``; /dev/kmsg is an
explicit, privileged opt-in; DCGM gets a ServiceMonitor. A real Helm engine (helm-python-sdk)."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fake_k8s import require_module

helm = require_module("helm_python", "helm-python-sdk (Helm's engine, no binary needed)")

pytestmark = pytest.mark.k8s

CHART = Path(__file__).resolve().parent.parent / "k8s" / "trainguard"


@pytest.fixture(scope="module")
def tgz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packaged chart, moved away from the checkout."""
    built = Path(helm.package(str(CHART), destination=str(tmp_path_factory.mktemp("pkg"))))
    alone = tmp_path_factory.mktemp("elsewhere") / built.name
    shutil.move(built, alone)
    return alone


def render(chart: Path, values: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    with helm.Chart.load(str(chart)) as loaded:
        files: dict[str, str] = loaded.render(values or {}, name="tg", namespace="trainguard", is_install=True)
    objects: dict[str, list[dict[str, Any]]] = {}
    for path, text in files.items():
        if not path.endswith("NOTES.txt"):
            for doc in yaml.safe_load_all(text):
                if doc:
                    objects.setdefault(doc["kind"], []).append(doc)
    return objects


def exporter(objects: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    [ds] = objects["DaemonSet"]
    return dict(ds["spec"]["template"]["spec"])


def test_the_package_carries_real_rule_files_and_the_schema(tgz: Path) -> None:
    with tarfile.open(tgz) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "trainguard/values.schema.json" in members
    rules = members["trainguard/rules/log_patterns.yml"]
    assert rules.isfile(), "the rules symlink is resolved into files"


def test_the_package_renders_without_the_checkout(tgz: Path) -> None:
    objects = render(tgz)
    [rule] = objects["PrometheusRule"]
    names = {g["name"] for g in rule["spec"]["groups"]}
    assert "trainguard-log-patterns" in names
    assert "DaemonSet" in objects


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"exporter": {"port": "9481"}}, "/exporter/port"),
        ({"exporter": {"prot": 1}}, "prot"),
        ({"responder": {"replicas": 17}}, "/responder/replicas"),
        ({"database": {"url": "postgresql://u:pw@db/tg"}}, "/database/url"),
        ({"monitoring": {"prometheusRule": {"profile": "slow"}}}, "/monitoring/prometheusRule/profile"),
        ({"clusters": {"k8s": {"mode": "yolo"}}}, "/clusters/k8s/mode"),
    ],
)
def test_values_are_checked_against_the_schema(tgz: Path, values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmError) as err:
        render(tgz, values)
    assert where in str(err.value)


def test_kmsg_is_off_by_default_and_needs_the_privilege_switch(tgz: Path) -> None:
    spec = exporter(render(tgz))
    [container] = spec["containers"]
    assert not any(a.startswith("--kernel-log") for a in container["args"])
    assert container["securityContext"].get("privileged") is not True
    assert "kmsg" not in {v["name"] for v in spec["volumes"]}
    with pytest.raises(helm.HelmError) as err:
        render(tgz, {"exporter": {"kmsg": {"enabled": True}}})
    assert "needs exporter.privileged=true" in str(err.value)
    spec = exporter(render(tgz, {"exporter": {"kmsg": {"enabled": True}, "privileged": True}}))
    [container] = spec["containers"]
    assert "--kernel-log=/dev/kmsg" in container["args"]
    assert container["securityContext"]["privileged"] is True
    assert {"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True} in container["volumeMounts"]
    assert {"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}} in spec["volumes"]


def test_dcgm_exporter_gets_a_service_monitor_when_asked(tgz: Path) -> None:
    assert all(m["metadata"]["name"] != "tg-trainguard-dcgm" for m in render(tgz)["ServiceMonitor"])
    values = {"dcgm": {"serviceMonitor": {"enabled": True, "namespace": "gpu", "selector": {"app": "dcgm"}}}}
    [dcgm] = [m for m in render(tgz, values)["ServiceMonitor"] if m["metadata"]["name"] == "tg-trainguard-dcgm"]
    assert dcgm["spec"]["namespaceSelector"] == {"matchNames": ["gpu"]}
    assert dcgm["spec"]["selector"] == {"matchLabels": {"app": "dcgm"}}


def test_the_schema_is_valid_json_with_the_values_keys() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"])
