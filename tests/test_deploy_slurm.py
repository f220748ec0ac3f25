"""docs/deploy-slurm.md, checked: the Alertmanager sub-route merged into an existing tree routes what it
should (real amtool), and the walkthrough's commands run as written (tests/test_deploy_walkthrough.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.services import unavailable

SUBROUTE = Path(__file__).resolve().parents[1] / "slurm" / "deploy" / "alertmanager-subroute.yml"

# labels of an alert -> the receivers it must reach, in order
ROUTES = [
    # a workload's fault: the responder (and nothing of the team's tree matches it)
    ("alertname=TrainguardLogInfraGpu cluster=lab workload=7 attempt=0 host=n2 pattern=xid_79_fallen_off_bus",
     "trainguard-responder"),
    # continue: true, so a team route that matches it still gets it
    ("alertname=TrainguardLogInfraGpu cluster=lab workload=7 team=storage", "trainguard-responder,storage-team"),
    # the responder's own health: people, never the responder
    ("alertname=TrainguardResponderDown cluster=lab workload=7", "team-pager"),
    ("alertname=TrainguardAlertDeliveryFailing instance=am:9093", "team-pager"),
    # a node-level alert on an idle node (no workload) and the team's own alerts: the tree as before
    ("alertname=TrainguardLogInfraGpu cluster=lab host=n3", "team-pager"),
    ("alertname=DiskFull team=storage", "storage-team"),
    ("alertname=SomethingElse workload=7", "team-pager"),
]  # fmt: skip


@pytest.mark.prometheus
def test_the_subroute_routes_trainguard_alerts_and_leaves_the_tree_alone() -> None:
    if shutil.which("amtool") is None:
        unavailable("amtool (Debian prometheus-alertmanager)")
    check = subprocess.run(["amtool", "check-config", str(SUBROUTE)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    for labels, receivers in ROUTES:
        out = subprocess.run(
            ["amtool", "config", "routes", "test", f"--config.file={SUBROUTE}", f"--verify.receivers={receivers}",
             *labels.split()],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert out.returncode == 0, f"{labels}: expected {receivers}, got {out.stdout.strip()}"
        assert out.stdout.strip() == receivers
