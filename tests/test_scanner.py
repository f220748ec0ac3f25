"""Scanner v2: both engines agree, precedence, multi-line events, tokens, unwrapping, unclassified lines."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from exporters.catalog import parse_catalog
from exporters.engines import hyperscan_available, validate
from exporters.events import Finding
from exporters.exporter import Exporter, ExporterConfig
from exporters.patterns import Matcher, StreamScanner, load_catalog
from exporters.patterns_cli import scan_stream
from exporters.rows import CatalogError
from exporters.tokens import line_tokens, pci_bus_id
from exporters.unknown import mine, render
from exporters.unwrap import Unwrapper
from trainguard.cli import main

DATA = Path(__file__).parent / "data"
CATALOG = load_catalog()
ENGINES = ["re", "hyperscan"] if hyperscan_available() else ["re"]
MATCHERS = {name: Matcher(CATALOG, name) for name in ENGINES}
RE = MATCHERS["re"]
HDR = "id,category,severity,regex,description,example,counterexample\n"


def _texts() -> list[str]:
    texts = [p.example for p in CATALOG] + [p.counterexample for p in CATALOG]
    texts += [p.read_text(encoding="utf-8") for p in sorted((DATA / "exporter").glob("*.log"))]
    for path in sorted((DATA / "corpus").glob("*.jsonl")):
        texts += [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line]
    return texts


def _key(found: list[Finding]) -> list[tuple[object, ...]]:
    return [(f.line, f.pattern.id if f.pattern else None, f.kind, f.text, sorted(f.tokens.items())) for f in found]


@pytest.mark.skipif(len(ENGINES) < 2, reason="hyperscan does not import here")
def test_both_engines_give_identical_results() -> None:
    texts = _texts()
    assert len(texts) > 100
    for text in texts:
        data = text.encode()
        assert _key(MATCHERS["hyperscan"].scan(data)) == _key(RE.scan(data)), text[:200]
    joined = "\n".join(texts).encode()
    assert _key(MATCHERS["hyperscan"].scan(joined)) == _key(RE.scan(joined))


@pytest.mark.parametrize("engine", ENGINES)
def test_precedence_is_catalog_order(engine: str) -> None:
    rows = HDR + "generic_timeout,collective_timeout,warning,timed out,t,timed out,x\n"
    rows += "ecc_cause,infra_gpu,critical,ECC error,e,ECC error,x\n"
    m = Matcher(parse_catalog(rows), engine)
    line = b"RuntimeError: operation timed out after an uncorrectable ECC error\n"
    assert [f.pattern.id for f in m.matches(line) if f.pattern] == ["generic_timeout"]
    swapped = Matcher(parse_catalog(HDR + "\n".join(reversed(rows.splitlines()[1:])) + "\n"), engine)
    assert [f.pattern.id for f in swapped.matches(line) if f.pattern] == ["ecc_cause"]


def test_rows_never_match_across_lines() -> None:
    m = Matcher(parse_catalog(HDR + "x,app_error,info,foo[^!]*bar\\s+baz,d,foo bar baz,no\n"), "re")
    assert m.matches(b"foo\nbar baz\n") == []
    assert [f.line for f in m.matches(b"ok\nfoo - bar  baz\n")] == [2]


@pytest.mark.parametrize(
    ("regex", "message"),
    [("(?=a)b", "lookaround"), ("(a)\\1", "backreferences"), ("(?i)abc", "inline flags"), ("a\\nb", "newlines")],
)
def test_row_dialect_is_checked_and_names_the_row(regex: str, message: str) -> None:
    with pytest.raises(CatalogError, match=f"bad_row.*{message}"):
        parse_catalog(HDR + f"bad_row,app_error,info,{regex},d,ab,x\n")


def test_every_row_compiles_in_every_engine() -> None:
    validate(CATALOG)


def test_xid_table_rows_and_actions(capsys: pytest.CaptureFixture[str]) -> None:
    xid79 = RE.by_id["xid_79_fallen_off_bus"]
    assert xid79.action == "RESTART_BM"
    assert "RESTART_BM" in xid79.description
    ids = [p.id for p in CATALOG]
    block = [i for i, p in enumerate(CATALOG) if p.xid is not None]
    assert block == list(range(block[0], block[-1] + 1)), "one block"
    assert ids[block[-1]] == "xid_other"
    assert ids.index("nvrm_follow_on_xid") == block[0] - 1, "where the #@xid_catalog.csv line places them"
    for line in ("NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, x", "NVRM: Xid (0000:3b:00): 79, pid=1, x"):
        assert RE.match_line(line) is xid79
    assert main(["patterns", "list"]) == 0
    assert "RESTART_BM" in capsys.readouterr().out


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("prefix", ["", "[rank3]: ", "[default0]:", "0: ", "[1,0]<stderr>:"])
def test_chained_traceback_is_one_event_named_by_its_best_row(engine: str, prefix: str) -> None:
    body = [
        "Traceback (most recent call last):",
        '  File "train.py", line 10, in <module>',
        "    loss.backward()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "train.py", line 12, in <module>',
        '    raise DistBackendError("unhandled cuda error")',
        "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled cuda error, NCCL version 2.19.3",
    ]
    data = ("step 1 ok\n" + "".join(prefix + line + "\n" for line in body) + "step 2 ok\n").encode()
    found = Matcher(CATALOG, engine).scan(data)
    assert [(f.line, f.pattern.id if f.pattern else f.kind) for f in found] == [(12, "nccl_unhandled_cuda_error")]
    if prefix == "[rank3]: ":
        assert found[0].rank == "3"


def test_traceback_without_a_row_is_unclassified_at_its_exception_line() -> None:
    data = b'Traceback (most recent call last):\n  File "a.py", line 1\nKeyboardInterrupt\nnext\n'
    found = RE.scan(data)
    assert [(f.line, f.pattern, f.kind) for f in found] == [(3, None, "traceback")]


def test_interleaved_ranks_get_one_event_each() -> None:
    lines = []
    for step in ("Traceback (most recent call last):", '  File "a.py", line 1', "    f()"):
        lines += [f"[rank0]: {step}", f"[rank1]: {step}"]
    lines += ["[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried", "[rank1]: ValueError: bad"]
    found = RE.scan(("\n".join(lines) + "\n").encode())
    assert [(f.rank, f.pattern.id if f.pattern else f.kind) for f in found] == [
        ("0", "cuda_oom"),
        ("1", "python_exception"),
    ]


ELASTIC = """\
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-01_10:00:00
  host      : gpu-017.cluster
  rank      : 5 (local_rank: 1)
  exitcode  : -9 (pid: 1234)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 1234
============================================================
"""


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("with_traceback", [True, False])
def test_torchelastic_summary_is_one_event_with_root_cause(engine: str, with_traceback: bool) -> None:
    text = ELASTIC if with_traceback else ELASTIC[ELASTIC.index("torch.distributed") :]
    found = Matcher(CATALOG, engine).scan((text + "after\n").encode())
    assert len(found) == 1
    f = found[0]
    assert f.pattern is not None
    assert f.tokens == {"rank": "5", "host": "gpu-017.cluster", "exitcode": "-9", "signal": "SIGKILL"}
    out = io.StringIO()
    scan_stream(Matcher(CATALOG, engine), io.BytesIO(text.encode()), out)
    obj = json.loads(out.getvalue())
    assert (obj["rank"], obj["exitcode"], obj["signal"]) == (5, -9, "SIGKILL")


@pytest.mark.parametrize("engine", ENGINES)
def test_multi_line_nvrm_message_is_joined(engine: str) -> None:
    rows = HDR + "gpu_off_bus,infra_gpu,critical,installed in this system has NVRM: fallen off the bus,d,x,y\n"
    m = Matcher(parse_catalog(rows), engine)
    data = (
        b"[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        b"               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        b"               NVRM: fallen off the bus and is not responding to commands.\n"
        b"[ 1843.5] usb 1-1: new device\n"
    )
    found = m.scan(data)
    assert [(f.line, f.pattern.id if f.pattern else None) for f in found] == [(2, "gpu_off_bus")]
    assert found[0].tokens["pci"] == "0000:b3:00.0"


def test_nvrm_lines_before_an_xid_name_its_gpu_and_xid_floods_stay_single() -> None:
    data = (
        b"NVRM: GPU at PCI:0000:3b:00: GPU-8a5f3f0c\n"
        b"NVRM: GPU Board Serial Number: 1234\n"
        b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1896, name=python3, GPU has fallen off the bus.\n"
    ) + b"[ 1.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.\n" * 3
    found = RE.scan(data)
    assert [(f.line, f.pattern.id if f.pattern else None) for f in found] == [
        (n, "xid_79_fallen_off_bus") for n in (3, 4, 5, 6)
    ]
    assert all(f.tokens["pci"] == "0000:3b:00.0" for f in found)


@pytest.mark.parametrize("cut", [1, 3, 6, 12, 19])
def test_events_held_across_chunks_and_finished_when_idle(cut: int) -> None:
    clock = [100.0]
    sc = StreamScanner(RE, clock=lambda: clock[0])
    lines = ELASTIC.encode().splitlines(keepends=True)
    found = sc.feed(b"".join(lines[:cut]))
    assert found == []
    assert sc.deadline == 100.5
    found = sc.feed(b"".join(lines[cut:]))
    found += sc.due()
    assert found == [], "held: the next line may continue it"
    clock[0] = 100.6
    found = sc.due()
    assert len(found) == 1
    assert found[0].tokens["rank"] == "5"
    assert sc.deadline is None


def test_exporter_counts_an_event_split_across_reads(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "progress").mkdir()
    cfg = ExporterConfig(
        cluster="lab",
        host="gpu-017",
        log_globs=[str(tmp_path / "logs" / "*.log")],
        progress_dir=tmp_path / "progress",
        nvml=False,
        workload="42",
        scheduler="slurm",
    )
    registry = CollectorRegistry()
    exp = Exporter(cfg, registry)
    log = tmp_path / "logs" / "train.log"
    log.write_text("")
    exp.poll_once()
    half = ELASTIC.index("Root Cause")
    with log.open("a") as f:
        f.write(ELASTIC[:half])
    exp.poll_once()
    with log.open("a") as f:
        f.write(ELASTIC[half:])
    exp.poll_once()
    assert exp.next_deadline() is not None
    exp.flush_idle(now=exp.next_deadline() or 0.0)
    labels = {"cluster": "lab", "workload": "42", "scheduler": "slurm", "attempt": "0", "host": "gpu-017.cluster"}
    got = registry.get_sample_value(
        "trainguard_log_pattern_matches_total",
        {**labels, "rank": "5", "pattern": "sigkill", "category": "app_error"},
    )
    assert got == 1, "the summary is one event, named by its root cause's signal"
    with log.open("a") as f:
        f.write("FATAL: something new broke\n")
    exp.poll_once()
    unknown = {**labels, "host": "gpu-017", "rank": "", "kind": "fatal"}
    assert registry.get_sample_value("trainguard_log_unclassified_total", unknown) == 1


@pytest.mark.parametrize(
    ("line", "tokens"),
    [
        (
            "[1716469163.391341] [gpu-017:12345:0]  ib_iface.c:741 UCX ERROR ibv_poll_cq failed",
            {"host": "gpu-017"},
        ),
        ("gpu-017:12345:12390 [3] NCCL WARN x", {"host": "gpu-017", "gpu": "3"}),
        ("NVRM: Xid (PCI:0000:10:1c): 79, pid=1", {"pci": "0000:10:1c.0"}),
        ("NVRM: The NVIDIA GPU 0000:3B:00.0", {"pci": "0000:3b:00.0"}),
        ("[rank7]: RuntimeError: x", {"rank": "7"}),
        ("12:34:56 nothing", {}),
    ],
)
def test_tokens(line: str, tokens: dict[str, str]) -> None:
    assert line_tokens(line) == tokens


def test_pci_ids_are_not_clock_times() -> None:
    assert pci_bus_id("10:01:02 all good") is None


def test_json_and_cri_lines_are_unwrapped_in_place() -> None:
    data = (
        b'{"log":"RuntimeError: CUDA error: an illegal memory access was encountered\\n","stream":"stderr"}\n'
        b'{"labels":{"pod":"x"},"line":"gpu-017:1:2 [0] NCCL WARN Call to ibv_create_qp failed"}\n'
        b'{"level":"error","msg":"torch.OutOfMemoryError: CUDA out of memory. Tried"}\n'
        b"2024-05-01T10:00:00.123456789Z stderr P RuntimeError: CUDA error: uncorrectable \n"
        b"2024-05-01T10:00:00.223456789Z stderr F ECC error encountered\n"
        b"plain line\n"
    )
    for m in MATCHERS.values():
        found = [(f.line, f.pattern.id if f.pattern else None) for f in m.scan(data)]
        assert found == [
            (1, "cuda_illegal_address"),
            (2, "ib_verbs_failure"),
            (3, "cuda_oom"),
            (5, "cuda_uncorrectable_ecc"),
        ]


def test_cri_partial_is_held_across_buffers() -> None:
    u = Unwrapper()
    assert u.feed(b"2024-05-01T10:00:00Z stdout P abc\n") == (b"\n", [0])
    assert u.feed(b"2024-05-01T10:00:01Z stdout F def\n") == (b"abcdef\n", [0])
    assert u.feed(b"plain\n") == (b"plain\n", None)


def test_unknown_groups_unclassified_lines_into_templates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "train.log"
    lines = [f"[rank{r}]: ERROR shard {r} checksum mismatch in /data/part-{r}.arrow" for r in range(5)]
    lines += ["FATAL: disk quota exceeded on /scratch/user1", "ok", "RuntimeError: CUDA out of memory. Tried"]
    log.write_text("\n".join(lines) + "\n")
    assert main(["patterns", "unknown", str(log), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(t["count"], t["kind"]) for t in got] == [(5, "error"), (1, "fatal")]
    assert "<" in got[0]["template"]
    assert got[0]["first_line"] == 1
    assert main(["patterns", "unknown", str(log)]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[:2] == ["5", "error"]
    assert render(mine([])) == ""


def test_scan_prints_a_summary_even_when_nothing_matched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "ok.log"
    log.write_text("all good\n")
    assert main(["patterns", "scan", str(log)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "0 findings" in captured.err


def test_pci_ids_map_to_gpu_indexes_through_nvml() -> None:
    from types import SimpleNamespace  # noqa: PLC0415 - only this test fakes pynvml

    from exporters.nvml import pci_to_gpu  # noqa: PLC0415

    buses = {"h0": b"00000000:10:1C.0", "h1": "00000000:3B:00.0"}
    nv = SimpleNamespace(nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=buses[h]))
    mapping = pci_to_gpu(nv, [("0", "h0"), ("1", "h1"), ("2", "missing")])
    assert mapping == {"0000:10:1c.0": "0", "0000:3b:00.0": "1"}
    m = Matcher(CATALOG, "re", pci_gpu=mapping)
    found = m.scan(b"[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.\n")
    assert found[0].tokens == {"pci": "0000:3b:00.0", "gpu": "1"}


def test_collapse_folds_a_flood_but_not_lines_that_differ() -> None:
    xid = "NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, GPU has fallen off the bus.\n"
    flood = "".join(f"[ {1000 + i}.{i:06d}] {xid}" for i in range(5000))
    tail = " Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)\n"
    data = (flood + f"[Sat Nov 28 10:01:02 2026] {xid}" + f"[Rank 3]{tail}" * 4 + f"[Rank 5]{tail}" * 4).encode()
    for m in MATCHERS.values():
        found = StreamScanner(m, collapse=True).feed(data)
        assert [(f.pattern.id if f.pattern else None, f.rank, f.count, f.line) for f in found] == [
            ("xid_79_fallen_off_bus", None, 5001, 1),
            ("nccl_watchdog_timeout", "3", 4, 5002),
            ("nccl_watchdog_timeout", "5", 4, 5006),
        ]
        assert len(StreamScanner(m).feed(data)) == 5009, "without collapse: one finding a line"


def test_unknown_reads_standard_input_and_explains_itself() -> None:
    import subprocess  # noqa: PLC0415 - a real process, as an operator runs it
    import sys  # noqa: PLC0415

    root = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-m", "trainguard.cli", "patterns", "unknown"]
    out = subprocess.run(
        [*argv, "-"],
        input=b"ok\nERROR: lost 3 items\nERROR: lost 7 items\n",
        capture_output=True,
        check=True,
        timeout=60,
        cwd=root,
    )
    assert out.stdout.decode().split() == ["2", "error", "ERROR:", "lost", "<NUM>", "items"]
    assert "2 error-looking lines" in out.stderr.decode()
    helptext = subprocess.run([*argv, "--help"], capture_output=True, check=True, timeout=60, cwd=root).stdout.decode()
    assert "patterns.csv" in helptext
    assert "--json" in helptext


def _stamp(i: int, style: int) -> str:
    if style == 0:
        return f"[{995 + i * 0.37:12.6f}] "  # the width changes as the seconds pass 999
    if style == 1:
        return f"[Sat Nov 28 10:{i // 60 % 60:02d}:{i % 60:02d} 2026] "
    return ""


@pytest.mark.parametrize("engine", ENGINES)
def test_a_flood_split_over_buffers_counts_every_line_once(engine: str) -> None:
    """Floods of each stamp style, broken by other lines, fed in uneven buffers: the collapsed counts add up
    to the lines, row by row, and the line numbers and counts do not depend on where the buffers split."""
    import random  # noqa: PLC0415 - only this test splits at random

    xid = "NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, GPU has fallen off the bus.\n"
    lines = [_stamp(i, style) + xid for style in (0, 1, 2) for i in range(3000)]
    lines[4000:4000] = ["[rank3]: step 10 | loss 2.0\n", "[ 1.0] [ 2.0] " + xid, "[ 12.0]" + xid, xid]
    data = "".join(lines).encode()
    m = MATCHERS[engine]
    per_line = StreamScanner(m).feed(data)
    assert len(per_line) == len(lines) - 1
    rnd = random.Random(5)
    for _ in range(3):
        sc = StreamScanner(m, collapse=True)
        found: list[Finding] = []
        pos = 0
        while pos < len(data):
            cut = data.find(b"\n", pos + rnd.randrange(1, 200_000)) + 1 or len(data)
            found += sc.feed(data[pos:cut])
            pos = cut
        assert sum(f.count for f in found) == len(per_line)
        assert {f.pattern.id if f.pattern else None for f in found} == {"xid_79_fallen_off_bus"}
        assert sc.lines == len(lines)
        covered = sorted(line for f in found for line in range(f.line, f.line + f.count))
        assert covered == [f.line for f in per_line], "every counted line is a line that matched"


def test_run_end_is_what_the_run_regex_matches() -> None:
    """The fast flood check gives exactly the run regex's answer, on runs that break in every way."""
    from exporters.scanner import run_end  # noqa: PLC0415 - the function under test

    key = b"NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, GPU has fallen off the bus."
    sc = StreamScanner(RE)
    rx = sc.run_regex(key)
    ok = [b"[ 8901.234567] ", b"[18901.234567] ", b"[Sat Nov 28 10:01:02 2026] ", b""]
    breaks = [
        b"[ 8901.23456x] ",
        b"[ 8901.2345671] ",
        b"[\n8901.2] ",
        b"x",
        b"[ 8901.234567]  ",
        b"[Sat Nov 28 1:01:02 2026] ",
    ]
    for good in ok:
        for bad in breaks:
            for n in (1, 5, 5000):
                for tail in (key, key[:-1] + b"!", b""):
                    buf = b"".join(good.replace(b"8901", str(8901 + i).encode()[-4:]) + key + b"\n" for i in range(n))
                    buf += bad + tail + b"\n" + good + key + b"\n"
                    m = rx.match(buf, 0)
                    want = (m.end(), buf.count(b"\n", 0, m.end())) if m else (0, 0)
                    assert run_end(buf, 0, key, rx) == want, (good, bad, n, tail)


@pytest.mark.parametrize("engine", ENGINES)
def test_findings_do_not_depend_on_the_engine_segment(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Events that straddle segments (the engine scans a buffer a segment at a time) come out the same."""
    import exporters.scanner  # noqa: PLC0415 - its segment size is what varies

    joined = ("\n".join(_texts()) + "\n").encode()
    m = MATCHERS[engine]
    monkeypatch.setattr(exporters.scanner, "SEGMENT", 1 << 30)
    want = _key(m.scan(joined))
    counts = [f.count for f in StreamScanner(m, collapse=True).feed(joined)]
    for segment in (1, 100, 4096):
        monkeypatch.setattr(exporters.scanner, "SEGMENT", segment)
        assert _key(m.scan(joined)) == want, segment
        assert [f.count for f in StreamScanner(m, collapse=True).feed(joined)] == counts, segment
