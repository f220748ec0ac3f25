"""The real detection path ending at the real responder: exporter series -> Prometheus (fast profile)
-> Alertmanager (fast profile, bearer token from a file) -> ``trainguard serve`` -> audit record.

For each fault the test asserts the decision the responder records (monitor mode: outcome planned)
and that its evidence holds the alert with the labels the rules promise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.services import require_binary, wait_until
from trainguard.lab.stack import LabExporter, Stack, decisions, pipeline, responder_available, xid_alert_labels

pytestmark = pytest.mark.prometheus

IDENT = {"cluster": "lab", "scheduler": "slurm", "attempt": "0"}
SLACK_S = 6.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    for binary in ("prometheus", "prometheus-alertmanager"):
        require_binary(binary)
    if not responder_available():
        pytest.fail("trainguard serve --host --port --db is not available: make install")
    exporter = LabExporter()
    exporter.add_rank("77", 0, "gpu-001")
    exporter.add_rank("77", 1, "gpu-002")
    exporter.add_gpu("gpu-002", 0)
    exporter.add_rank("88", 0, "gpu-003", patterns=[("cuda_oom", "app_error")])
    exporter.add_rank("88", 1, "gpu-004", patterns=[("cuda_oom", "app_error")])
    workdir: Path = tmp_path_factory.mktemp("pipeline-responder")
    with pipeline("fast", workdir, exporter, responder=True) as s:
        yield s


def _decision(stack: Stack, workload: str, timeout: float) -> dict[str, Any]:
    assert stack.responder is not None
    responder = stack.responder
    found = wait_until(
        lambda: decisions(responder, workload=workload), timeout, interval=0.2, what=f"a decision on {workload}"
    )
    assert isinstance(found, list)
    return dict(found[-1])  # newest first: the last is the first decision


def test_xid_on_a_node_excludes_it_and_an_application_error_does_not(stack: Stack) -> None:
    stack.exporter.xid("gpu-002", 0, 79)
    stack.exporter.match_pattern(("88", "0", "1"), "cuda_oom", "app_error")

    infra = _decision(stack, "77", SLACK_S)
    assert {k: infra[k] for k in ("cluster", "scheduler", "attempt")} == IDENT
    assert infra["mode"] == "monitor"
    assert infra["outcome"] == "planned"
    assert infra["failure_class"] == "infra"
    assert infra["action"] == "requeue_excluding"
    assert infra["implicated_nodes"] == ["gpu-002"]
    assert "xid_79" in infra["patterns"]
    evidence = [e["labels"] for e in infra["evidence"] if e["labels"].get("alertname") == "TrainguardGpuXid"]
    assert evidence
    assert evidence[0] == xid_alert_labels({**IDENT, "workload": "77"}, "gpu-002")

    app = _decision(stack, "88", SLACK_S)
    assert app["failure_class"] == "app"
    assert app["action"] not in {"requeue_excluding", "drain_node"}
    assert app["implicated_nodes"] == []
    assert "cuda_oom" in app["patterns"]
