"""The lab fault class ``intermittent`` on the real stack (marker e2e): Slurm, exporters, Prometheus,
Alertmanager, the responder and a real 2-rank PyTorch job.

One node makes every attempt that runs on it time out on every rank with the same NCCL watchdog line:
no line names a node. The responder must find it through the restarts (responder/experiments.py) and
blame it, with that node in the job's ExcNodeList (read back from Slurm) beside at most the healthy
nodes an experiment pinned out, while never excluding more nodes than the spare-node budget.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.services import unavailable
from trainguard.lab.intermittent import BREAKER, POLICY, run_intermittent
from trainguard.lab.slurm import Lab, missing_requirements

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_intermittent_node_is_found_through_restarts() -> None:
    missing = missing_requirements()
    if missing:
        unavailable("the lab needs: " + "; ".join(missing))
    lab = Lab(Path(tempfile.mkdtemp(prefix="trainguard-intermittent-")), port_base=19800, policy=POLICY,
              breaker=BREAKER, say=lambda message: None)  # fmt: skip
    with lab.running():
        trial = run_intermittent(lab, say=print)
        records = lab.decisions(trial.job)
    assert trial.ok, (trial.note, trial.events)
    assert trial.implicated == [trial.target]
    # Slurm's ExcNodeList, read back: the bad node, and at most the healthy nodes the last experiment
    # pinned out of the running attempt (dropped at its next restart).
    sections = [r["attribution"]["localization"] for r in records if "localization" in r["attribution"]]
    assert trial.target in trial.excluded
    assert set(trial.excluded) - {trial.target} <= {n for s in sections for n in s.get("pinned", [])}
    budget = POLICY["localize"]["spare_nodes"]
    assert all(len(r["excluded_nodes"]) <= budget for r in records)
    assert any(s.get("split") for s in sections), "at least one split was tried"
    assert all(s["steps"] for s in sections), "every step explained"
    # Nothing named a node: no decision implicates one until the search blames the bad node.
    assert all(r["implicated_nodes"] in ([], [trial.target]) for r in records)
