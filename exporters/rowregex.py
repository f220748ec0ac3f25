"""The row regex dialect: the subset Python ``re``, Hyperscan and Rust regex (ripgrep) share.

Rows are searched in whole buffers by every engine, so a row must never match across a newline; this
module rewrites a row into its *line-bounded* form (negated classes and ``\\s``/``\\D``/``\\W`` exclude
``\\n``), which every engine compiles, and derives the literal strings that any match must contain, which
lets the ``re`` engine find candidate lines with ``bytes.find`` instead of running every regex everywhere.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, Final

# Lookaround and backreferences: not in Hyperscan nor Rust regex.
_FORBIDDEN: Final = (
    (re.compile(r"\(\?<?[=!]"), "lookaround"),
    (re.compile(r"\\[1-9]|\(\?P="), "backreferences"),
    (re.compile(r"\(\?[aiLmsux-]+[:)]"), "inline flags"),
    (re.compile(r"\\n"), "newlines (rows match within one line)"),
)
# Outside a class: these match a newline, so they get a newline-free equivalent.
_OUTSIDE: Final = {"s": r"[^\S\n]", "D": r"[^\d\n]", "W": r"[^\w\n]"}
# Inside a positive class ``\s`` is spelled out without the newline.
_CLASS_SPACE: Final = r" \t\r\f\v"
# The stdlib's regex parser: its tree is what required_literals reads (private, stable since 3.11).
_PARSER: Any = importlib.import_module("re._parser")
# The shortest literal worth a ``bytes.find`` pass; a row with shorter ones is searched with its regex (in C):
# a three-letter literal such as "oss" (for "loss nan") is in every other line of a training log.
MIN_LITERAL: Final = 4


class RowSyntaxError(ValueError):
    """A row regex is outside the shared dialect."""


def check_dialect(regex: str) -> None:
    for rx, what in _FORBIDDEN:
        if rx.search(regex):
            raise RowSyntaxError(f"{what} are not supported (not in Hyperscan or ripgrep)")


def _class_end(regex: str, i: int) -> int:
    """Index just past the class that starts at ``regex[i] == '['``."""
    j = i + 1
    if j < len(regex) and regex[j] == "^":
        j += 1
    if j < len(regex) and regex[j] == "]":
        j += 1
    while j < len(regex) and regex[j] != "]":
        j += 2 if regex[j] == "\\" else 1
    if j >= len(regex):
        raise RowSyntaxError("unterminated character class")
    return j + 1


def _bound_class(body: str) -> str:
    """A class body (without the brackets) that cannot match a newline."""
    if body.startswith("^"):
        return "^\\n" + body[1:]
    out: list[str] = []
    i = 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            esc = body[i + 1]
            if esc in "DWS":
                raise RowSyntaxError(f"\\{esc} inside a character class can match a newline; write it out")
            out.append(_CLASS_SPACE if esc == "s" else body[i : i + 2])
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def line_bounded(regex: str) -> str:
    """The row as every engine compiles it: the same matches within a line, none across a newline."""
    check_dialect(regex)
    out: list[str] = []
    i = 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex):
            esc = regex[i + 1]
            out.append(_OUTSIDE.get(esc, regex[i : i + 2]))
            i += 2
        elif c == "[":
            end = _class_end(regex, i)
            out.append("[" + _bound_class(regex[i + 1 : end - 1]) + "]")
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _best(sets: list[frozenset[bytes]]) -> frozenset[bytes] | None:
    """Of several requirements that all hold, the one whose shortest literal is longest (fewest on a tie)."""
    good = [s for s in sets if s]
    if not good:
        return None
    return max(good, key=lambda s: (min(len(x) for x in s), -len(s)))


def _required(items: Any) -> frozenset[bytes] | None:
    """Literals one of which every match of this parsed sequence contains (None: nothing known)."""
    c = _PARSER.__dict__
    sets: list[frozenset[bytes]] = []
    run = bytearray()
    for op, av in items:
        if op is c["LITERAL"]:
            run += chr(av).encode()
            continue
        if run:
            sets.append(frozenset({bytes(run)}))
            run = bytearray()
        inner: frozenset[bytes] | None = None
        if op is c["SUBPATTERN"]:
            inner = _required(av[-1])
        elif op is c["BRANCH"]:
            parts = [_required(b) for b in av[1]]
            inner = None if any(p is None for p in parts) else frozenset().union(*parts)  # type: ignore[arg-type]
        elif op in (c["MAX_REPEAT"], c["MIN_REPEAT"], c["POSSESSIVE_REPEAT"]) and av[0] >= 1:
            inner = _required(av[2])
        if inner is not None:
            sets.append(inner)
    if run:
        sets.append(frozenset({bytes(run)}))
    return _best(sets)


def required_literals(regex: str) -> frozenset[bytes] | None:
    """Literals one of which every match contains, each at least ``MIN_LITERAL`` long; None if there are none."""
    found = _required(_PARSER.parse(regex))
    if found is None or min(len(x) for x in found) < MIN_LITERAL:
        return None
    return found
