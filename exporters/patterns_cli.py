"""``trainguard patterns``: scan a log with the catalog, list the catalog, mine what it does not know."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Final

from exporters.events import Finding
from exporters.nvml import nvml_pci_map
from exporters.patterns import CatalogError, Matcher, StreamScanner, load_catalog

MAX_SCAN_LINE: Final = 16 << 20

PATTERNS_HELP = """\
The log-pattern catalog (exporters/patterns.csv and exporters/xid_catalog.csv; docs/patterns.md).

  trainguard patterns scan FILE|-      one JSON object per finding, e.g.
      {"line": 12, "pattern": "xid_79_fallen_off_bus", "category": "infra_gpu", "pci": "0000:10:1c.0"}
  trainguard patterns unknown FILE|-   error-looking lines no row names, grouped into templates
  trainguard patterns list             the rows: id, category, severity, description
"""

SCAN_HELP = """\
Run the exporter's pattern catalog over a log file (or '-' for standard input) and print one JSON object
per finding: {"line": N, "pattern": ID, "category": CATEGORY} plus, when the log names them, "rank",
"host", "pci", "gpu", "exitcode", "signal". A traceback, a torchelastic failure summary or a multi-line
NVRM message is one object; its "line" is the line that names the cause. JSON-wrapped (docker, Loki) and
CRI (Kubernetes) log lines are unwrapped first. Nothing is printed on stdout when nothing matches; a
one-line summary always goes to stderr. Exit 0; 2 for an unreadable file or catalog.
"""

UNKNOWN_HELP = """\
Find what the catalog misses: scan a log (or '-' for standard input) like 'patterns scan', keep the
error-looking lines that no catalog row names (tracebacks, exceptions, ERROR, FATAL, failed), and group
them into templates (drain3 log template mining: numbers, hex values, IP addresses, PCI ids and NCCL
prefixes become <NUM>, <HEX>, <IP>, <PCI>, <NCCL_PREFIX>; other words that vary become <*>). Prints one
template a line with its count and kind, most frequent first, e.g.

     12  exception  RuntimeError: NCCL communicator was aborted on rank <NUM>.

Each template is a candidate row for exporters/patterns.csv (see docs/patterns.md, "Adding a pattern").
--json prints a JSON array of {"count", "kind", "template", "example", "first_line"} instead.
"""


def iter_chunks(stream: IO[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """Buffers of complete lines (a last line without its newline gets one), each copied once at most."""
    rest = b""
    while True:
        block = stream.read(size)
        if not block:
            if rest:
                yield rest + b"\n"
            return
        cut = block.rfind(b"\n") + 1
        if cut:
            yield b"".join((rest, memoryview(block)[:cut])) if rest or cut < len(block) else block
            rest = block[cut:]
        elif len(rest) + len(block) > MAX_SCAN_LINE:  # a line without end: take it as it is, keep memory bounded
            yield rest + block + b"\n"
            rest = b""
        else:
            rest += block


def iter_findings(matcher: Matcher, stream: IO[bytes]) -> Iterator[Finding]:
    scanner = StreamScanner(matcher)
    for chunk in iter_chunks(stream):
        yield from scanner.feed(chunk)
    yield from scanner.flush()


def finding_json(f: Finding) -> dict[str, object]:
    assert f.pattern is not None
    obj: dict[str, object] = {"line": f.line, "pattern": f.pattern.id, "category": f.pattern.category}
    for key in ("rank", "host", "pci", "gpu", "exitcode", "signal"):
        value = f.tokens.get(key)
        if value is not None:
            obj[key] = int(value) if key in ("rank", "gpu", "exitcode") else value
    return obj


def scan_stream(matcher: Matcher, stream: IO[bytes], out: IO[str], unknown: list[Finding] | None = None) -> int:
    """Print the findings a row names; returns how many. Unclassified ones go to ``unknown`` if given."""
    found = 0
    for f in iter_findings(matcher, stream):
        if f.pattern is None:
            if unknown is not None:
                unknown.append(f)
            continue
        out.write(json.dumps(finding_json(f)) + "\n")
        found += 1
    return found


def _quiet_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush stays quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _with_input(name: str, path: str, work: Callable[[IO[bytes]], None]) -> int:
    try:
        if path == "-":
            work(sys.stdin.buffer)
        else:
            with open(path, "rb") as f:
                work(f)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: stop quietly (an OSError too, so caught first)
        _quiet_stdout()
    except OSError as exc:
        print(f"trainguard patterns {name}: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    return 0


def _matcher(name: str, catalog: Path | None) -> Matcher | None:
    try:
        return Matcher(load_catalog(catalog), pci_gpu=nvml_pci_map())
    except CatalogError as exc:
        print(f"trainguard patterns {name}: {exc}", file=sys.stderr)
        return None


def run_scan(args: argparse.Namespace) -> int:
    matcher = _matcher("scan", args.catalog)
    if matcher is None:
        return 2
    unknown: list[Finding] = []
    counts: list[int] = []

    def work(stream: IO[bytes]) -> None:
        counts.append(scan_stream(matcher, stream, sys.stdout, unknown))

    rc = _with_input("scan", args.file, work)
    if rc == 0 and counts:
        print(
            f"trainguard patterns scan: {counts[0]} findings, {len(unknown)} error-looking lines no row names"
            f" (trainguard patterns unknown {args.file}); engine {matcher.engine.name}",
            file=sys.stderr,
        )
    return rc


def run_list(args: argparse.Namespace) -> int:
    try:
        patterns = load_catalog(args.catalog)
    except CatalogError as exc:
        print(f"trainguard patterns list: {exc}", file=sys.stderr)
        return 2
    try:
        for p in patterns:
            print(f"{p.id:34} {p.category:18} {p.severity:9} {p.action or '-':16} {p.description}")
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
    return 0


def run_unknown(args: argparse.Namespace) -> int:
    from exporters.unknown import mine, render  # noqa: PLC0415 - drain3 loads only for this command

    matcher = _matcher("unknown", args.catalog)
    if matcher is None:
        return 2
    unknown: list[Finding] = []

    def work(stream: IO[bytes]) -> None:
        unknown.extend(f for f in iter_findings(matcher, stream) if f.pattern is None)
        templates = mine(unknown)
        sys.stdout.write(render(templates, as_json=args.json))
        print(
            f"trainguard patterns unknown: {len(unknown)} error-looking lines no row names, {len(templates)} templates",
            file=sys.stderr,
        )

    return _with_input("unknown", args.file, work)


def register(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    pat = sub.add_parser(
        "patterns",
        help="the log-pattern catalog: scan a log, list patterns",
        description=PATTERNS_HELP,
        formatter_class=fmt,
    )
    psub = pat.add_subparsers(dest="patterns_command", metavar="ACTION")
    file_help = "log file; '-' or nothing reads standard input"
    catalog_help = "pattern catalog CSV (default: the one shipped; the Xid table is read beside it)"
    scan = psub.add_parser(
        "scan", help="print the catalog's findings in a log as JSON lines", description=SCAN_HELP, formatter_class=fmt
    )
    scan.add_argument("file", nargs="?", default="-", metavar="FILE|-", help=file_help)
    scan.add_argument("--catalog", type=Path, help=catalog_help)
    scan.set_defaults(handler=run_scan)
    unk = psub.add_parser(
        "unknown",
        help="group error-looking lines no row names into templates (what to add to the catalog)",
        description=UNKNOWN_HELP,
        formatter_class=fmt,
    )
    unk.add_argument("file", nargs="?", default="-", metavar="FILE|-", help=file_help)
    unk.add_argument("--catalog", type=Path, help=catalog_help)
    unk.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    unk.set_defaults(handler=run_unknown)
    lst = psub.add_parser("list", help="print the catalog: id, category, severity, Xid action, description")
    lst.add_argument("--catalog", type=Path, help=catalog_help)
    lst.set_defaults(handler=run_list)

    def _no_action(args: argparse.Namespace) -> int:
        pat.print_help()
        return 2

    pat.set_defaults(handler=_no_action)
