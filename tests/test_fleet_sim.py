"""The fleet simulator (bench/fleet/sim.py) serves what the rules read, and its faults change it.

The scale and churn figures of docs/scale.md are only as good as the simulator's exposition: these
tests scrape it over real HTTP and parse it with prometheus_client's own parser.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.fleet.sim import PATTERN, Fleet, host_name


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    sim = Fleet(3)
    sim.start()
    yield sim
    sim.stop()


def scrape(fleet: Fleet, node: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{fleet.port}/node/{node}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_a_busy_node_serves_eight_ranks_with_identity_labels_and_eight_gpus(fleet: Fleet) -> None:
    fleet.start_job("job-a", [0, 1])
    series = scrape(fleet, 1)
    ranks = sorted(int(labels["rank"]) for labels, _ in series["trainguard_rank_heartbeat_timestamp_seconds"])
    assert ranks == list(range(8, 16))  # the job's second node holds ranks 8..15
    labels, _ = series["trainguard_log_pattern_matches_total"][0]
    assert labels["workload"] == "job-a"
    assert labels["host"] == host_name(1)
    assert (labels["pattern"], labels["category"]) == PATTERN
    assert len(series["DCGM_FI_DEV_XID_ERRORS"]) == 8
    assert fleet.series() == 2 * 8 * 7 + 3 * 8


def test_faults_change_the_served_values(fleet: Fleet) -> None:
    fleet.start_job("job-a", [0])
    fleet.log_pattern("job-a", 3)
    fleet.xid(0, 5, 79)
    t_crash = fleet.crash("job-a", 4)
    series = scrape(fleet, 0)
    logs = {labels["rank"]: value for labels, value in series["trainguard_log_pattern_matches_total"]}
    assert logs["3"] == 1
    assert logs["2"] == 0
    xid = {labels["gpu"]: value for labels, value in series["DCGM_FI_DEV_XID_ERRORS"]}
    assert xid["5"] == 79
    assert xid["4"] == 0
    alive = {labels["rank"]: value for labels, value in series["trainguard_rank_process_alive"]}
    assert alive["4"] == 0
    assert alive["3"] == 1
    beats = {labels["rank"]: value for labels, value in series["trainguard_rank_heartbeat_timestamp_seconds"]}
    assert beats["4"] == pytest.approx(t_crash, abs=0.01)
    assert beats["3"] > t_crash


def test_an_ended_job_leaves_only_the_gpus_and_a_lost_node_answers_503(fleet: Fleet) -> None:
    fleet.start_job("job-a", [2])
    fleet.end_job("job-a")
    assert set(scrape(fleet, 2)) == {"DCGM_FI_DEV_XID_ERRORS"}
    fleet.lose_node(2)
    with pytest.raises(urllib.error.HTTPError) as err:
        scrape(fleet, 2)
    err.value.close()
    assert err.value.code == 503


def test_file_sd_names_every_node_as_its_own_target(fleet: Fleet, tmp_path: Path) -> None:
    groups = yaml.safe_load(fleet.file_sd(tmp_path / "targets.yml").read_text())
    assert [g["labels"]["__metrics_path__"] for g in groups] == [f"/node/{i}/metrics" for i in range(3)]
    assert [g["labels"]["instance"] for g in groups] == [host_name(i) for i in range(3)]
