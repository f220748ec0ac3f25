"""docs/deploy-slurm.md, walked: every ``sh`` block of the page that is not marked for the real machine
runs as written (PREFIX = a scratch folder), from the wheel that ``python -m build`` makes. Then the
responder starts from that virtualenv with the configuration those steps wrote, and answers with the
tokens they made. The page and the code cannot drift apart without this test failing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.services import unavailable
from trainguard.lab.common import free_port, poll
from trainguard.lab.payloads import nccl_storm_with_xid

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "deploy-slurm.md"
REAL_MACHINE = "# as root on the real machine"


def steps(page: str) -> list[str]:
    """The page's ``sh`` blocks, in order, without those meant only for the real machine."""
    blocks = re.findall(r"^```sh\n(.*?)^```$", page, flags=re.DOTALL | re.MULTILINE)
    return [b for b in blocks if not b.startswith(REAL_MACHINE)]


def test_the_page_has_the_steps_the_walkthrough_runs() -> None:
    names = [b.splitlines()[0] for b in steps(PAGE.read_text())]
    expected = ("variables", "install", "configure", "units", "exporter", "prometheus", "alertmanager")
    assert names == [f"# step: {n}" for n in expected]


def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    for tool in ("promtool", "amtool", "systemd-analyze"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} (Debian prometheus, prometheus-alertmanager, systemd)")
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(dist), str(ROOT)]
    subprocess.run(build, capture_output=True, check=True, timeout=300)
    [wheel] = dist.glob("*.whl")
    prefix = tmp_path / "root"
    (prefix / "etc" / "default").mkdir(parents=True)
    script = "set -euo pipefail\n" + "\n".join(steps(PAGE.read_text()))
    env = {**os.environ, "PREFIX": str(prefix), "WHEEL": str(wheel), "PIP_CONSTRAINT": str(ROOT / "constraints.txt")}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    etc = prefix / "etc" / "trainguard"
    assert (prefix / "opt" / "trainguard" / "venv" / "bin" / "trainguard").is_file()
    assert "9481" in (prefix / "etc" / "prometheus" / "targets" / "trainguard-exporter" / "lab.json").read_text()
    _serve_from_the_walkthrough(prefix, etc, tmp_path)


def _serve_from_the_walkthrough(prefix: Path, etc: Path, tmp_path: Path) -> None:
    """`trainguard serve` as the responder unit starts it (its ExecStart), on a free loopback port."""
    unit = (prefix / "etc" / "systemd" / "system" / "trainguard-responder.service").read_text()
    [exec_start] = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart=")]
    argv = exec_start.replace("/etc/trainguard/", f"{etc}/").replace("/var/lib/trainguard/", f"{tmp_path}/").split()
    port = free_port()
    log = tmp_path / "responder.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*argv, "--host", "127.0.0.1", "--port", str(port)], stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"the responder exited: {log.read_text()}")
            try:
                return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        poll(ready, 30, what="the walkthrough's responder")
        webhook = (etc / "webhook.token").read_text().strip()
        operator = (etc / "operator.token").read_text().strip()
        alerts = nccl_storm_with_xid(1, 2, workload="7")
        assert httpx.post(f"{url}/v1/alerts", json=alerts, timeout=5).status_code == 401
        auth = {"Authorization": f"Bearer {webhook}"}
        assert httpx.post(f"{url}/v1/alerts", json=alerts, headers=auth, timeout=5).status_code == 200
        mode = httpx.put(f"{url}/v1/clusters/lab/mode", json={"mode": "act"},
                         headers={"Authorization": f"Bearer {operator}"}, timeout=5)  # fmt: skip
        assert mode.status_code == 200, mode.text  # `lab` has its Slurm adapter configured: act is allowed
    finally:
        proc.terminate()
        proc.wait(10)
