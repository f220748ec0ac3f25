"""Identity label values: what the schedulers accept as names, and nothing else."""

from __future__ import annotations

import pytest

from trainguard.identity import IdentityError, identity_from_labels, validate_host, validate_workload

GOOD = {"cluster": "lab", "workload": "4242", "scheduler": "slurm", "attempt": "0", "rank": "7", "host": "gpu-017"}


@pytest.mark.parametrize("workload", ["1", "4242", "1234_7", "9999999999"])
def test_slurm_job_ids(workload: str) -> None:
    assert validate_workload(workload, "slurm") == workload


@pytest.mark.parametrize("workload", ["ml/llama-70b", "default/job.v2", "a/b"])
def test_kubernetes_names(workload: str) -> None:
    assert validate_workload(workload, "jobset") == workload
    assert validate_workload(workload) == workload


@pytest.mark.parametrize(
    "workload",
    ["", "0", "12; rm -rf /", "$(reboot)", "`id`", "-1", "12 13", "1234\n", "ML/Upper", "ns/", "/name",
     "ns/name/extra", "a" * 64 + "/x", "12345678901"],
)  # fmt: skip
def test_hostile_or_malformed_workloads(workload: str) -> None:
    with pytest.raises(IdentityError):
        validate_workload(workload)


def test_workload_checked_against_its_scheduler() -> None:
    with pytest.raises(IdentityError):
        validate_workload("ml/llama", "slurm")
    with pytest.raises(IdentityError):
        validate_workload("4242", "jobset")


@pytest.mark.parametrize("host", ["n1", "gpu-017", "node01.cluster.local", "A1"])
def test_hosts(host: str) -> None:
    assert validate_host(host) == host


@pytest.mark.parametrize("host", ["n1 && reboot", "-rf", "n[1-4]", "n1,n2", "", "a" * 64, "n1.", ".n1", "n_1"])
def test_hostile_hosts(host: str) -> None:
    with pytest.raises(IdentityError):
        validate_host(host)


def test_identity_from_labels_names_the_bad_label() -> None:
    ident = identity_from_labels(GOOD)
    assert (ident.cluster, ident.workload, ident.attempt, ident.host, ident.rank) == (
        "lab",
        "4242",
        "0",
        "gpu-017",
        "7",
    )
    for label, value in [("rank", "-1"), ("attempt", "01"), ("scheduler", "pbs"), ("cluster", "la b")]:
        with pytest.raises(IdentityError, match=label):
            identity_from_labels({**GOOD, label: value})
