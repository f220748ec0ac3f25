"""The export commands in the checkout (fast; tests/test_packaging.py runs them from a built wheel):
bad names are refused with the choices, and the runbook links follow a configured base URL."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainguard import assets
from trainguard.cli import main
from trainguard.vocabulary import RUNBOOK, runbook_url


def test_rules_export_points_runbook_links_at_your_copy(tmp_path: Path) -> None:
    mine = "https://wiki.example.org/runbook"
    written = assets.export_rules("fast", tmp_path, runbook=mine)
    texts = "".join(p.read_text() for p in written)
    assert f"{mine}#trainguardloginfragpu" in texts
    assert RUNBOOK not in texts
    merged = yaml.safe_load(assets.merged_rules("production", mine))
    urls = {r["annotations"]["runbook_url"] for g in merged["groups"] for r in g["rules"] if "alert" in r}
    assert urls
    assert all(u.startswith(f"{mine}#") for u in urls)


def test_the_exporters_fast_path_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert runbook_url("TrainguardLogInfraGpu") == f"{RUNBOOK}#trainguardloginfragpu"
    monkeypatch.setenv("TRAINGUARD_RUNBOOK_URL", "https://wiki.example.org/rb")
    assert runbook_url("TrainguardLogInfraGpu") == "https://wiki.example.org/rb#trainguardloginfragpu"


def test_bad_names_are_refused_with_the_choices(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["config", "example", "prometheus", "--profile", "slow"]) == 2
    assert "unknown profile 'slow': one of production, fast" in capsys.readouterr().err
    assert main(["config", "example", "systemd"]) == 2
    assert "--out DIR is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["rules", "export", "--profile", "slow"])
    assert main(["config", "example", "file-sd", "--out", str(tmp_path / "t.json")]) == 0
    assert (tmp_path / "t.json").read_text().startswith("[")
