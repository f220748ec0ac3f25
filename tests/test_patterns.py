"""The pattern catalog: every row on its own example and counterexample, benign lines, tokens, scan CLI."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporters.patterns import (
    CATEGORIES,
    HARMLESS,
    CatalogError,
    Matcher,
    Pattern,
    line_host,
    line_rank,
    load_catalog,
    parse_catalog,
)
from exporters.patterns_cli import scan_stream
from tests.services import require_binary
from trainguard.cli import main

DATA = Path(__file__).parent / "data" / "exporter"
CATALOG = load_catalog()
MATCHER = Matcher(CATALOG)
APP_XIDS = {13, 31, 43, 45, 68}
XID = "NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, GPU has fallen off the bus.\n"


def _extra_examples() -> list[tuple[str, bool, str]]:
    lines = (DATA / "pattern_examples.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    text = "".join(line for line in lines if not line.startswith("#"))
    return [(r["id"], r["matches"] == "yes", r["line"]) for r in csv.DictReader(io.StringIO(text))]


@pytest.mark.parametrize("pattern", CATALOG, ids=lambda p: p.id)
def test_row_matches_its_example_through_the_whole_catalog(pattern: Pattern) -> None:
    assert MATCHER.match_line(pattern.example) is pattern
    found = MATCHER.scan((pattern.example + "\n").encode())
    # a harmless row's line is no finding at all: not counted, not unclassified
    assert [m.pattern.id if m.pattern else None for m in found] == ([] if pattern.harmless else [pattern.id])


@pytest.mark.parametrize("pattern", CATALOG, ids=lambda p: p.id)
def test_row_does_not_match_its_counterexample(pattern: Pattern) -> None:
    assert pattern.counterexample, "every row has a near miss"
    assert not pattern.regex.search(pattern.counterexample)


@pytest.mark.parametrize(("pid", "matches", "line"), _extra_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_extra_examples(pid: str, matches: bool, line: str) -> None:
    assert pid in MATCHER.by_id
    got = MATCHER.match_line(line)
    if matches:
        assert got is not None
        assert got.id == pid
    else:
        assert got is None or got.id != pid


def test_benign_lines_match_nothing() -> None:
    data = (DATA / "benign.log").read_bytes()
    assert MATCHER.matches(data) == []
    for line in data.decode().splitlines():
        assert MATCHER.match_line(line) is None, line


def test_every_row_compiles_in_ripgrep(tmp_path: Path) -> None:
    """The dialect (docs/patterns.md) is what Python re, Hyperscan and Rust regex share, and bench/scan.py
    runs ripgrep with the catalog's own expressions: a row that only Python and Hyperscan accept (an escaped
    quote, say) would silently drop ripgrep from the benchmark. Debian's ripgrep, a real binary."""
    rg = require_binary("rg")
    log = tmp_path / "log"
    log.write_text(XID + "a line no row names\n", encoding="utf-8")
    for pattern in CATALOG:
        out = subprocess.run([rg, "-c", "-e", pattern.source, str(log)], capture_output=True, text=True, check=False)
        assert out.returncode in (0, 1), f"{pattern.id}: ripgrep refuses its regex: {out.stderr.strip()[-300:]}"


def test_catalog_shape() -> None:
    ids = [p.id for p in CATALOG]
    assert len(ids) == len(set(ids))
    assert {p.category for p in CATALOG} == {*CATEGORIES, HARMLESS}
    required = {
        "nccl_watchdog_timeout",
        "nccl_unhandled_cuda_error",
        "nccl_remote_error",
        "nccl_internal_error",
        "cuda_illegal_address",
        "cuda_launch_failure",
        "cuda_uncorrectable_ecc",
        "ib_completion_error",
        "nccl_socket_error",
        "gloo_timeout",
        "torch_elastic_child_failed",
        "cuda_oom",
        "nan_loss",
        "segfault",
        "sigkill",
        "host_oom_killer",
        "xid_79_fallen_off_bus",
        "xid_other",
    }
    assert required <= set(ids)
    xid_ids = [i for i in ids if i.startswith("xid_")]
    assert xid_ids[-1] == "xid_other", "the catch-all XID row comes after every XID row"


XID_TABLE = {
    int(r["code"]): r
    for r in csv.DictReader(
        line
        for line in (Path(__file__).parents[1] / "exporters" / "xid_catalog.csv").read_text().splitlines()
        if not line.startswith("#")
    )
}


@pytest.mark.parametrize("pattern", [p for p in CATALOG if p.id.startswith("xid_")], ids=lambda p: p.id)
def test_xid_category_follows_the_xid_table(pattern: Pattern) -> None:
    m = re.fullmatch(r"xid_(\d+)_[a-z0-9_]+", pattern.id)
    if m is None:
        assert pattern.id == "xid_other"
        assert pattern.category == "infra_gpu"
        return
    code = int(m.group(1))
    assert pattern.category == XID_TABLE[code]["category"]
    if code in APP_XIDS:  # NVIDIA's device plugin: application errors, the GPU stays healthy
        assert pattern.category == "app_error"
    line = f"NVRM: Xid (PCI:0000:10:1c): {code}, pid=1, name=python3, test"
    assert MATCHER.match_line(line) is pattern


def test_xid_table_covers_every_documented_code() -> None:
    """NVIDIA's Xid catalog documents codes 1 to 172; each has a row, with NVIDIA's action where it gives one."""
    assert set(XID_TABLE) == set(range(1, 173))
    assert XID_TABLE[79]["action"] == "RESTART_BM"
    assert XID_TABLE[48]["action"] == "WORKFLOW_XID_48"


def test_unknown_xid_is_xid_other() -> None:
    got = MATCHER.match_line("NVRM: Xid (PCI:0000:10:1c): 1234, pid=1")
    assert got is not None
    assert got.id == "xid_other"


@pytest.mark.parametrize(
    ("line", "rank", "host"),
    [
        ("[rank12]:[E1129 ProcessGroupNCCL.cpp:1] something", "12", None),
        ("[PG ID 0 PG GUID 0(default_pg) Rank 7] Exception", "7", None),
        ("  rank      : 5 (local_rank: 5)", "5", None),
        ("  host      : gpu-042.cluster.local", None, "gpu-042.cluster.local"),
        ("gpu-017:12345:12390 [3] NCCL WARN x", None, "gpu-017"),
        ("3: gpu-017:12345:12390 [3] NCCL WARN x", "3", "gpu-017"),
        ("12:34:56 INFO nothing here", None, None),
        ("bad_host!:1:2 [0] NCCL WARN", None, None),
        ("srun: error: Node failure on gpu-017", None, "gpu-017"),
        ("srun: error: Node failure on gpu-017.", None, "gpu-017"),
    ],
)
def test_rank_and_host_tokens(line: str, rank: str | None, host: str | None) -> None:
    assert line_rank(line) == rank
    assert line_host(line) == host


def test_scan_counts_lines_across_chunks() -> None:
    lines = ["ok line"] * 5000
    lines[10] = "RuntimeError: CUDA error: an illegal memory access was encountered"
    lines[4321] = "[rank2]: step 3 | loss nan"
    out = io.StringIO()
    data = ("\n".join(lines)).encode()  # no final newline
    n = scan_stream(MATCHER, io.BytesIO(data), out)
    rows = [json.loads(x) for x in out.getvalue().splitlines()]
    assert n == 2
    assert rows == [
        {"line": 11, "pattern": "cuda_illegal_address", "category": "app_error"},
        {"line": 4322, "pattern": "nan_loss", "category": "app_error", "rank": 2},
    ]


def test_patterns_scan_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "gpu-017:1:2 [0] NCCL INFO Connected all rings\n"
        "gpu-017:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> with error 12, opcode 0\n"
    )
    assert main(["patterns", "scan", str(log)]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {
        "line": 2,
        "pattern": "ib_completion_error",
        "category": "infra_network",
        "host": "gpu-017",
        "gpu": 0,
    }
    assert main(["patterns", "scan", str(tmp_path / "missing.log")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["patterns", "list"]) == 0
    assert "xid_79_fallen_off_bus" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id,category\nx,app_error\n", "header"),
        (
            "id,category,severity,regex,description,example,counterexample\nX,app_error,info,a,d,a,b\n",
            "snake",
        ),
        (
            "id,category,severity,regex,description,example,counterexample\nx,bogus,info,a,d,a,b\n",
            "category",
        ),
        (
            "id,category,severity,regex,description,example,counterexample\nx,app_error,huge,a,d,a,b\n",
            "severity",
        ),
        (
            "id,category,severity,regex,description,example,counterexample\nx,app_error,info,(,d,a,b\n",
            "compile",
        ),
        (
            "id,category,severity,regex,description,example,counterexample\n"
            "x,app_error,info,a,d,a,b\nx,app_error,info,a,d,a,b\n",
            "twice",
        ),
        (
            "id,category,severity,regex,description,example,counterexample\nx,app_error,info,(?=a),d,a,b\n",
            "lookaround",
        ),
        (
            "id,category,severity,regex,description,example,counterexample\nx,app_error,info,a,d,,b\n",
            "example",
        ),
    ],
)
def test_catalog_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        parse_catalog(text)


def test_patterns_scan_reads_standard_input() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "trainguard.cli", "patterns", "scan", "-"],
        input=b"fine\n[rank4]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n",
        capture_output=True,
        check=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert json.loads(out.stdout) == {
        "line": 2,
        "pattern": "cuda_uncorrectable_ecc",
        "category": "infra_gpu",
        "rank": 4,
    }


def test_repeated_lines_keep_their_own_rank() -> None:
    matcher = Matcher(CATALOG)
    tail = " Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=1)\n"
    data = (f"[Rank 3]{tail}[Rank 5]{tail}[ 1.5] {XID}[Sat Nov 28 10:01:02 2026] {XID}").encode()
    found = [(m.pattern.id, m.rank) for m in matcher.matches(data) if m.pattern is not None]
    assert found == [
        ("nccl_watchdog_timeout", "3"),
        ("nccl_watchdog_timeout", "5"),
        ("xid_79_fallen_off_bus", None),
        ("xid_79_fallen_off_bus", None),
    ]
