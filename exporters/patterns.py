"""The log-pattern catalog and the scanner that runs it over log bytes.

The catalog is a CSV data file (``patterns.csv`` beside this module; format in ``docs/patterns.md``).
Scanning is built for logs where almost no line matters: a handful of literal *prefilter* strings is
searched in the whole buffer with ``bytes.find`` (C speed), and only the lines around a hit are decoded and
tried against the rows' regexes, in catalog order; the first row that matches names the line.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

from trainguard.identity import IdentityError, validate_decimal, validate_host

CATEGORIES: Final = ("infra_gpu", "infra_network", "infra_node", "collective_timeout", "app_error")
SEVERITIES: Final = ("critical", "warning", "info")
COLUMNS: Final = (
    "id",
    "category",
    "severity",
    "prefilter",
    "regex",
    "description",
    "example",
    "counterexample",
)
CATALOG_VERSION: Final = 1
_ID = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
# A line longer than this is cut before its regexes run (a runaway line must not cost a second).
MAX_LINE: Final = 16 * 1024
# A prefilter of this value means: no literal; the row's own regex (which must start with a literal of at
# least three characters, so that the regex engine's literal search drives it) scans the whole buffer.
REGEX_PREFILTER: Final = "(regex)"
_LITERAL_START = re.compile(r"[A-Za-z0-9 :_=-]{3}")
# Results remembered for repeated candidate lines (bounded; cleared when full).
MEMO_SIZE: Final = 4096
# the dmesg time stamp ("[ 8901.234567] " or, with -T, "[Sat Nov 28 10:01:02 2026] ") that a flood varies
_STAMP: Final = re.compile(r"\[(?:\s*[0-9]+\.[0-9]+|[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]{2} [0-9:]{8} [0-9]{4})\] ")
MEMO_LINE: Final = 1024  # longer lines are not remembered (the memo stays under about 4 MiB)

# Rank and host tokens (INTEGRATION.md §4): ``[rankN]:`` prefix, ``[Rank N]`` / ``[PG ... Rank N]`` in c10d
# text, torchelastic's ``rank : N (local_rank: M)`` and ``host : NAME``, NCCL's ``host:pid:tid [gpu]`` prefix;
# an ``srun --label`` prefix ``N: `` gives the task rank when nothing better is there.
_LABEL_PREFIX = r"^(?:\s{0,6}\d{1,7}: )?"
_RANK_RES: Final = (
    re.compile(_LABEL_PREFIX + r"\[rank(\d{1,7})\]:"),
    re.compile(r"\bRank (\d{1,7})\]"),
    re.compile(r"^\s*rank\s*:\s*(\d{1,7}) \(local_rank"),
    re.compile(r"^\s{0,6}(\d{1,7}): "),
)
_HOST_RES: Final = (
    re.compile(_LABEL_PREFIX + r"(?:\[rank\d+\]:)?([A-Za-z0-9][A-Za-z0-9.-]{0,252}):\d+:\d+ \[\d+\]"),
    re.compile(_LABEL_PREFIX + r"\s*host\s*:\s*([A-Za-z0-9][A-Za-z0-9.-]{0,252})\s*$"),
)


class CatalogError(ValueError):
    """The catalog file is malformed; the message names the row and the column."""


@dataclass(frozen=True, slots=True)
class Pattern:
    id: str
    category: str
    severity: str
    prefilter: tuple[str, ...]
    regex: re.Pattern[str]
    description: str
    example: str
    counterexample: str

    @property
    def pages(self) -> bool:
        """Whether a match pages at once: the log-pattern rules raise a critical alert for every match of
        an infrastructure category, so the exporter's fast path posts those (alert_rules/log_patterns.yml)."""
        return self.category.startswith("infra_")


@dataclass(frozen=True, slots=True)
class LineMatch:
    line: int  # 1-based within what was scanned, counting from ``first_line``
    pattern: Pattern
    rank: str | None
    host: str | None
    text: str


def default_catalog_path() -> Path:
    return Path(str(resources.files("exporters").joinpath("patterns.csv")))


def _rows(text: str) -> Iterator[tuple[int, dict[str, str]]]:
    lines = [(n, line) for n, line in enumerate(text.splitlines(keepends=True), 1) if not line.startswith("#")]
    reader = csv.DictReader(io.StringIO("".join(line for _, line in lines)))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise CatalogError(f"catalog header must be {','.join(COLUMNS)}, got {reader.fieldnames}")
    for index, row in enumerate(reader):
        # the reader's row index maps back to the file's line for the message (header is lines[0])
        yield lines[index + 1][0] if index + 1 < len(lines) else index + 2, row


def parse_catalog(text: str, source: str = "catalog") -> list[Pattern]:
    patterns: list[Pattern] = []
    seen: set[str] = set()
    for lineno, row in _rows(text):
        where = f"{source} line {lineno}"
        if None in row or any(v is None for v in row.values()):
            raise CatalogError(f"{where}: expected {len(COLUMNS)} columns")
        pid = row["id"].strip()
        if not _ID.fullmatch(pid):
            raise CatalogError(f"{where}: id {pid!r} is not snake_case")
        if pid in seen:
            raise CatalogError(f"{where}: id {pid!r} appears twice")
        seen.add(pid)
        if row["category"] not in CATEGORIES:
            raise CatalogError(f"{where}: category {row['category']!r} is not one of {CATEGORIES}")
        if row["severity"] not in SEVERITIES:
            raise CatalogError(f"{where}: severity {row['severity']!r} is not one of {SEVERITIES}")
        prefilter = tuple(p for p in row["prefilter"].split("|") if p)
        if not prefilter:
            raise CatalogError(f"{where}: prefilter is empty")
        try:
            regex = re.compile(row["regex"])
        except re.error as exc:
            raise CatalogError(f"{where}: regex {row['regex']!r} does not compile: {exc}") from exc
        if REGEX_PREFILTER in prefilter and (len(prefilter) > 1 or not _LITERAL_START.match(row["regex"])):
            raise CatalogError(f"{where}: prefilter {REGEX_PREFILTER} needs a regex that starts with a literal")
        if not row["example"]:
            raise CatalogError(f"{where}: example is empty")
        patterns.append(
            Pattern(
                pid,
                row["category"],
                row["severity"],
                prefilter,
                regex,
                row["description"],
                row["example"],
                row["counterexample"],
            )
        )
    if not patterns:
        raise CatalogError(f"{source}: no patterns")
    return patterns


def load_catalog(path: Path | None = None) -> list[Pattern]:
    path = path or default_catalog_path()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"cannot read catalog {path}: {exc.strerror}") from exc
    return parse_catalog(text, str(path))


def line_rank(text: str) -> str | None:
    for rx in _RANK_RES:
        m = rx.search(text)
        if m:
            try:
                return validate_decimal("rank", str(int(m.group(1))))
            except IdentityError:
                return None
    return None


def line_host(text: str) -> str | None:
    for rx in _HOST_RES:
        m = rx.search(text)
        if m:
            try:
                return validate_host(m.group(1))
            except IdentityError:
                return None
    return None


class Matcher:
    """Runs a catalog over buffers of complete lines."""

    def __init__(self, patterns: list[Pattern]) -> None:
        self.patterns = patterns
        self.by_id = {p.id: p for p in patterns}
        by_needle: dict[str, list[int]] = {}
        self._regex_rows: tuple[int, ...] = tuple(
            i for i, p in enumerate(patterns) if p.prefilter == (REGEX_PREFILTER,)
        )
        self._scanners = tuple(re.compile(patterns[i].regex.pattern.encode()) for i in self._regex_rows)
        for index, p in enumerate(patterns):
            if index in self._regex_rows:
                continue
            for needle in p.prefilter:
                by_needle.setdefault(needle, []).append(index)
        self._by_needle = tuple((needle, tuple(idx)) for needle, idx in by_needle.items())
        # Longer needles first: they skip faster and are the more specific hint.
        self.needles: tuple[bytes, ...] = tuple(sorted((n.encode() for n in by_needle), key=len, reverse=True))
        # Per needle, the regexes of the rows that use it, as one bytes regex: a line around a needle is
        # confirmed in C before Python decodes it.
        self._confirm: dict[bytes, re.Pattern[bytes]] = {}
        for needle, indexes in by_needle.items():
            alternatives = b"|".join(b"(?:" + patterns[i].regex.pattern.encode() + b")" for i in indexes)
            try:
                self._confirm[needle.encode()] = re.compile(alternatives)
            except re.error:  # e.g. a group name used twice: no confirmation step for this needle
                continue
        self._memo: dict[str, tuple[Pattern | None, str | None, str | None]] = {}

    def match_line(self, text: str) -> Pattern | None:
        """The first catalog row that names this line (prefilter included), or None."""
        if len(text) > MAX_LINE:
            text = text[:MAX_LINE]
        candidates: set[int] = set(self._regex_rows)
        for needle, indexes in self._by_needle:
            if needle in text:
                candidates.update(indexes)
        for index in sorted(candidates):
            p = self.patterns[index]
            if p.regex.search(text):
                return p
        return None

    def candidate_lines(self, data: bytes) -> list[tuple[int, int]]:
        """(start, end) of every line of ``data`` that holds a prefilter needle and matches a row using it."""
        found: dict[int, int] = {}
        for needle in self.needles:
            confirm = self._confirm.get(needle)
            i = data.find(needle)
            while i != -1:
                start = data.rfind(b"\n", 0, i) + 1
                end = data.find(b"\n", i)
                if end == -1:
                    end = len(data)
                if start not in found and (confirm is None or confirm.search(data, start, min(end, start + MAX_LINE))):
                    found[start] = end
                i = data.find(needle, end)
        for rx in self._scanners:
            for m in rx.finditer(data):
                start = data.rfind(b"\n", 0, m.start()) + 1
                end = data.find(b"\n", m.start())
                found.setdefault(start, len(data) if end == -1 else end)
        return sorted(found.items())

    def scan(self, data: bytes, first_line: int = 1) -> Iterator[LineMatch]:
        """Matches in ``data`` (complete lines); line numbers count from ``first_line``."""
        line = first_line
        pos = 0
        for start, end in self.candidate_lines(data):
            line += data.count(b"\n", pos, start)
            pos = start
            text = data[start : min(end, start + MAX_LINE)].decode("utf-8", "replace").rstrip("\r")
            # A flood repeats one line under a changing dmesg-style "[ 123.456]" stamp: remember results.
            stamp = _STAMP.match(text)
            key = text[stamp.end() :] if stamp else text
            hit = self._memo.get(key)
            if hit is None:
                p = self.match_line(text)
                hit = (p, line_rank(text), line_host(text)) if p is not None else (None, None, None)
                if len(key) <= MEMO_LINE:
                    if len(self._memo) >= MEMO_SIZE:
                        self._memo.clear()
                    self._memo[key] = hit
            if hit[0] is not None:
                yield LineMatch(line, hit[0], hit[1], hit[2], text)
