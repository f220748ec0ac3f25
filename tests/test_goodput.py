"""Goodput accounting (responder/goodput.py) and its use in the lab benchmark's JSON (bench/lab.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from responder import goodput
from trainguard.lab.faults import TrialResult


def _bench_lab() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "bench" / "lab.py"
    spec = importlib.util.spec_from_file_location("bench_lab_under_test", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_incident_cost_is_downtime_plus_work_since_the_checkpoint() -> None:
    g = goodput.incident("xid", 100.0, 115.0, step_at_fault=14, checkpoint_step=10, step_s=0.5, attempts=2)
    assert g.time_lost_s == pytest.approx(15.0)
    assert g.work_lost_s == pytest.approx(2.0)
    assert g.lost_s == pytest.approx(17.0)
    assert g.attempts == 2


def test_unknown_parts_stay_unknown() -> None:
    not_back = goodput.incident("hang", 100.0, None, 14, 10, 0.5)
    assert not_back.lost_s is None
    no_steps = goodput.incident("hang", 100.0, 110.0, None, 10, None)
    assert no_steps.work_lost_s is None
    assert no_steps.lost_s == pytest.approx(10.0)
    assert goodput.ettr(100.0, [not_back]) is None


def test_ettr_and_lost_by_cause() -> None:
    items = [goodput.incident("xid", 0, 10, 4, 2, 1.0), goodput.incident("hang", 0, 20, None, None, None),
             goodput.incident("xid", 0, 5, None, None, None)]  # fmt: skip
    assert goodput.ettr(200.0, items) == pytest.approx(1 - 37 / 200)
    assert goodput.lost_by_cause(items) == {"hang": 20.0, "xid": 17.0}


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="before the fault"):
        goodput.incident("xid", 100.0, 50.0, None, None, None)
    with pytest.raises(ValueError, match="attempt"):
        goodput.incident("xid", 0.0, 1.0, None, None, None, attempts=0)
    with pytest.raises(ValueError, match="positive span"):
        goodput.ettr(0.0, [])


def _restarted(fault: str, job: str, productive_s: float, step_at_fault: int, trained_s: float) -> TrialResult:
    """A trial acted on and restarted from the checkpoint at step 10, at 0.5 s a step."""
    return TrialResult(fault, "act", job, "n2", ok=True, productive_s=productive_s, checkpoint_step=10,
                       step_at_fault=step_at_fault, step_s=0.5, trained_s=trained_s)  # fmt: skip


def test_lab_json_reports_ettr_and_goodput_per_class() -> None:
    lab = _bench_lab()
    trials = [
        _restarted("xid", "1", productive_s=15.0, step_at_fault=14, trained_s=45.0),
        _restarted("hang", "2", productive_s=30.0, step_at_fault=10, trained_s=30.0),
        TrialResult("xid", "monitor", "3", "n2", ok=True, trained_s=40.0),  # never restarted: cost unknown
    ]
    overall = lab.aggregate(trials)["goodput"]
    assert overall["lost_by_cause_s"] == {"hang": 30.0, "xid": 17.0}
    assert overall["span_s"] == pytest.approx(120.0)
    assert overall["ettr"] == pytest.approx(round(1 - 47 / 120, 3))
    per = lab.per_class(trials)
    assert per["xid/act"]["goodput"]["ettr"] == pytest.approx(round(1 - 17 / 60, 3))
    assert per["xid/monitor"]["goodput"]["ettr"] is None
    result = {"run": "t", "machine": {"summary": "m"}, "per_class": per, **lab.aggregate(trials)}
    report = lab.markdown(result, None)
    assert "| ETTR (observed spans) | 0.608 |" in report
    assert "| xid/act | 1 | 1/1 |" in report
    assert "0.717" in report
