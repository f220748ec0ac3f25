"""The lab's entry points answer --help (`make demo` runs scripts/lab/demo.py, `make bench` bench/lab.py):
a script that no longer imports or parses its options fails here, not in front of a new user."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("script", "option"), [("scripts/lab/demo.py", "--fault"), ("bench/lab.py", "--corpus")])
def test_lab_script_explains_itself(script: str, option: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert option in done.stdout
    assert "corpus" in done.stdout
