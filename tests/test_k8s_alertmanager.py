"""The Alertmanager snippet for the chart (``k8s/alertmanager-snippet.yaml``) matches what the chart serves.

Checked structurally here (no Helm needed), and by ``amtool check-config`` where the Debian package
prometheus-alertmanager is installed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.services import require_binary

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parent.parent


def test_snippet_routes_workload_alerts_to_the_chart_service_with_the_token_file() -> None:
    snippet: dict[str, Any] = yaml.safe_load((ROOT / "k8s" / "alertmanager-snippet.yaml").read_text())
    routes = snippet["route"]["routes"]
    assert routes[0]["receiver"] == "operators"  # the responder's own health never goes to the responder
    assert routes[1]["receiver"] == "trainguard-responder"
    receivers = {r["name"]: r for r in snippet["receivers"]}
    [webhook] = receivers["trainguard-responder"]["webhook_configs"]
    # release tg in namespace trainguard: <release>-trainguard.<namespace>.svc, port 9480 (values.yaml)
    assert webhook["url"] == "http://tg-trainguard.trainguard.svc:9480/v1/alerts"
    assert webhook["http_config"]["authorization"] == {
        "type": "Bearer",
        "credentials_file": "/etc/alertmanager/secrets/tg-trainguard-tokens/webhook-token",
    }
    values = yaml.safe_load((ROOT / "k8s" / "trainguard" / "values.yaml").read_text())
    assert values["service"]["port"] == 9480


def test_snippet_is_a_valid_alertmanager_config() -> None:
    amtool = require_binary("amtool")
    done = subprocess.run(
        [amtool, "check-config", str(ROOT / "k8s" / "alertmanager-snippet.yaml")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
