"""End to end on the real stack (marker e2e): Slurm, exporters, Prometheus, Alertmanager, responder.

A real 3-rank PyTorch job on a 4-node Slurm lab gets a GPU fault (XID 79 in node n2's kernel log,
its rank dies with a CUDA error); the responder must requeue it excluding n2, and training must
resume from its checkpoint on the other nodes. The same path `make demo` shows, reduced to one trial.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.services import unavailable
from trainguard.lab.faults import FAULTS, run_trial
from trainguard.lab.slurm import Lab, missing_requirements

pytestmark = pytest.mark.e2e


def test_gpu_fault_is_detected_isolated_and_training_resumes_elsewhere() -> None:
    missing = missing_requirements()
    if missing:
        unavailable("the lab needs: " + "; ".join(missing))
    root = Path(tempfile.mkdtemp(prefix="trainguard-e2e-"))
    lab = Lab(root, port_base=19600, say=lambda message: None)
    with lab.running():
        trial = run_trial(lab, FAULTS["xid"], say=lambda message: None)
        records = lab.decisions(trial.job)
    assert trial.action == "requeue_excluding", trial.events
    assert trial.implicated == [trial.target]
    assert trial.excluded == [trial.target]
    assert trial.outcome == "done"
    assert trial.productive_s is not None, trial.events
    assert trial.ok, trial.note
    [record] = records
    assert record["mode"] == "act"
    assert record["verified"] is True
    assert record["failure_class"] == "infra"
    # Latency figures are benchmarks (bench/lab.py), not assertions; only sanity here.
    assert trial.detection_s is not None
    assert trial.detection_s < 30
