"""docs/deploy-slurm.md, walked: every ``sh`` block of the page that is not marked for the real machine
runs as written (PREFIX = a scratch folder), from the wheel that ``python -m build`` makes. Then the
responder starts from that virtualenv with the configuration those steps wrote, and answers with the
tokens they made. The page and the code cannot drift apart without this test failing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.services import unavailable
from trainguard.lab.common import free_port, poll
from trainguard.lab.payloads import nccl_storm_with_xid
from trainguard.lab.stack import Service, query, start_alertmanager, start_prometheus, wait_first_scrape

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


@pytest.mark.prometheus
def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    for tool in ("promtool", "amtool", "systemd-analyze", "prometheus", "prometheus-alertmanager"):
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
    responder, url = _start_responder(prefix, etc, tmp_path)
    services: list[Service] = []
    try:
        _check_the_responder(etc, url)
        services = _pipeline(prefix, etc, tmp_path, url)
    finally:
        for service in services:
            service.stop()
        responder.terminate()
        responder.wait(10)


def _start_responder(prefix: Path, etc: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`trainguard serve` as the responder unit starts it (its ExecStart), on a free loopback port."""
    unit = (prefix / "etc" / "systemd" / "system" / "trainguard-responder.service").read_text()
    [exec_start] = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart=")]
    argv = exec_start.replace("/etc/trainguard/", f"{etc}/").replace("/var/lib/trainguard/", f"{tmp_path}/").split()
    port = free_port()
    log = tmp_path / "responder.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*argv, "--host", "127.0.0.1", "--port", str(port)], stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"the responder exited: {log.read_text()}")
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    poll(ready, 30, what="the walkthrough's responder")
    return proc, url


def _check_the_responder(etc: Path, url: str) -> None:
    webhook = (etc / "webhook.token").read_text().strip()
    operator = (etc / "operator.token").read_text().strip()
    alerts = nccl_storm_with_xid(1, 2, workload="7")
    assert httpx.post(f"{url}/v1/alerts", json=alerts, timeout=5).status_code == 401
    auth = {"Authorization": f"Bearer {webhook}"}
    assert httpx.post(f"{url}/v1/alerts", json=alerts, headers=auth, timeout=5).status_code == 200
    mode = httpx.put(f"{url}/v1/clusters/lab/mode", json={"mode": "act"},
                     headers={"Authorization": f"Bearer {operator}"}, timeout=5)  # fmt: skip
    assert mode.status_code == 200, mode.text  # `lab` has its Slurm adapter configured: act is allowed
    back = httpx.put(f"{url}/v1/clusters/lab/mode", json={"mode": "monitor"},
                     headers={"Authorization": f"Bearer {operator}"}, timeout=5)  # fmt: skip
    assert back.status_code == 200  # rollback; the pipeline below runs in monitor mode (no Slurm here)


def _pipeline(prefix: Path, etc: Path, tmp_path: Path, url: str) -> list[Service]:
    """The wheel's exporter -> real Prometheus with the exported rules -> real Alertmanager with the
    sub-route example -> the walkthrough's responder: a kernel-log XID becomes evidence of a decision."""
    trainguard = prefix / "opt" / "trainguard" / "venv" / "bin" / "trainguard"
    progress, kern = tmp_path / "progress", tmp_path / "kern.log"
    progress.mkdir()
    kern.write_text("")
    identity = {"scheduler": "slurm", "workload": "4242", "attempt": "0", "rank": "1", "host": "n2"}
    state = {"version": 1, "pid": os.getpid(), "identity": identity, "step": 20}
    (progress / "4242-a0-r1.json").write_text(json.dumps(state))
    port = free_port()
    exporter_log = (tmp_path / "exporter.log").open("wb")
    exporter = subprocess.Popen(
        [trainguard, "exporter", "--cluster", "lab", "--node", "n2", "--port", str(port), "--kernel-log", str(kern),
         "--progress-dir", str(progress), "--poll-interval", "0.2", "--no-nvml"],
        stdout=exporter_log, stderr=exporter_log,
    )  # fmt: skip
    services: list[Service] = []
    try:
        am_config = yaml.safe_load((etc / "alertmanager-subroute.yml").read_text())
        for receiver in am_config["receivers"]:
            for hook in receiver.get("webhook_configs", []):
                hook["url"] = f"{url}/v1/alerts"
                hook["http_config"]["authorization"]["credentials_file"] = str(etc / "webhook.token")
        am = start_alertmanager(am_config, tmp_path / "am")
        services.append(am)
        am.wait_ready()
        prom_config = yaml.safe_load((prefix / "etc" / "prometheus" / "trainguard-prometheus.yml").read_text())
        prom_config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"}
        prom_config["rule_files"] = [str(prefix / "etc" / "prometheus" / "trainguard" / "*.yml")]
        prom_config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [am.url.split("//")[1]]}]}]}
        [job] = [j for j in prom_config["scrape_configs"] if j["job_name"] == "trainguard-exporter"]
        job.pop("file_sd_configs")
        job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"], "labels": {"host": "n2", "cluster": "lab"}}]
        prom_config["scrape_configs"] = [job]
        prom = start_prometheus(prom_config, tmp_path / "prom")
        services.append(prom)
        prom.wait_ready()
        wait_first_scrape(prom, "trainguard-exporter")
        # the XID counter scraped at 0 first (the exporter pre-creates it): increase() needs the step to 1
        xid_series = 'trainguard_log_pattern_matches_total{pattern="xid_79_fallen_off_bus",workload="4242"}'
        poll(lambda: query(prom, xid_series), 30, what="the XID counter at 0 for workload 4242")
        with kern.open("a") as f:
            f.write("[ 8901.2] NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, GPU has fallen off the bus.\n")

        def decided() -> list[dict[str, object]] | None:
            body = httpx.get(f"{url}/v1/decisions", params={"workload": "4242"}, timeout=5).json()
            return [d for d in body["decisions"] if d["kind"] == "decision"] or None

        [record] = poll(decided, 60, what="a decision on workload 4242 through Prometheus and Alertmanager")
        [xid] = [e for e in record["evidence"] if e["labels"].get("pattern") == "xid_79_fallen_off_bus"]  # type: ignore[attr-defined]
        assert xid["labels"]["host"] == "n2"
        assert xid["summary"] == "GPU fault (xid_79_fallen_off_bus) in 4242 on n2"
        assert record["implicated_nodes"] == ["n2"]
        return services
    except BaseException:
        for service in services:
            service.stop()
        raise
    finally:
        exporter.terminate()
        exporter.wait(10)
        exporter_log.close()
