"""Follow log files by glob, like ``tail -F``, and the kernel log.

Files are keyed by (device, inode), not by name, so a rotation by rename keeps its reader (and its
offset) and the new file at the old name is read from its start; a file that shrinks was truncated and
is read again from 0. Files present at start-up are read from their end (an exporter restart must not
re-count old errors), files that appear later from their start. Polling with ``stat`` at a modest
interval; no busy loop, nothing read twice, and at most ``MAX_PARTIAL`` bytes kept for a line without
its newline.
"""

from __future__ import annotations

import errno
import glob
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from exporters.linecount import count_newlines

log = logging.getLogger("trainguard.exporter")

READ_SIZE: Final = 1 << 20
MAX_READ_PER_POLL: Final = 64 << 20
MAX_PARTIAL: Final = 64 * 1024
GONE_POLLS: Final = 2  # polls a vanished (renamed away, deleted) file is still drained before closing


@dataclass
class Follower:
    path: str
    fd: int
    dev: int
    ino: int
    offset: int
    kernel: bool = False
    partial: bytes = b""
    missing_polls: int = 0
    lines: int = 0  # complete lines handed on


@dataclass
class SourceStats:
    bytes: int = 0
    lines: int = 0
    rotations: int = 0
    truncations: int = 0
    read_errors: int = 0
    files_opened: int = 0


# called with the follower and a buffer of complete lines (each ending in b"\n")
LinesHandler = Callable[[Follower, bytes], None]


@dataclass
class LogSource:
    globs: list[str]
    handler: LinesHandler
    from_start: bool = False
    kernel_files: list[str] = field(default_factory=list)
    stats: SourceStats = field(default_factory=SourceStats)
    files: dict[tuple[int, int], Follower] = field(default_factory=dict)
    _by_path: dict[str, tuple[int, int]] = field(default_factory=dict)
    _first_poll: bool = True
    behind: bool = False  # the last poll left data unread (``MAX_READ_PER_POLL``): poll again at once

    def _paths(self) -> list[tuple[str, bool]]:
        paths: dict[str, bool] = {}
        for pattern in self.globs:
            for p in glob.glob(pattern, recursive=True):
                paths.setdefault(p, False)
        for p in self.kernel_files:
            paths[p] = True
        return sorted(paths.items())

    def poll(self) -> None:
        self.behind = False
        present: set[tuple[int, int]] = set()
        for path, kernel in self._paths():
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            key = (st.st_dev, st.st_ino)
            present.add(key)
            old = self._by_path.get(path)
            if old is not None and old != key:
                self.stats.rotations += 1
            self._by_path[path] = key
            f = self.files.get(key)
            if f is None:
                f = self._open(path, st, kernel)
                if f is None:
                    continue
            f.path, f.missing_polls = path, 0
            if st.st_size < f.offset:
                self.stats.truncations += 1
                f.offset, f.partial = 0, b""
        for key, f in list(self.files.items()):
            if key not in present:
                f.missing_polls += 1
            self._read(f)
            if f.missing_polls > GONE_POLLS:
                self._close(key, f)
        self._first_poll = False

    def read_open(self) -> None:
        """Read what the open files gained, without a glob or a stat: the quick check between polls."""
        self.behind = False
        for f in list(self.files.values()):
            self._read(f)

    def _open(self, path: str, st: os.stat_result, kernel: bool) -> Follower | None:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            self.stats.read_errors += 1
            log.warning("cannot open %s: %s", path, exc.strerror)
            return None
        start = st.st_size if self._first_poll and not self.from_start else 0
        f = Follower(path, fd, st.st_dev, st.st_ino, start, kernel)
        self.files[(st.st_dev, st.st_ino)] = f
        self.stats.files_opened += 1
        return f

    def _read(self, f: Follower) -> None:
        total = 0
        while total < MAX_READ_PER_POLL:
            try:
                data = os.pread(f.fd, READ_SIZE, f.offset)
            except OSError:
                self.stats.read_errors += 1
                return
            if not data:
                return
            f.offset += len(data)
            total += len(data)
            self.stats.bytes += len(data)
            self._feed(f, data)
            if len(data) < READ_SIZE:
                return
        self.behind = True

    def _feed(self, f: Follower, data: bytes) -> None:
        cut = data.rfind(b"\n") + 1
        if not cut:
            complete, f.partial = b"", f.partial + data
        elif cut == len(data) and not f.partial:  # the usual small read: nothing to copy
            complete, f.partial = data, b""
        else:  # one copy: the held partial line and the complete lines of this read
            complete, f.partial = b"".join((f.partial, memoryview(data)[:cut])), data[cut:]
        if len(f.partial) > MAX_PARTIAL:  # a runaway line: take it as it is, keep memory bounded
            complete, f.partial = complete + f.partial + b"\n", b""
        if complete:
            n = count_newlines(complete)
            f.lines += n
            self.stats.lines += n
            self.handler(f, complete)

    def _close(self, key: tuple[int, int], f: Follower) -> None:
        if f.partial:
            self._feed(f, b"\n")
        os.close(f.fd)
        del self.files[key]
        for path, k in list(self._by_path.items()):
            if k == key:
                del self._by_path[path]

    def close(self) -> None:
        for key, f in list(self.files.items()):
            self._close(key, f)


@dataclass
class KmsgSource:
    """``/dev/kmsg``: one record per read; starts at the end of the ring buffer (no old records)."""

    path: str
    handler: LinesHandler
    stats: SourceStats
    fd: int | None = None
    follower: Follower | None = None

    def poll(self) -> None:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
                os.lseek(self.fd, 0, os.SEEK_END)
            except OSError as exc:
                self.stats.read_errors += 1
                log.warning("kernel log %s unavailable: %s", self.path, exc.strerror)
                self.fd = None
                return
        if self.follower is None:
            self.follower = Follower(self.path, self.fd, 0, 0, 0, kernel=True)
        records: list[bytes] = []
        while len(records) < 100_000:
            try:
                rec = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records were overwritten before we read them
                    continue
                self.stats.read_errors += 1
                break
            if not rec:
                break
            # "prio,seq,usec,flags;message\n" + continuation lines; keep the message
            _, _, msg = rec.partition(b";")
            records.append(msg.split(b"\n", 1)[0] + b"\n")
        if records:
            data = b"".join(records)
            self.stats.bytes += len(data)
            self.stats.lines += len(records)
            self.handler(self.follower, data)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
