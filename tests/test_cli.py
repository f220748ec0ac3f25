"""The command line against a real ``trainguard serve`` process started with no config file."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from responder.errors import ConfigError
from responder.settings import load_settings
from tests.services import wait_until
from trainguard.lab.payloads import nccl_storm_with_xid
from trainguard.lab.server import TRAINGUARD, ServerProcess


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TRAINGUARD, *args], capture_output=True, text=True, timeout=60, env=env, check=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("cli") / "tg.db", env={"TRAINGUARD_CORRELATION_WINDOW_S": "0.2"})
    yield proc
    proc.stop()


def test_serve_without_config_serves_the_contract_in_monitor_mode(server: ServerProcess) -> None:
    def get(path: str) -> httpx.Response:
        return httpx.get(server.url + path, timeout=5)

    assert get("/healthz").status_code == 200
    assert get("/readyz").json()["status"] == "ready"
    assert "trainguard_responder_notifications_total" in get("/metrics").text
    assert get("/v1/clusters/lab/mode").json()["mode"] == "monitor"
    response = httpx.post(server.url + "/v1/alerts", json=nccl_storm_with_xid(2, 2), timeout=5)
    assert response.status_code == 200
    wait_until(lambda: get("/v1/decisions").json()["count"] >= 1, 10, what="a decision")
    [rec] = get("/v1/recommendations").json()["recommendations"]
    assert rec["action"] == "requeue_excluding"
    assert get(f"/v1/decisions/{rec['id']}").json()["evidence"]


def test_decisions_and_mode_commands(server: ServerProcess, tmp_path: Path) -> None:
    httpx.post(server.url + "/v1/alerts", json=nccl_storm_with_xid(1, 3, bad_host="gpu-003", workload="777"), timeout=5)
    wait_until(lambda: "gpu-003" in run("decisions", "--url", server.url).stdout, 10, what="decision listed")
    out = run("decisions", "--url", server.url, "--json", "--limit", "1")
    assert out.returncode == 0
    assert '"action": "requeue_excluding"' in out.stdout
    assert run("mode", "lab", "--url", server.url).stdout.strip() == "lab: monitor"
    # This server has no scheduler configured: act is refused with the reason (tests/test_guardrails.py).
    refused = run("mode", "lab", "act", "--url", server.url)
    assert refused.returncode == 2
    assert "no scheduler configured" in refused.stderr
    assert run("mode", "lab", "--url", server.url).stdout.strip() == "lab: monitor"
    assert run("mode", "lab", "monitor", "--url", server.url).returncode == 0
    unreachable = run("decisions", "--url", "http://127.0.0.1:9")
    assert unreachable.returncode == 1
    assert "cannot reach" in unreachable.stderr


def test_every_subcommand_has_help() -> None:
    for sub in ("serve", "decisions", "mode"):
        result = run(sub, "--help")
        assert result.returncode == 0
        assert "usage: trainguard" in result.stdout


def test_bad_config_names_the_key_and_value(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("breaker:\n  max_node_fraction: 7\nclusters:\n  lab:\n    mode: yolo\n")
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert "breaker.max_node_fraction" in str(err.value)
    assert "clusters.lab.mode" in str(err.value)
    result = run("serve", "--config", str(config), "--db", str(tmp_path / "x.db"))
    assert result.returncode == 2
    assert "max_node_fraction" in result.stderr
    config.write_text("- just\n- a list\n")
    assert "mapping" in run("serve", "--config", str(config)).stderr


def test_environment_overrides_file_key_by_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("breaker: {window_s: 5}\nclusters: {lab: {mode: act, nodes: 4}}\nport: 1000\n")
    monkeypatch.setenv("TRAINGUARD_BREAKER__MAX_ACTIONS", "3")
    monkeypatch.setenv("TRAINGUARD_PORT", "2000")
    settings = load_settings(config, port=3000)
    assert settings.breaker.window_s == 5
    assert settings.breaker.max_actions == 3
    assert settings.port == 3000
    assert settings.cluster("lab").mode == "act"
    assert settings.cluster("other").mode == "monitor"


def test_webhook_token_from_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    assert load_settings(webhook_token_file=token).webhook_secret() == "abc"
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(webhook_token_file=tmp_path / "missing").webhook_secret()


def test_the_documented_configuration_example_loads(tmp_path: Path) -> None:
    """docs/configuration.md's example must stay a valid configuration."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = tmp_path / "trainguard.yaml"
    config.write_text(example)
    settings = load_settings(config)
    assert settings.cluster("lab").policy.no_progress_attempts == 3
    assert settings.breaker.correlated_workloads == 3
