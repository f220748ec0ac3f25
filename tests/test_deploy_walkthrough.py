"""docs/deploy-slurm.md, walked: every ``sh`` block of the page that is not marked for the real machine
runs as written (PREFIX = a scratch folder), from the wheel that ``python -m build`` makes. Then what
steps 0-6 wrote runs on a real 4-node Slurm lab (slurm/lab.sh, plus a ``canary`` partition): the
responder as its unit starts it, the wheel's exporter on every node, real Prometheus and Alertmanager.
Step 7 is walked with the page's own commands: monitor (a fault is only recorded), ``canary`` and
``act`` (the same fault requeues a canary job excluding the node, checked with scontrol and squeue),
``rollback`` (recorded only again). The page and the code cannot drift apart without this test failing."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.services import unavailable
from trainguard.lab.common import free_port, free_port_block, poll
from trainguard.lab.payloads import alert, notification
from trainguard.lab.stack import Service, query, start_alertmanager, start_prometheus, wait_first_scrape

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "deploy-slurm.md"
LAB = ROOT / "slurm" / "lab.sh"
REAL_MACHINE = "# as root on the real machine"
SETUP = ("variables", "install", "configure", "units", "exporter", "prometheus", "alertmanager")
ROLLOUT = ("canary", "act", "rollback")
NODES = ("n1", "n2", "n3", "n4")
XID = "[ 8901.2] NVRM: Xid (PCI:0000:10:1c): 79, pid={pid}, name=python3, GPU has fallen off the bus.\n"
# One rank per node: the wheel's progress hook (exporters.progress) steps four times a second into its
# node's progress folder, as a training loop calling progress.step() does.
RANK_JOB = """#!/bin/bash
exec srun bash -c 'export TRAINGUARD_PROGRESS_DIR={progress}/$SLURMD_NODENAME TRAINGUARD_PROGRESS_INTERVAL=0.2
exec {python} -c "
import time
from exporters import progress
n = 0
while True:
    n += 1
    progress.step(n)
    time.sleep(0.25)
"'
"""


def steps(page: str) -> dict[str, str]:
    """The page's ``sh`` blocks by their ``# step:`` name, in order, without those for the real machine."""
    blocks = re.findall(r"^```sh\n(.*?)^```$", page, flags=re.DOTALL | re.MULTILINE)
    return {b.splitlines()[0].removeprefix("# step: "): b for b in blocks if not b.startswith(REAL_MACHINE)}


def test_the_page_has_the_steps_the_walkthrough_runs() -> None:
    blocks = steps(PAGE.read_text())
    assert list(blocks) == [*SETUP, *ROLLOUT]
    assert all(b.startswith("# step: ") for b in blocks.values())


def run_steps(names: tuple[str, ...], env: dict[str, str], cwd: Path) -> str:
    """The page's blocks ``names`` (after its variables) in one ``bash -euo pipefail``; their stdout."""
    blocks = steps(PAGE.read_text())
    script = "set -euo pipefail\n" + "\n".join(blocks[n] for n in dict.fromkeys(("variables", *names)))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=cwd, timeout=900,
                          check=False)  # fmt: skip
    assert done.returncode == 0, f"steps {names}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.prometheus
@pytest.mark.slurm
@pytest.mark.timeout(900)
def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    for tool in ("promtool", "amtool", "systemd-analyze", "prometheus", "prometheus-alertmanager"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} (Debian prometheus, prometheus-alertmanager, systemd)")
    if os.geteuid() != 0 or not (shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()):
        unavailable("a Slurm lab: root and the Debian packages slurm-wlm, munge")
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(dist), str(ROOT)]
    subprocess.run(build, capture_output=True, check=True, timeout=300)
    [wheel] = dist.glob("*.whl")
    prefix = tmp_path / "root"
    (prefix / "etc" / "default").mkdir(parents=True)
    env = {**os.environ, "PREFIX": str(prefix), "WHEEL": str(wheel), "PIP_CONSTRAINT": str(ROOT / "constraints.txt")}
    run_steps(SETUP, env, tmp_path)
    etc = prefix / "etc" / "trainguard"
    assert (prefix / "opt" / "trainguard" / "venv" / "bin" / "trainguard").is_file()
    assert "9481" in (prefix / "etc" / "prometheus" / "targets" / "trainguard-exporter" / "lab.json").read_text()
    with slurm_lab() as slurm:
        config = etc / "trainguard.yaml"  # the lab's slurm.conf where the real machine has /etc/slurm's
        config.write_text(config.read_text().replace("/etc/slurm/slurm.conf", str(slurm.conf)))
        _serve_from_the_walkthrough(Walk(prefix, etc, tmp_path, env, slurm))


@dataclass
class SlurmLab:
    """A real Slurm of four nodes (slurm/lab.sh) on free ports, with a ``canary`` partition."""

    dir: Path
    env: dict[str, str]

    @property
    def conf(self) -> Path:
        return self.dir / "etc" / "slurm.conf"

    def run(self, *argv: str) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
        return done.stdout

    def job(self, job: str) -> dict[str, str]:
        """``scontrol show job -o``, as key=value pairs."""
        line = self.run("scontrol", "show", "job", "-o", job)
        return dict(field.split("=", 1) for field in line.split() if "=" in field)

    def cancel(self, job: str) -> None:
        """scancel, and wait until the job has left the queue (its ranks ended)."""
        self.run("scancel", job)
        poll(lambda: job not in self.run("squeue", "-h", "-o", "%i").split(), 30, what=f"job {job} to end")

    def nodes(self, job: str) -> list[str]:
        listed = self.run("squeue", "-h", "-j", job, "-o", "%N").strip()
        return self.run("scontrol", "show", "hostnames", listed).split() if listed else []


@contextmanager
def slurm_lab() -> Iterator[SlurmLab]:
    directory = Path(tempfile.mkdtemp(prefix="trainguard-walkthrough-slurm-", dir="/tmp"))
    directory.chmod(0o755)  # munged wants o+x on every directory above its socket
    env = {
        **os.environ,
        "SLURM_LAB_DIR": str(directory),
        "SLURM_LAB_CTLD_PORT": str(free_port()),
        "SLURM_LAB_NODE_PORT_BASE": str(free_port_block(len(NODES))),
        "SLURM_CONF": str(directory / "etc" / "slurm.conf"),
        "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin",
    }
    lab = SlurmLab(directory, env)
    try:
        lab.run(str(LAB), "up")
        # the site's canary partition (step 7 opts it in): lab.sh has one on n[1-2]; here it spans all four
        # nodes, so a 2-node job excluding one node still has somewhere to run
        lab.run("scontrol", "update", "PartitionName=canary", f"Nodes={','.join(NODES)}")
        yield lab
    finally:
        subprocess.run([str(LAB), "down"], env=env, capture_output=True, timeout=60, check=False)
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class Walk:
    """What the walkthrough made, and where the test runs it."""

    prefix: Path
    etc: Path
    tmp: Path
    env: dict[str, str]
    slurm: SlurmLab

    @property
    def trainguard(self) -> Path:
        return self.prefix / "opt" / "trainguard" / "venv" / "bin" / "trainguard"


def _serve_from_the_walkthrough(walk: Walk) -> None:
    port = free_port()
    responder, url = _start_responder(walk, port)
    services: list[Service] = []
    exporters: list[subprocess.Popen[bytes]] = []
    try:
        _check_the_responder(walk.etc, url)
        services, exporters = _pipeline(walk, url)
        prom = services[1]
        env = {**walk.env, "TRAINGUARD_URL": url}
        # 1. monitor: a GPU fault under a canary job is recorded, Slurm is not touched
        job = _submit(walk)
        record = _xid(walk, prom, url, job)
        assert (record["mode"], record["outcome"], record["action"]) == ("monitor", "planned", "requeue_excluding")
        blamed = record["implicated_nodes"][0]
        info = walk.slurm.job(job)
        assert (info["JobState"], info["Restarts"], info["ExcNodeList"]) == ("RUNNING", "0", "(null)"), info
        walk.slurm.cancel(job)
        # 2. canary + act: the page's steps, the responder restarted on the changed file; a typo refused
        run_steps(("canary",), walk.env, walk.tmp)
        responder.terminate()
        responder.wait(10)
        responder, _ = _start_responder(walk, port)
        assert run_steps(("act",), env, walk.tmp).strip() == "lab: act"
        typo = subprocess.run([walk.trainguard, "mode", "lba", "act"], capture_output=True, text=True, timeout=30,
                              env={**env, "TRAINGUARD_OPERATOR_TOKEN_FILE": str(walk.etc / "operator.token")},
                              check=False)  # fmt: skip
        assert typo.returncode == 2, typo.stdout + typo.stderr
        assert "unknown cluster" in typo.stdout + typo.stderr
        job = _submit(walk)
        record = _xid(walk, prom, url, job)
        assert (record["mode"], record["outcome"], record["action"]) == ("act", "done", "requeue_excluding"), record
        target = record["implicated_nodes"][0]
        assert record["excluded_nodes"] == [target]
        info = walk.slurm.job(job)
        assert (info["ExcNodeList"], info["Restarts"]) == (target, "1"), info

        def elsewhere() -> list[str] | None:
            placed = walk.slurm.nodes(job)
            return placed if walk.slurm.job(job)["JobState"] == "RUNNING" and target not in placed else None

        assert len(poll(elsewhere, 40, what=f"job {job} running again without {target}")) == 2
        _check_drain(walk, url, job, target, blamed_before=target == blamed)
        # 3. rollback: the next decision (a rank of the new attempt killed) is recorded only
        assert run_steps(("rollback",), env, walk.tmp).strip() == "lab: monitor"
        rank = _ranks(walk, job, 1)["1"]
        os.kill(int(rank["pid"]), signal.SIGKILL)
        record = _decision(url, job, "1")
        assert (record["mode"], record["outcome"]) == ("monitor", "planned"), record
        assert record["action"] != "none", record
        info = walk.slurm.job(job)
        assert (info["Restarts"], info["ExcNodeList"]) == ("1", target), info
    finally:
        for exporter in exporters:
            exporter.terminate()
            exporter.wait(10)
        for service in services:
            service.stop()
        responder.terminate()
        responder.wait(10)


def _start_responder(walk: Walk, port: int) -> tuple[subprocess.Popen[bytes], str]:
    """`trainguard serve` as the responder unit starts it (its ExecStart), on a loopback port."""
    unit = (walk.prefix / "etc" / "systemd" / "system" / "trainguard-responder.service").read_text()
    [exec_start] = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart=")]
    argv = (
        exec_start.replace("/etc/trainguard/", f"{walk.etc}/").replace("/var/lib/trainguard/", f"{walk.tmp}/").split()
    )
    log = walk.tmp / "responder.log"
    with log.open("ab") as out:
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
    # a cluster of its own: this incident must not count in `lab`'s circuit breaker below
    alerts = notification([alert("TrainguardRankCrashed", "crash", cluster="token-check", host="x", rank="0")])
    assert httpx.post(f"{url}/v1/alerts", json=alerts, timeout=5).status_code == 401
    auth = {"Authorization": f"Bearer {webhook}"}
    assert httpx.post(f"{url}/v1/alerts", json=alerts, headers=auth, timeout=5).status_code == 200
    mode = httpx.put(f"{url}/v1/clusters/lab/mode", json={"mode": "act"},
                     headers={"Authorization": f"Bearer {operator}"}, timeout=5)  # fmt: skip
    assert mode.status_code == 200, mode.text  # `lab` has its Slurm adapter configured: act is allowed
    back = httpx.put(f"{url}/v1/clusters/lab/mode", json={"mode": "monitor"},
                     headers={"Authorization": f"Bearer {operator}"}, timeout=5)  # fmt: skip
    assert back.status_code == 200  # back to monitor: step 7 below switches with the page's commands


def _pipeline(walk: Walk, url: str) -> tuple[list[Service], list[subprocess.Popen[bytes]]]:
    """The wheel's exporter on every node -> real Prometheus with the exported rules -> real Alertmanager
    with the sub-route example -> the walkthrough's responder. [Alertmanager, Prometheus], the exporters."""
    etc, tmp = walk.etc, walk.tmp
    ports = {node: free_port() for node in NODES}
    exporters = []
    for node in NODES:
        (tmp / "progress" / node).mkdir(parents=True)
        (tmp / "kmsg").mkdir(exist_ok=True)
        (tmp / "kmsg" / f"{node}.log").write_text("")
        log = (tmp / f"exporter-{node}.log").open("wb")
        exporters.append(subprocess.Popen(
            [walk.trainguard, "exporter", "--cluster", "lab", "--node", node, "--port", str(ports[node]),
             "--kernel-log", str(tmp / "kmsg" / f"{node}.log"), "--progress-dir", str(tmp / "progress" / node),
             "--poll-interval", "0.2", "--no-nvml"],
            stdout=log, stderr=log,
        ))  # fmt: skip
        log.close()
    services: list[Service] = []
    try:
        am_config = yaml.safe_load((etc / "alertmanager-subroute.yml").read_text())
        for receiver in am_config["receivers"]:
            for hook in receiver.get("webhook_configs", []):
                hook["url"] = f"{url}/v1/alerts"
                hook["http_config"]["authorization"]["credentials_file"] = str(etc / "webhook.token")
        am = start_alertmanager(am_config, tmp / "am")
        services.append(am)
        am.wait_ready()
        prom_config = yaml.safe_load((walk.prefix / "etc" / "prometheus" / "trainguard-prometheus.yml").read_text())
        prom_config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"}
        prom_config["rule_files"] = [str(walk.prefix / "etc" / "prometheus" / "trainguard" / "*.yml")]
        prom_config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [am.url.split("//")[1]]}]}]}
        [job] = [j for j in prom_config["scrape_configs"] if j["job_name"] == "trainguard-exporter"]
        job.pop("file_sd_configs")
        job["static_configs"] = [{"targets": [f"127.0.0.1:{ports[n]}"], "labels": {"host": n, "cluster": "lab"}}
                                 for n in NODES]  # fmt: skip
        prom_config["scrape_configs"] = [job]
        prom = start_prometheus(prom_config, tmp / "prom")
        services.append(prom)
        prom.wait_ready()
        wait_first_scrape(prom, "trainguard-exporter")
        return services, exporters
    except BaseException:
        for service in services:
            service.stop()
        for exporter in exporters:
            exporter.kill()
            exporter.wait(10)
        raise


def _check_drain(walk: Walk, url: str, job: str, node: str, blamed_before: bool) -> None:
    """A node blamed by a second workload (the monitor-mode one counts) is drained, in Slurm too."""
    body = httpx.get(f"{url}/v1/decisions", params={"workload": job}, timeout=5).json()
    drains = [d for d in body["decisions"] if d["kind"] == "decision" and d["action"] == "drain_node"]
    if not blamed_before:
        assert not drains, drains
        return
    [drain] = drains
    assert (drain["node"], drain["outcome"]) == (node, "done"), drain
    state = walk.slurm.run("sinfo", "-h", "-n", node, "-o", "%T %E").strip()
    assert state.split()[0] in ("drained", "draining"), state


def _submit(walk: Walk) -> str:
    """A two-node job in the canary partition, one rank per node reporting progress."""
    script = walk.tmp / "rank-job.sh"
    python = walk.prefix / "opt" / "trainguard" / "venv" / "bin" / "python"
    script.write_text(RANK_JOB.format(progress=walk.tmp / "progress", python=python))
    out = walk.slurm.run("sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--requeue", "--partition=canary",
                         "--open-mode=append", f"--output={walk.tmp}/job-%j.out", f"--chdir={walk.tmp}",
                         str(script))  # fmt: skip
    return out.strip().split(";")[0]


def _ranks(walk: Walk, job: str, attempt: int) -> dict[str, dict[str, Any]]:
    """rank -> progress state of ``job``'s two ranks of ``attempt``, once both report."""

    def ranks() -> dict[str, dict[str, Any]] | None:
        found = {}
        for path in (walk.tmp / "progress").glob(f"*/{job}-a{attempt}-r*.json"):
            try:
                state = json.loads(path.read_text())
            except ValueError:
                return None
            found[state["identity"]["rank"]] = state
        return found if len(found) == 2 else None

    found: dict[str, dict[str, Any]] = poll(ranks, 60, what=f"job {job}'s two ranks of attempt {attempt} reporting")
    return found


def _decision(url: str, job: str, attempt: str) -> dict[str, Any]:
    """The decision on ``job``'s ``attempt`` once settled (act mode writes ``pending`` before Slurm is called)."""

    def decided() -> dict[str, Any] | None:
        body = httpx.get(f"{url}/v1/decisions", params={"workload": job}, timeout=5).json()
        found = [d for d in body["decisions"]
                 if d["kind"] == "decision" and d["attempt"] == attempt and d["action"] != "drain_node"]  # fmt: skip
        return found[0] if found and found[0]["outcome"] != "pending" else None

    record: dict[str, Any] = poll(decided, 60, what=f"a decision on {job} attempt {attempt} through the pipeline")
    return record


def _xid(walk: Walk, prom: Service, url: str, job: str) -> dict[str, Any]:
    """An XID 79 in the kernel log of the node of ``job``'s rank 1, once the exporters see its ranks; the
    decision it leads to, with the XID as its evidence."""
    rank = _ranks(walk, job, 0)["1"]
    node = rank["identity"]["host"]
    # the XID counter scraped at 0 first (the exporter pre-creates it): increase() needs the step to 1
    xid_series = (
        f'trainguard_log_pattern_matches_total{{pattern="xid_79_fallen_off_bus",workload="{job}",host="{node}"}}'
    )
    poll(lambda: query(prom, xid_series), 30, what=f"the XID counter at 0 for workload {job} on {node}")
    with (walk.tmp / "kmsg" / f"{node}.log").open("a") as f:
        f.write(XID.format(pid=rank["pid"]))
    record = _decision(url, job, "0")
    [xid] = [e for e in record["evidence"] if e["labels"].get("pattern") == "xid_79_fallen_off_bus"]
    assert xid["labels"]["host"] == node
    assert xid["summary"] == f"GPU fault (xid_79_fallen_off_bus) in {job} on {node}"
    assert record["implicated_nodes"] == [node]
    return record
