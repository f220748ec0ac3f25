"""Alert rules: promtool checks and unit tests, and the contract every alert must keep.

The promtool and amtool runs need the Debian packages (marker ``prometheus``); the metadata checks
read YAML only and run everywhere. scripts/lint_monitoring.py applies the same checks in ``make lint``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.services import require_binary
from trainguard.vocabulary import CATEGORIES

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "alert_rules"
RULE_FILES = sorted(RULES.glob("*.yml")) + sorted((RULES / "profiles").glob("*.yml"))
TEST_FILES = sorted((RULES / "tests").glob("*.yml"))


def _load_lint() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lint_monitoring", ROOT / "scripts" / "lint_monitoring.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


LINT = _load_lint()


def _alerts() -> list[dict[str, Any]]:
    alerts = []
    for path in RULE_FILES:
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            alerts += [dict(rule, file=path.name) for rule in group["rules"] if "alert" in rule]
    return alerts


ALERTS = _alerts()


def test_rule_files_exist_per_failure_domain() -> None:
    names = {p.name for p in RULE_FILES}
    for expected in (
        "recording.yml",
        "training_progress.yml",
        "log_patterns.yml",
        "gpu_health.yml",
        "nodes.yml",
        "checkpoints.yml",
        "responder.yml",
    ):
        assert expected in names
    recording = yaml.safe_load((RULES / "recording.yml").read_text())
    assert all("record" in rule for g in recording["groups"] for rule in g["rules"]), "recording.yml: no alerts"


@pytest.mark.parametrize("alert", ALERTS, ids=[a["alert"] for a in ALERTS])
def test_alert_carries_contract_labels_and_annotations(alert: dict[str, Any]) -> None:
    assert alert["alert"].startswith("Trainguard")
    assert alert["labels"]["category"] in CATEGORIES
    assert alert["labels"]["severity"] in {"critical", "warning", "info"}
    for key in ("summary", "description", "runbook_url"):
        assert alert["annotations"].get(key), f"{alert['alert']}: annotation {key} missing"
    assert alert["annotations"]["runbook_url"] == LINT.runbook_url(alert["alert"])


def test_every_alert_has_runbook_entry_and_tests_at_both_edges() -> None:
    assert LINT.check_alerts(LINT.Layout(ROOT)) == []


def test_lint_reports_missing_runbook_entry_and_test(tmp_path: Path) -> None:
    (tmp_path / "alert_rules" / "tests").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "runbook.md").write_text("# runbook\n")
    rule = {
        "alert": "TrainguardExample",
        "expr": "vector(1)",
        "labels": {"category": "bogus", "severity": "critical"},
        "annotations": {"summary": "s", "description": "d", "runbook_url": LINT.runbook_url("TrainguardExample")},
    }
    (tmp_path / "alert_rules" / "x.yml").write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [rule]}]}))
    (tmp_path / "alert_rules" / "y.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "h", "rules": [{"record": "r", "expr": "vector(1)"}]}]})
    )
    (tmp_path / "alert_rules" / "tests" / "x_test.yml").write_text(
        yaml.safe_dump({"rule_files": ["../x.yml", "../y.yml"], "tests": []})
    )
    problems = LINT.check_alerts(LINT.Layout(tmp_path))
    text = "\n".join(problems)
    assert "category='bogus'" in text
    assert "no entry '## TrainguardExample'" in text
    assert "no promtool test" in text
    assert "group_eval_order must list every rule group it loads (missing ['g', 'h'])" in text


@pytest.mark.prometheus
@pytest.mark.parametrize("path", RULE_FILES, ids=[p.name for p in RULE_FILES])
def test_promtool_check_rules(path: Path) -> None:
    promtool = require_binary("promtool")
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.prometheus
def test_promtool_test_rules() -> None:
    promtool = require_binary("promtool")
    proc = subprocess.run(
        [promtool, "test", "rules", *(p.name for p in TEST_FILES)],
        cwd=RULES / "tests",
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.prometheus
def test_promtool_test_rules_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    """Guard against a vacuous suite: a wrong label in an expectation must fail promtool."""
    promtool = require_binary("promtool")
    original = (RULES / "tests" / "log_patterns_test.yml").read_text()
    broken = original.replace("severity: warning, pattern: cuda_oom", "severity: critical, pattern: cuda_oom", 1)
    assert broken != original
    test_file = tmp_path / "broken_test.yml"
    test_file.write_text(broken.replace("- ../", f"- {RULES}/"))
    proc = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "FAILED" in proc.stdout + proc.stderr


@pytest.mark.prometheus
def test_lint_monitoring_script_passes() -> None:
    require_binary("promtool")
    require_binary("amtool")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lint_monitoring.py")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(ALERTS)} alerts" in proc.stdout


def test_lint_monitoring_fails_clearly_without_promtool() -> None:
    problems = LINT.check_tools(LINT.Layout(ROOT), find=lambda name: None)
    assert problems == ["promtool, amtool not found: apt-get install prometheus prometheus-alertmanager"]
