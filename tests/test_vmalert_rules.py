"""vmalert (Debian ``victoria-metrics``) accepts the same rule files Prometheus loads, per profile.

docs/scale.md offers VictoriaMetrics with vmalert as the engine beyond one Prometheus; this keeps
that claim checked: MetricsQL must parse every expression and template of both profiles.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.services import require_binary
from trainguard.lab.stack import PROFILES, rule_files

pytestmark = pytest.mark.prometheus


@pytest.mark.parametrize("profile", PROFILES)
def test_vmalert_dry_run_accepts_the_profile_rule_files(profile: str) -> None:
    vmalert = require_binary("vmalert")
    proc = subprocess.run(
        [vmalert, "-dryRun", f"-rule={','.join(rule_files(profile))}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_vmalert_dry_run_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The check can fail: a rule vmalert cannot parse is reported with a non-zero exit."""
    vmalert = require_binary("vmalert")
    broken = tmp_path / "broken.yml"
    broken.write_text("groups:\n- name: x\n  rules:\n  - alert: X\n    expr: sum(rate(foo[1m]) by\n")
    proc = subprocess.run(
        [vmalert, "-dryRun", f"-rule={broken}"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode != 0
