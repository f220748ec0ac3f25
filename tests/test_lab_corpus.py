"""The lab's corpus replay (trainguard/lab/faults.py), without the lab: which tokens are renamed, where an
excerpt goes, what each class expects. Cases are written inline so this runs without the corpus files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.lab.faults import (
    CORPUS_EXPECTED,
    CorpusCase,
    corpus_fault,
    fault_named,
    is_kernel_log,
    load_corpus_case,
)
from trainguard.lab.slurm import LabError

NCCL_IB = (
    "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer "
    "10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
    "kp-ddp-worker-0:3468:3905 [4] NCCL INFO proxy.cc:698 -> 6"
)


def case(text: str, tokens: tuple[str, ...], cls: str = "infra_network") -> CorpusCase:
    return CorpusCase("t-001", cls, "family", text, tokens)


def test_the_printing_host_becomes_the_lab_node_and_nothing_else_changes() -> None:
    c = case(NCCL_IB, ("kp-ddp-worker-0", "10.216.210.236<54862>", "[4]"))
    assert c.host_tokens() == ["kp-ddp-worker-0"]
    assert c.rank_tokens() == []  # [4] is the GPU index of NCCL's prefix, not a rank
    assert c.replayed("n2", "1") == NCCL_IB.replace("kp-ddp-worker-0", "n2")


def test_a_peer_named_inside_a_line_stays() -> None:
    text = "gpu004:1:2 [0] NCCL WARN NET/Socket : peer gpu004.ds-a4-r02.abc.com<55693> closed"
    c = case(text, ("gpu004", "gpu004.ds-a4-r02.abc.com<55693>"))
    assert c.replayed("n3", "2") == "n3:1:2 [0] NCCL WARN NET/Socket : peer gpu004.ds-a4-r02.abc.com<55693> closed"


def test_the_printing_rank_becomes_the_target_rank_and_other_ranks_stay() -> None:
    text = "[rank1]: Watchdog caught collective operation timeout: Rank 1 waited for Rank 10 and Rank 0"
    c = case(text, ("[rank1]", "Rank 1", "Rank 0"), "collective_timeout")
    assert c.rank_tokens() == ["[rank1]", "Rank 1"]
    assert c.replayed("n2", "2") == (
        "[rank2]: Watchdog caught collective operation timeout: Rank 2 waited for Rank 10 and Rank 0"
    )


def test_an_excerpt_of_several_ranks_keeps_them_all() -> None:
    text = "[rank0]:[E] Watchdog caught collective operation timeout\n[rank4]:[E] Watchdog caught collective"
    c = case(text, ("[rank0]", "[rank4]"), "collective_timeout")
    assert c.rank_tokens() == []
    assert c.replayed("n2", "1") == text


def test_kernel_log_excerpts_and_their_syslog_host() -> None:
    text = "Jun 12 16:12:04 fedora-box kernel: NVRM: Xid (PCI:0000:01:00): 62, 3243ec3b 0000c3d8"
    c = case(text, ("PCI:0000:01:00", "fedora-box"), "infra_gpu")
    assert is_kernel_log(text)
    assert c.replayed("n4", "3") == "Jun 12 16:12:04 n4 kernel: NVRM: Xid (PCI:0000:01:00): 62, 3243ec3b 0000c3d8"
    assert not is_kernel_log(NCCL_IB)
    assert not is_kernel_log("XID 79(GPU has fallen off the bus) detected on PCI:0000:ae:00")  # a tool's line
    assert not is_kernel_log("RuntimeError: CUDA error: uncorrectable ECC error encountered")


def write_corpus(tmp_path: Path, *cases: dict[str, object]) -> Path:
    (tmp_path / "net.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return tmp_path


def test_expected_decision_follows_the_class(tmp_path: Path) -> None:
    classes = ["infra_gpu", "infra_network", "infra_node", "app_error", "collective_timeout", "benign", "unknown"]
    rows: list[dict[str, object]] = [
        {"id": f"x-{n:03d}", "class": cls, "family": "f", "text": "RuntimeError: boom", "tokens": []}
        for n, cls in enumerate(classes)
    ]
    directory = write_corpus(tmp_path, *rows)
    got = {r["class"]: corpus_fault(str(r["id"]), directory) for r in rows[:-1]}
    assert {k: (f.action, f.implicates_target) for k, f in got.items()} == CORPUS_EXPECTED
    # the table itself, in brief: infra evidence on a node excludes it, an app error stops, a benign excerpt is no fault
    assert [got[c].action for c in ("infra_gpu", "infra_network", "infra_node")] == ["requeue_excluding"] * 3
    assert (got["app_error"].action, got["collective_timeout"].action, got["benign"].action) == (
        "stop",
        "requeue",
        None,
    )
    assert got["infra_gpu"].name == "corpus:x-000"
    with pytest.raises(LabError, match="labelled 'unknown'"):
        corpus_fault("x-006", directory)


def test_a_missing_case_says_where_it_looked(tmp_path: Path) -> None:
    directory = write_corpus(tmp_path, {"id": "net-001", "class": "infra_network", "family": "f", "text": "t"})
    assert load_corpus_case("net-001", directory).cls == "infra_network"
    with pytest.raises(LabError, match=r"corpus case 'net-999' not found in .* \(net.jsonl\)"):
        load_corpus_case("net-999", directory)
    with pytest.raises(LabError, match="unknown fault 'nope'"):
        fault_named("nope")
    assert fault_named("xid").name == "xid"
