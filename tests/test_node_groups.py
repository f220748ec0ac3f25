"""Node groups: per-group mode and policy inside one cluster (responder/node_groups.py).

Settings validation (errors name the key path), the resolution on its own, then the real engine and API
on a fake clock with the project's ``RecordingScheduler`` (it records what it was asked): an incident on
the canary group acts, one elsewhere is only recorded, one spanning both takes the conservative mode.
The same on a real Slurm with two partitions is ``tests/test_slurm_node_groups.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from responder.approval import ApprovalSettings
from responder.breaker import BreakerSettings
from responder.clock import FakeClock
from responder.errors import ConfigError
from responder.model import Mode, StoredAlert
from responder.node_groups import NodeGroup, resolve
from responder.policy import PolicySettings
from responder.replay import replay
from responder.settings import ClusterSettings, Settings, load_settings
from tests.conftest import Responder
from tests.services import wait_until
from tests.test_cli import run
from trainguard.lab.payloads import alert, notification
from trainguard.lab.server import ServerProcess

CANARY = {"name": "canary", "partitions": ["canary"], "nodes": ["gpu-00[12]"], "mode": "act"}


def config_error(tmp_path: Path, groups: list[dict[str, Any]]) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"clusters": {"lab": {"node_groups": groups}}}))
    with pytest.raises(ConfigError) as exc:
        load_settings(path)
    return str(exc.value)


def test_settings_errors_name_the_key_path(tmp_path: Path) -> None:
    assert "clusters.lab.node_groups.0: Value error, node group 'x' selects nothing" in config_error(
        tmp_path, [{"name": "x"}]
    )
    assert "clusters.lab.node_groups.0.policy.max_attemps: Extra inputs are not permitted" in config_error(
        tmp_path, [{**CANARY, "policy": {"max_attemps": 2}}]
    )
    assert "clusters.lab.node_groups.0.mode" in config_error(tmp_path, [{**CANARY, "mode": "yolo"}])
    assert "clusters.lab.node_groups.0.partitions.0" in config_error(tmp_path, [{**CANARY, "partitions": ["a b"]}])
    assert "node glob 'n;1'" in config_error(tmp_path, [{**CANARY, "nodes": ["n;1"]}])
    assert "repeated: canary" in config_error(tmp_path, [CANARY, CANARY])
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump({"clusters": {"lab": {"node_groups": [CANARY]}}}))
    [group] = load_settings(path).cluster("lab").node_groups
    assert (group.name, group.mode, group.policy) == ("canary", Mode.ACT, None)


def stored(host: str | None = None, **labels: str) -> StoredAlert:
    labels = {"alertname": "X", "cluster": "lab", "workload": "1", **({"host": host} if host else {}), **labels}
    return StoredAlert("f", "", 0.0, "firing", 0.0, labels, {})


def cluster(*groups: dict[str, Any], policy: PolicySettings | None = None) -> ClusterSettings:
    return ClusterSettings(node_groups=[NodeGroup.model_validate(g) for g in groups], policy=policy or PolicySettings())


def test_resolution_by_host_partition_and_nodepool() -> None:
    c = cluster(CANARY, {"name": "pool", "nodepools": ["a100-spot"], "mode": "approve"})
    on_canary = resolve(c, Mode.MONITOR, {}, [stored("gpu-001"), stored("gpu-002"), stored()])
    assert (on_canary.mode, on_canary.group) == (Mode.ACT, "canary")
    assert on_canary.section["parts"] == [{"group": "canary", "mode": "act", "source": "configured",
                                           "evidence": ["gpu-001", "gpu-002"]}]  # fmt: skip
    by_partition = resolve(c, Mode.MONITOR, {}, [stored(partition="batch,canary")])
    assert (by_partition.mode, by_partition.group) == (Mode.ACT, "canary")
    by_pool = resolve(c, Mode.MONITOR, {}, [stored("node-x", nodepool="a100-spot")])
    assert (by_pool.mode, by_pool.group) == (Mode.APPROVE, "pool")
    elsewhere = resolve(c, Mode.MONITOR, {}, [stored("gpu-003")])
    assert (elsewhere.mode, elsewhere.group) == (Mode.MONITOR, None)
    assert "rest of the cluster" in elsewhere.section["reason"]
    nowhere = resolve(c, Mode.APPROVE, {}, [stored()])
    assert (nowhere.mode, nowhere.group) == (Mode.APPROVE, None)
    assert "names no node" in nowhere.section["reason"]


def test_evidence_spanning_groups_takes_the_most_conservative_mode() -> None:
    c = cluster(CANARY, {"name": "pool", "nodes": ["gpu-01*"], "mode": "approve"})
    span = resolve(c, Mode.ACT, {}, [stored("gpu-001"), stored("gpu-010")])
    assert (span.mode, span.group) == (Mode.APPROVE, "pool")
    assert "spans node group canary (act), node group pool (approve)" in span.section["reason"]
    with_rest = resolve(c, Mode.MONITOR, {}, [stored("gpu-001"), stored("gpu-003")])
    assert (with_rest.mode, with_rest.group) == (Mode.MONITOR, None)
    assert [p["group"] for p in with_rest.section["parts"]] == [None, "canary"]


def test_operator_mode_beats_configured_and_a_group_without_mode_follows_the_cluster() -> None:
    c = cluster(CANARY, {"name": "follow", "nodes": ["gpu-1*"]})
    assert resolve(c, Mode.MONITOR, {"canary": "monitor"}, [stored("gpu-001")]).section["parts"][0]["source"] == (
        "operator"
    )
    assert resolve(c, Mode.MONITOR, {"canary": "monitor"}, [stored("gpu-001")]).mode == Mode.MONITOR
    follow = resolve(c, Mode.APPROVE, {}, [stored("gpu-100")])
    assert (follow.mode, follow.section["parts"][0]["source"]) == (Mode.APPROVE, "cluster")


def test_a_group_policy_overrides_only_the_keys_it_names() -> None:
    c = cluster({**CANARY, "policy": {"max_attempts": 2}}, policy=PolicySettings(max_excluded_nodes=3))
    scope = resolve(c, Mode.MONITOR, {}, [stored("gpu-001")])
    assert (scope.policy.max_attempts, scope.policy.max_excluded_nodes) == (2, 3)
    assert resolve(c, Mode.MONITOR, {}, [stored("gpu-009")]).policy.max_attempts == 5
    assert resolve(cluster(), Mode.ACT, {}, [stored("gpu-001")]).section == {}  # no groups: records unchanged


def grouped(make_responder: Callable[..., Responder], *groups: dict[str, Any], mode: str = "monitor") -> Responder:
    c = ClusterSettings(mode=mode, node_groups=[NodeGroup.model_validate(g) for g in groups],
                        approval=ApprovalSettings(timeout_s=600))  # fmt: skip
    # Several workloads fail within seconds here: a correlated failure, unless the breaker allows more.
    return make_responder(clock=FakeClock(), clusters={"lab": c}, breaker=BreakerSettings(correlated_workloads=10))


def fault(r: Responder, workload: str, *hosts: str) -> dict[str, Any]:
    alerts = [alert("TrainguardCollectiveTimeout", "collective_timeout", host=h, rank=str(i), workload=workload,
                    pattern="nccl_watchdog_timeout") for i, h in enumerate(hosts)]  # fmt: skip
    alerts.append(alert("TrainguardGpuXid", "infra_gpu", host=hosts[0], pattern="xid_79_fallen_off_bus",
                        workload=workload))  # fmt: skip
    assert r.post(notification(alerts)).status_code == 200
    r.clock.advance(r.engine.settings.correlation_window_s + 1)  # type: ignore[attr-defined]
    # The app's own loop may decide it first (it then also carries out the action); what this thread decided
    # is acted on by the test (decided_here).
    decided_here = {x.id for x in r.engine.decide_due()}
    [decision] = [d for d in r.decisions() if d["workload"] == workload]
    decision["decided_here"] = decision["id"] in decided_here
    return decision


def test_the_engine_acts_on_the_canary_and_only_records_elsewhere(make_responder: Callable[..., Responder]) -> None:
    r = grouped(make_responder, CANARY)
    canary = fault(r, "10", "gpu-001", "gpu-002")
    assert (canary["mode"], canary["action"]) == ("act", "requeue_excluding")
    assert canary["outcome"] == "pending" or not canary["decided_here"]  # the loop may have acted already
    assert canary["node_group"]["group"] == "canary"
    assert canary["node_group"]["mode"] == "act"
    if canary["decided_here"]:
        r.engine.act(r.engine.store.record(canary["id"]))  # type: ignore[arg-type]
    wait_until(lambda: r.client.get(f"/v1/decisions/{canary['id']}").json()["outcome"] == "done", 10)
    [request] = r.scheduler.requests
    assert (request.workload, request.exclude_nodes) == ("10", ("gpu-001",))
    other = fault(r, "11", "gpu-003", "gpu-004")
    assert (other["mode"], other["outcome"]) == ("monitor", "planned")
    assert other["node_group"]["group"] is None
    span = fault(r, "12", "gpu-002", "gpu-003")
    assert (span["mode"], span["outcome"]) == ("monitor", "planned")
    assert "most conservative mode, monitor" in span["node_group"]["reason"]
    assert len(r.scheduler.requests) == 1


def test_a_group_in_approve_mode_waits(make_responder: Callable[..., Responder]) -> None:
    r = grouped(make_responder, {**CANARY, "mode": "approve"}, mode="act")
    decision = fault(r, "20", "gpu-001")
    assert (decision["mode"], decision["outcome"]) == ("approve", "awaiting_approval")
    rest = fault(r, "21", "gpu-007")  # the rest of the cluster acts
    assert rest["mode"] == "act"
    assert rest["outcome"] == "pending" or not rest["decided_here"]  # the app's loop may have acted already


def test_api_shows_and_sets_a_group_mode(make_responder: Callable[..., Responder]) -> None:
    r = grouped(make_responder, CANARY, {"name": "pool", "nodepools": ["p1"]})
    listed = r.client.get("/v1/clusters/lab/groups").json()
    assert listed["mode"] == "monitor"
    assert [(g["group"], g["mode"], g["source"]) for g in listed["groups"]] == [
        ("canary", "act", "configured"), ("pool", "monitor", "cluster")
    ]  # fmt: skip
    switched = r.client.put("/v1/clusters/lab/groups/canary/mode", json={"mode": "monitor"})
    assert switched.status_code == 200, switched.text
    assert (switched.json()["mode"], switched.json()["source"]) == ("monitor", "operator")
    assert r.client.get("/v1/clusters/lab/groups/canary/mode").json()["mode"] == "monitor"
    assert fault(r, "30", "gpu-001")["outcome"] == "planned"  # the switch applies to the next decision
    assert r.client.put("/v1/clusters/lab/groups/nope/mode", json={"mode": "act"}).status_code == 404
    assert r.client.put("/v1/clusters/lab/groups/canary/mode", json={"mode": "yolo"}).status_code == 400
    assert r.scheduler.requests == []
    assert r.engine.store.group_modes("lab") == {"canary": "monitor"}


def test_group_switch_needs_the_operator_token(make_responder: Callable[..., Responder]) -> None:
    r = make_responder(clock=FakeClock(), operator_token="op-secret",
                       clusters={"lab": ClusterSettings(node_groups=[NodeGroup.model_validate(CANARY)])})  # fmt: skip
    assert r.client.put("/v1/clusters/lab/groups/canary/mode", json={"mode": "monitor"}).status_code == 401
    ok = r.client.put("/v1/clusters/lab/groups/canary/mode", json={"mode": "monitor"},
                      headers={"Authorization": "Bearer op-secret"})  # fmt: skip
    assert ok.status_code == 200
    assert r.engine.store.group_modes("lab") == {"canary": "monitor"}


def test_replay_applies_the_candidate_group_policy_to_the_group_only(
    make_responder: Callable[..., Responder],
) -> None:
    r = grouped(make_responder, CANARY)
    on_canary, elsewhere = fault(r, "40", "gpu-001"), fault(r, "41", "gpu-005")
    candidate_group = NodeGroup.model_validate({**CANARY, "policy": {"infra_with_nodes": "stop"}})
    candidate = Settings(clusters={"lab": ClusterSettings(node_groups=[candidate_group])})
    report = replay(r.engine.store, candidate)
    assert [(row.id, row.new_action, row.group) for row in report.changed] == [(on_canary["id"], "stop", "canary")]
    assert elsewhere["id"] in {row.id for row in report.rows}


def test_trainguard_mode_shows_and_switches_a_group(tmp_path: Path) -> None:
    """``trainguard mode`` against a real ``trainguard serve`` with a node group in its configuration."""
    config = tmp_path / "tg.yaml"  # approve, not act: act without a scheduler is refused at start (below)
    config.write_text(yaml.safe_dump({"clusters": {"lab": {"node_groups": [{**CANARY, "mode": "approve"}]}}}))
    server = ServerProcess(tmp_path / "tg.db", args=["--config", str(config)])
    env = {**os.environ, "TRAINGUARD_URL": server.url}
    try:
        shown = run("mode", "lab", env=env)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines() == [
            "lab: monitor",
            "  group canary: approve (configured; switch it with trainguard mode --group canary lab MODE)",
        ]
        switched = run("mode", "--group", "canary", "lab", "monitor", env=env)
        assert (switched.returncode, switched.stdout.strip()) == (0, "lab group canary: monitor (set by an operator)")
        assert run("mode", "lab", "--group", "canary", env=env).stdout.strip() == (
            "lab group canary: monitor (set by an operator)"
        )
        unknown = run("mode", "--group", "nope", "lab", "act", env=env)
        assert unknown.returncode == 2
        assert "no node group 'nope' (configured: canary)" in unknown.stderr
    finally:
        server.stop()


def test_serve_refuses_a_group_in_act_mode_without_a_scheduler(tmp_path: Path) -> None:
    config = tmp_path / "tg.yaml"
    config.write_text(yaml.safe_dump({"clusters": {"lab": {"node_groups": [CANARY]}}}))
    out = run("serve", "--config", str(config), "--db", str(tmp_path / "tg.db"), "--port", "1")
    assert out.returncode == 2
    assert "clusters.lab.node_groups.0.mode is act but clusters.lab.scheduler is not set" in out.stderr
