"""Scheduler settings are typed per kind: a bad value is reported with its whole key path."""

from __future__ import annotations

import pytest

from responder.errors import ConfigError
from responder.schedulers.recording import RecordingSettings
from responder.schedulers.router import build_schedulers
from responder.schedulers.slurm.adapter import SlurmScheduler
from responder.schedulers.slurm.settings import SlurmSettings
from responder.settings import load_settings


def test_a_scheduler_setting_error_names_the_full_key_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_CLUSTERS__LAB__SCHEDULER__KIND", "slurm")
    monkeypatch.setenv("TRAINGUARD_CLUSTERS__LAB__SCHEDULER__TRANSPORT", "ftp")
    with pytest.raises(ConfigError, match=r"clusters\.lab\.scheduler\.slurm\.transport: .*'ftp'"):
        load_settings()


def test_an_unknown_scheduler_kind_is_refused_with_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_CLUSTERS__LAB__SCHEDULER__KIND", "pbs")
    with pytest.raises(ConfigError, match=r"clusters\.lab\.scheduler: .*'pbs'.*'slurm'"):
        load_settings()


def test_each_kind_gives_its_adapter_named_after_its_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_CLUSTERS__LAB__SCHEDULER__KIND", "slurm")
    monkeypatch.setenv("TRAINGUARD_CLUSTERS__DEMO__SCHEDULER__KIND", "recording")
    settings = load_settings()
    assert isinstance(settings.clusters["lab"].scheduler, SlurmSettings)
    assert isinstance(settings.clusters["demo"].scheduler, RecordingSettings)
    adapters = build_schedulers(settings.schedulers()).adapters
    lab = adapters["lab"]
    assert isinstance(lab, SlurmScheduler)
    assert lab.settings.cluster == "lab"
