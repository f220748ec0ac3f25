"""`make demo MODE=approve KEEP=1` and `make demo-stop`, run as an operator runs them (marker e2e).

One real lab run (Slurm, exporters, Prometheus, Alertmanager, responder in approve mode, real PyTorch
training) serves both checks, to keep `make test` short:

- approve mode: the GPU fault's decision waits, the demo shows it pending and answers it with the real
  ``trainguard approve`` (a subprocess), the job recovers, and the summary shows the approval wait apart
  from time to productive;
- KEEP: the console, Prometheus and Alertmanager URLs the demo prints answer over HTTP after it exits,
  and ``--stop`` (what `make demo-stop` runs) ends every process it kept and frees every port.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.services import unavailable
from trainguard.lab.keep import running
from trainguard.lab.slurm import NODES, missing_requirements

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "scripts" / "lab" / "demo.py"
PORT_BASE = 19900  # apart from the other lab tests' (19600, 19700, 19800) and the demo's own (19400)


def lab_ports() -> list[int]:
    """Every port the lab listens on (trainguard/lab/slurm.py's layout)."""
    exporters = [PORT_BASE + 1 + i for i in range(len(NODES))]
    slurmd = [PORT_BASE + 21 + i for i in range(len(NODES))]
    return [PORT_BASE, *exporters, PORT_BASE + 10, PORT_BASE + 11, *slurmd, PORT_BASE + 30]


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(420)
def test_demo_in_approve_mode_kept_running_then_stopped(tmp_path: Path) -> None:
    missing = missing_requirements()
    if missing:
        unavailable("the lab needs: " + "; ".join(missing))
    busy = [p for p in lab_ports() if listening(p)]
    assert not busy, f"ports {busy} are taken before the demo: another lab running?"
    out = tmp_path / "demo"
    argv = [sys.executable, str(DEMO), "--mode", "approve", "--approve-after", "3", "--keep", "--out", str(out),
            "--port-base", str(PORT_BASE)]  # fmt: skip
    state = out / "lab.json"
    try:
        demo = subprocess.run(argv, capture_output=True, text=True, timeout=360, check=False)
        text = demo.stdout + demo.stderr
        (tmp_path / "demo.log").write_text(text)
        assert demo.returncode == 0, text[-5000:]
        _check_approval(text, json.loads((out / "trial.json").read_text()))
        kept = json.loads(state.read_text())
        _check_urls(text, kept["urls"])
        assert any(running(int(e["pid"]), str(e["start"])) for e in kept["processes"])
        stopped = subprocess.run([sys.executable, str(DEMO), "--stop", "--out", str(out)], capture_output=True,
                                 text=True, timeout=120, check=False)  # fmt: skip
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert f"ended {len(kept['processes'])} lab processes" in stopped.stdout, stopped.stdout
        alive = [e["pid"] for e in kept["processes"] if running(int(e["pid"]), str(e["start"]))]
        assert not alive, f"still running after demo-stop: {alive}"
        assert not [p for p in lab_ports() if listening(p)], "a lab port still answers after demo-stop"
        assert not state.exists()
        assert (
            "no kept lab"
            in subprocess.run(
                [sys.executable, str(DEMO), "--stop", "--out", str(out)],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            ).stderr
        )
    finally:
        if state.exists():  # a failure above: end the lab anyway
            subprocess.run([sys.executable, str(DEMO), "--stop", "--out", str(out)], capture_output=True, timeout=120,
                           check=False)  # fmt: skip


def _check_approval(text: str, result: dict[str, object]) -> None:
    """The decision waited, the real CLI released it, the job recovered; the wait is reported apart."""
    trial, record = result["trial"], result["record"]
    assert isinstance(trial, dict)
    assert isinstance(record, dict)
    waits = re.search(r"decision (dec_\w+) waits for approval: trainguard approve (dec_\w+)", text)
    assert waits, text[-4000:]
    assert waits.group(1) == waits.group(2) == record["id"]
    # the CLI's own answer line, then the action
    assert re.search(rf"\$ trainguard approve {record['id']} --by lab-demo: {record['id']}: \w+ \(approved by "
                     r"lab-demo", text), text[-4000:]  # fmt: skip
    assert text.index("waits for approval") < text.index("approved by lab-demo") < text.index("action done")
    assert record["mode"] == "approve"
    assert record["outcome"] == "done"
    assert record["action"] == "requeue_excluding"
    assert record["approval"]["state"] == "approved"
    assert record["approval"]["by"] == "lab-demo"
    assert trial["ok"] is True, trial["note"]
    approval_s, productive_s = trial["approval_s"], trial["productive_s"]
    assert isinstance(approval_s, float)
    assert isinstance(productive_s, float)
    assert approval_s >= 3.0  # the demo's operator read the decision for 3 s
    assert productive_s > approval_s
    summary = dict(re.findall(r"^ {2,}(\S.*?)\s{2,}([\d.]+)s$", text, flags=re.MULTILINE))
    assert float(summary["of which the approval wait"]) == pytest.approx(approval_s, abs=0.01)
    assert float(summary["without the approval wait"]) == pytest.approx(productive_s - approval_s, abs=0.02)
    report = (Path(text.split("report: ")[1].split(",", maxsplit=1)[0].strip())).read_text()
    assert "| of which the approval wait (decision → operator's approval) |" in report


def _check_urls(text: str, urls: dict[str, str]) -> None:
    """The printed URLs are the kept ones, and each answers (the demo process has exited)."""
    line = next(x for x in text.splitlines() if x.startswith("the lab keeps running: "))
    for name in ("console", "prometheus", "alertmanager"):
        assert f"{name} {urls[name]}" in line
    assert httpx.get(urls["console"], timeout=5).status_code == 200
    assert "Decisions" in httpx.get(urls["console"], timeout=5).text
    assert httpx.get(f"{urls['prometheus']}/-/ready", timeout=5).status_code == 200
    assert httpx.get(f"{urls['prometheus']}/graph", timeout=5, follow_redirects=True).status_code == 200
    assert httpx.get(f"{urls['alertmanager']}/-/ready", timeout=5).status_code == 200
    assert httpx.get(f"{urls['alertmanager']}/api/v2/status", timeout=5).status_code == 200
