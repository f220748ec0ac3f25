"""Following logs by glob: rotation, truncation, late files, partial lines, no re-reading."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporters.logs import MAX_PARTIAL, Follower, KmsgSource, LogSource, SourceStats


class Sink:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __call__(self, f: Follower, data: bytes) -> None:
        assert data.endswith(b"\n")
        self.lines += [(os.path.basename(f.path), x) for x in data.decode().splitlines()]

    def texts(self) -> list[str]:
        return [t for _, t in self.lines]


Follow = Callable[..., tuple[Path, Sink, LogSource]]


def _append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def _feed(src: LogSource, path: Path, text: str) -> None:
    """Append ``text`` to ``path``, then let ``src`` poll once."""
    _append(path, text)
    src.poll()


@pytest.fixture
def follow_empty_log(tmp_path: Path) -> Iterator[Follow]:
    """``follow_empty_log(glob="train.log")``: an empty ``train.log`` followed through ``glob``, after the
    first poll (the log, the sink, the source); every source is closed after the test."""
    sources: list[LogSource] = []

    def follow(glob: str = "train.log") -> tuple[Path, Sink, LogSource]:
        log = tmp_path / "train.log"
        log.write_text("")
        sink = Sink()
        src = LogSource([str(tmp_path / glob)], sink)
        sources.append(src)
        src.poll()
        return log, sink, src

    yield follow
    for src in sources:
        src.close()


def test_existing_files_start_at_end_new_files_at_start(tmp_path: Path) -> None:
    old = tmp_path / "rank0.log"
    old.write_text("old line before the exporter started\n")
    sink = Sink()
    src = LogSource([str(tmp_path / "*.log")], sink)
    src.poll()
    assert sink.lines == []
    _append(old, "new line\n")
    late = tmp_path / "rank1.log"
    late.write_text("first line of a late file\n")
    src.poll()
    assert sorted(sink.lines) == [("rank0.log", "new line"), ("rank1.log", "first line of a late file")]
    src.poll()
    assert len(sink.lines) == 2, "nothing is read twice"
    assert src.stats.files_opened == 2
    src.close()


def test_from_start_reads_existing_content(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("one\ntwo\n")
    sink = Sink()
    src = LogSource([str(tmp_path / "*.log")], sink, from_start=True)
    src.poll()
    assert sink.texts() == ["one", "two"]
    src.close()


def test_rotation_by_rename_keeps_the_tail_of_the_old_file(follow_empty_log: Follow) -> None:
    log, sink, src = follow_empty_log()
    _feed(src, log, "a\n")
    # the writer appends once more, then the file is rotated and a new one takes the name
    _append(log, "b\n")
    log.rename(log.with_name("train.log.1"))
    _append(log.with_name("train.log.1"), "c\n")  # the writer still holds the old file
    log.write_text("d\n")
    src.poll()
    src.poll()
    assert sink.texts() == ["a", "b", "c", "d"]
    assert src.stats.rotations == 1
    for _ in range(4):
        src.poll()
    assert len(src.files) == 1, "the rotated-away file is closed after draining"


def test_rename_to_a_name_the_glob_still_matches_does_not_reread(follow_empty_log: Follow) -> None:
    log, sink, src = follow_empty_log("train.log*")
    _feed(src, log, "a\n")
    log.rename(log.with_name("train.log.1"))
    log.write_text("b\n")
    src.poll()
    assert sink.texts() == ["a", "b"]


def test_truncation_reads_from_zero(follow_empty_log: Follow) -> None:
    log, sink, src = follow_empty_log()
    _feed(src, log, "one long line before truncation\n")
    log.write_text("x\n")  # copytruncate: the same file, truncated and rewritten
    src.poll()
    assert sink.texts() == ["one long line before truncation", "x"]
    assert src.stats.truncations == 1


def test_partial_lines_wait_for_their_newline_and_stay_bounded(follow_empty_log: Follow) -> None:
    log, sink, src = follow_empty_log()
    _feed(src, log, "half a li")
    assert sink.lines == []
    _feed(src, log, "ne\n")
    assert sink.texts() == ["half a line"]
    _append(log, "x" * (MAX_PARTIAL + 10))  # no newline ever
    src.poll()
    assert len(sink.lines) == 2
    assert all(len(f.partial) <= MAX_PARTIAL for f in src.files.values())


def test_deleted_file_is_closed(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    src = LogSource([str(log)], Sink())
    src.poll()
    log.unlink()
    for _ in range(4):
        src.poll()
    assert src.files == {}


def test_kernel_file_followers_are_marked(tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("")
    seen: list[bool] = []
    src = LogSource([], lambda f, data: seen.append(f.kernel), kernel_files=[str(kern)])
    src.poll()
    _feed(src, kern, "NVRM: Xid (PCI:0000:10:1c): 79, pid=1\n")
    assert seen == [True]
    src.close()


def test_kmsg_records_are_read_one_per_read_without_their_prefix() -> None:
    # /dev/kmsg hands out one record per read(); a SOCK_SEQPACKET pair keeps the same boundaries
    ours, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    got: list[bytes] = []
    src = KmsgSource("/dev/kmsg", lambda f, data: got.append(data), SourceStats(), fd=ours.fileno())
    try:
        kernel.send(
            b"4,1234,5678901,-;NVRM: Xid (PCI:0000:10:1c): 79, pid=1, GPU has fallen off the bus.\n SUBSYSTEM=pci\n"
        )
        kernel.send(b"6,1235,5678902,-;usb 1-1: new device\n")
        src.poll()
        assert got == [b"NVRM: Xid (PCI:0000:10:1c): 79, pid=1, GPU has fallen off the bus.\nusb 1-1: new device\n"]
        assert src.follower is not None
        assert src.follower.kernel
        src.poll()
        assert len(got) == 1, "nothing new: no call"
    finally:
        ours.close()
        kernel.close()
