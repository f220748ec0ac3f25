"""The published artifacts (issue 14): ``python -m build`` makes a wheel and an sdist that carry what a
deployment needs, and the wheel, installed into a clean virtualenv outside the checkout, exports the
rules, dashboards, examples and systemd units that promtool, amtool and systemd-analyze accept."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.services import unavailable

ROOT = Path(__file__).resolve().parents[1]


def _run(*argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=600, check=False)
    assert out.returncode == 0, f"{argv}: {out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh venv with only the wheel (and its dependencies, pinned), used from a folder that is not
    the checkout: nothing can come from the source tree."""
    where = tmp_path_factory.mktemp("clean")
    venv = where / "venv"
    _run(sys.executable, "-m", "venv", venv)
    [wheel] = dist.glob("*.whl")
    _run(venv / "bin" / "pip", "install", "--quiet", "-c", ROOT / "constraints.txt", wheel)
    work = where / "deploy"
    work.mkdir()
    return venv / "bin" / "trainguard", work


def test_the_wheel_and_sdist_carry_the_deployment_files(dist: Path) -> None:
    [wheel] = dist.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "exporters/patterns.csv", "exporters/xid_catalog.csv", "responder/templates/base.html",
        "trainguard/_assets/alert_rules/log_patterns.yml", "trainguard/_assets/alert_rules/profiles/production.yml",
        "trainguard/_assets/alert_rules/alertmanager/production.yml", "trainguard/_assets/dashboards/json/fleet.json",
        "trainguard/_assets/dashboards/provisioning/datasources/trainguard.yaml",
        "trainguard/_assets/slurm/systemd/trainguard-exporter.service", "trainguard/_assets/slurm/prolog.sh",
        "trainguard/_assets/slurm/deploy/alertmanager-subroute.yml",
    ):  # fmt: skip
        assert needed in names, needed
    [sdist] = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    assert {"setup.py", "constraints.txt", "alert_rules/responder.yml", "slurm/epilog.sh"} <= members


def test_the_installed_wheel_exports_what_promtool_and_amtool_accept(installed: tuple[Path, Path]) -> None:
    trainguard, work = installed
    if shutil.which("promtool") is None or shutil.which("amtool") is None:
        unavailable("promtool/amtool (Debian prometheus, prometheus-alertmanager)")
    merged = _run(trainguard, "rules", "export", "--profile", "production", cwd=work).stdout
    (work / "merged.yml").write_text(merged)
    assert "SUCCESS" in _run("promtool", "check", "rules", work / "merged.yml").stdout
    written = _run(trainguard, "rules", "export", "--profile", "fast", "--out", work / "rules", cwd=work).stdout
    assert str(work / "rules" / "trainguard-profile.yml") in written
    prom = _run(
        trainguard, "config", "example", "prometheus", "--profile", "fast", "--rules-dir", work / "rules"
    ).stdout
    (work / "prometheus.yml").write_text(prom)
    _run("promtool", "check", "config", "--syntax-only", work / "prometheus.yml")
    _run("promtool", "check", "rules", *sorted((work / "rules").glob("*.yml")))
    for name in ("alertmanager", "alertmanager-subroute"):
        text = _run(trainguard, "config", "example", name, "--out", work / f"{name}.yml").stdout
        assert text.strip() == str(work / f"{name}.yml")
        _run("amtool", "check-config", work / f"{name}.yml")


def test_the_installed_wheel_exports_dashboards_examples_and_units(installed: tuple[Path, Path]) -> None:
    trainguard, work = installed
    _run(trainguard, "dashboards", "export", work / "grafana", cwd=work)
    boards = sorted(p.name for p in (work / "grafana" / "json").glob("*.json"))
    assert boards == ["decisions.json", "fleet.json", "workload.json"]
    assert json.loads((work / "grafana" / "json" / "fleet.json").read_text())["uid"]
    assert (work / "grafana" / "provisioning" / "dashboards" / "trainguard.yaml").is_file()
    assert "kind: slurm" in _run(trainguard, "config", "example", "responder").stdout
    assert json.loads(_run(trainguard, "config", "example", "file-sd").stdout)[0]["targets"] == ["gpu-001:9481"]
    units = work / "units"
    _run(trainguard, "config", "example", "systemd", "--out", units)
    exporter = (units / "trainguard-exporter.service").read_text()
    assert f"ExecStart={trainguard} exporter" in exporter, "ExecStart names the venv that exported the units"
    bad = subprocess.run([trainguard, "config", "example", "nosuch"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert "unknown example 'nosuch'" in bad.stderr


def test_the_units_pass_systemd_analyze_verify(installed: tuple[Path, Path]) -> None:
    trainguard, work = installed
    if shutil.which("systemd-analyze") is None:
        unavailable("systemd-analyze (Debian systemd)")
    units = work / "verify-units"
    _run(trainguard, "config", "example", "systemd", "--out", units)
    out = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *sorted(str(p) for p in units.iterdir())],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    problems = [line for line in out.stderr.splitlines() if "trainguard" in line]
    assert out.returncode == 0, out.stderr
    assert problems == [], problems
