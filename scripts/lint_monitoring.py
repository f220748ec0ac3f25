"""Lint the monitoring configuration: rules, rule tests, Alertmanager and Prometheus examples, runbook.

Runs ``promtool check rules`` on every rule file, ``promtool test rules`` on every test file,
``amtool check-config`` on every Alertmanager example, ``promtool check config`` on every Prometheus
example, and checks that every alert carries the labels and annotations of docs/interfaces.md §3, links to its
own entry in ``docs/runbook.md``, and is tested at both edges (silent and firing). Exits non-zero
with one line per problem. Called by ``make lint``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainguard.vocabulary import CATEGORIES, SEVERITIES, runbook_anchor, runbook_url

ROOT = Path(__file__).resolve().parent.parent
ANNOTATIONS = ("summary", "description", "runbook_url")
INSTALL_HINT = "apt-get install prometheus prometheus-alertmanager"
TOOL_TIMEOUT_S = 120


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    file: Path
    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass
class Coverage:
    """For one alert: whether some test expects it silent, and whether some test expects it firing."""

    silent: bool = False
    firing: bool = False


@dataclass(frozen=True, slots=True)
class Layout:
    root: Path

    @property
    def rules_dir(self) -> Path:
        return self.root / "alert_rules"

    def rule_files(self) -> list[Path]:
        return sorted(self.rules_dir.glob("*.yml")) + sorted((self.rules_dir / "profiles").glob("*.yml"))

    def test_files(self) -> list[Path]:
        return sorted((self.rules_dir / "tests").glob("*.yml"))

    def alertmanager_files(self) -> list[Path]:
        return sorted((self.rules_dir / "alertmanager").glob("*.yml"))

    def prometheus_files(self) -> list[Path]:
        return sorted((self.rules_dir / "prometheus").glob("*.yml"))

    @property
    def runbook(self) -> Path:
        return self.root / "docs" / "runbook.md"


def _load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def load_alerts(layout: Layout) -> list[Alert]:
    alerts = []
    for path in layout.rule_files():
        doc = _load_yaml(path) or {}
        for group in doc.get("groups", []):
            for rule in group.get("rules", []):
                if "alert" in rule:
                    alerts.append(
                        Alert(
                            name=str(rule["alert"]),
                            file=path,
                            labels={str(k): str(v) for k, v in (rule.get("labels") or {}).items()},
                            annotations={str(k): str(v) for k, v in (rule.get("annotations") or {}).items()},
                        )
                    )
    return alerts


def load_coverage(layout: Layout) -> dict[str, Coverage]:
    coverage: dict[str, Coverage] = {}
    for path in layout.test_files():
        doc = _load_yaml(path) or {}
        for test in doc.get("tests", []):
            for case in test.get("alert_rule_test", []) or []:
                entry = coverage.setdefault(str(case["alertname"]), Coverage())
                if case.get("exp_alerts"):
                    entry.firing = True
                else:
                    entry.silent = True
    return coverage


def check_eval_order(layout: Layout) -> list[str]:
    """Test files that load several rule groups must list them all in ``group_eval_order``.

    promtool evaluates unlisted groups in random order (and before listed ones), so an alert that reads
    a recording rule would pass or fail at its edges by chance.
    """
    problems = []
    for path in layout.test_files():
        doc = _load_yaml(path) or {}
        groups: list[str] = []
        for rel in doc.get("rule_files", []):
            for rule_file in sorted(path.parent.glob(rel)):
                groups += [str(g["name"]) for g in (_load_yaml(rule_file) or {}).get("groups", [])]
        missing = [g for g in groups if g not in (doc.get("group_eval_order") or [])]
        if len(groups) > 1 and missing:
            problems.append(
                f"{path.relative_to(layout.root)}: group_eval_order must list every rule group it loads "
                f"(missing {missing}); promtool otherwise evaluates them in random order"
            )
    return problems


def runbook_anchors(layout: Layout) -> set[str]:
    if not layout.runbook.exists():
        return set()
    text = layout.runbook.read_text(encoding="utf-8")
    return {m.group(1).strip().lower() for m in re.finditer(r"^#{2,3}\s+(\S+)\s*$", text, re.MULTILINE)}


def check_alerts(layout: Layout) -> list[str]:
    """Metadata, runbook and test-coverage problems, one message each."""
    problems: list[str] = []
    alerts = load_alerts(layout)
    if not alerts:
        return [f"no alert rules found under {layout.rules_dir}"]
    coverage = load_coverage(layout)
    anchors = runbook_anchors(layout)
    seen: dict[str, Path] = {}
    for alert in alerts:
        where = f"{alert.file.relative_to(layout.root)}: {alert.name}"
        if alert.name in seen:
            problems.append(f"{where}: alert name also defined in {seen[alert.name].name}")
        seen[alert.name] = alert.file
        if not alert.name.startswith("Trainguard"):
            problems.append(f"{where}: alert names start with 'Trainguard'")
        category = alert.labels.get("category")
        if category not in CATEGORIES:
            problems.append(f"{where}: label category={category!r} is not one of {sorted(CATEGORIES)}")
        severity = alert.labels.get("severity")
        if severity not in SEVERITIES:
            problems.append(f"{where}: label severity={severity!r} is not one of {sorted(SEVERITIES)}")
        for key in ANNOTATIONS:
            if not alert.annotations.get(key):
                problems.append(f"{where}: annotation {key} is missing")
        url = alert.annotations.get("runbook_url")
        if url and url != runbook_url(alert.name):
            problems.append(f"{where}: runbook_url is {url!r}, expected {runbook_url(alert.name)!r}")
        if runbook_anchor(alert.name) not in anchors:
            problems.append(f"{where}: no entry '## {alert.name}' in {layout.runbook.relative_to(layout.root)}")
        cov = coverage.get(alert.name)
        if cov is None:
            problems.append(f"{where}: no promtool test in alert_rules/tests/")
        else:
            if not cov.firing:
                problems.append(f"{where}: no test expects it firing (exp_alerts with labels and annotations)")
            if not cov.silent:
                problems.append(f"{where}: no test expects it silent (just before its threshold or for:)")
    for name in sorted(set(coverage) - set(seen)):
        problems.append(f"alert_rules/tests: tests name alert {name!r}, which no rule file defines")
    return problems + check_eval_order(layout)


def find_tool(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if Path(p).exists()), None)


def run_tool(argv: list[str], cwd: Path) -> tuple[bool, str]:
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TOOL_TIMEOUT_S}s"
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def check_tools(layout: Layout, find: Callable[[str], str | None] = find_tool) -> list[str]:
    """Run promtool and amtool over every file; a message (with the tool's output) per failure."""
    promtool, amtool = find("promtool"), find("amtool")
    missing = [n for n, p in (("promtool", promtool), ("amtool", amtool)) if p is None]
    if missing or promtool is None or amtool is None:
        return [f"{', '.join(missing)} not found: {INSTALL_HINT}"]
    jobs: list[tuple[str, list[str], Path]] = []
    jobs += [("promtool check rules", [promtool, "check", "rules", str(p)], p) for p in layout.rule_files()]
    jobs += [("promtool test rules", [promtool, "test", "rules", p.name], p) for p in layout.test_files()]
    jobs += [("amtool check-config", [amtool, "check-config", str(p)], p) for p in layout.alertmanager_files()]
    jobs += [("promtool check config", [promtool, "check", "config", str(p)], p) for p in layout.prometheus_files()]
    for label, files in (
        ("rule files", layout.rule_files()),
        ("rule test files", layout.test_files()),
        ("Alertmanager configs", layout.alertmanager_files()),
        ("Prometheus configs", layout.prometheus_files()),
    ):
        if not files:
            jobs.append((f"no {label} found", [], layout.rules_dir))
    problems = []
    for what, argv, path in jobs:
        if not argv:
            problems.append(f"{what} under {layout.rules_dir.relative_to(layout.root)}")
            continue
        ok, output = run_tool(argv, cwd=path.parent)
        if not ok:
            indented = "\n".join("    " + line for line in output.splitlines())
            problems.append(f"{what} {path.relative_to(layout.root)} failed:\n{indented}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    layout = Layout(args.root.resolve())
    problems = check_tools(layout) + check_alerts(layout)
    if problems:
        for problem in problems:
            print(f"lint_monitoring: {problem}", file=sys.stderr)
        print(f"lint_monitoring: FAILED, {len(problems)} problem(s)", file=sys.stderr)
        return 1
    n_alerts = len(load_alerts(layout))
    print(
        f"lint_monitoring: OK: {len(layout.rule_files())} rule files, {n_alerts} alerts, "
        f"{len(layout.test_files())} test files, {len(layout.alertmanager_files())} Alertmanager and "
        f"{len(layout.prometheus_files())} Prometheus configs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
