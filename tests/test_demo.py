"""`make demo` runs the bundled incidents through a real server and checks every expected decision."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_runs_every_scene_as_expected() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py")], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all scenes went as expected" in result.stdout
    assert "requeue_excluding gpu-003" in result.stdout
    assert "refused" in result.stdout
    # a re-send is the very same notification: every alert of the first re-send is a duplicate already
    resends = [line for line in result.stdout.splitlines() if "recognised as duplicates" in line]
    assert resends
    assert all(line.split("re-sends ")[1].split()[0] == line.split(": ")[1].split()[0] for line in resends), resends
