"""Logs that come through Kubernetes or Loki, unwrapped to the lines the program wrote.

Docker's json-file driver writes ``{"log":"...\\n","stream":"stderr","time":"..."}``, ``logcli --output=jsonl``
``{"labels":...,"line":"..."}``, structured loggers ``{"msg":...}`` or ``{"message":...}``; the CRI format
(containerd, CRI-O) ``2024-05-01T10:00:00.123456789Z stderr F text``, where ``P`` marks a partial line
continued by the next record. A stream is wrapped throughout or not at all, so a buffer is unwrapped when its
first line is a JSON object or a CRI record (or a CRI partial is pending); plain logs pay one check a buffer.
"""

from __future__ import annotations

import json
import re
from typing import Final

_CRI: Final = re.compile(rb"^\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:?\d\d) (?:stdout|stderr) ([PF]) ?(.*)$", re.DOTALL)
_JSON_KEYS: Final = ("log", "line", "msg", "message")
MAX_PARTIAL: Final = 64 * 1024  # a CRI partial line is kept at most this long


def looks_wrapped(data: bytes) -> bool:
    if data.startswith(b"{"):
        return True
    first = data[: data.find(b"\n", 0, 4096) if b"\n" in data[:4096] else 4096]
    return data[:1].isdigit() and _CRI.match(first) is not None


def _json_message(line: bytes) -> bytes | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    for key in _JSON_KEYS:
        value = obj.get(key)
        if isinstance(value, str):
            return value.rstrip("\n").encode("utf-8", "replace")
    return None


class Unwrapper:
    """Per stream: holds a CRI partial line across buffers."""

    def __init__(self) -> None:
        self.partial = b""

    def feed(self, data: bytes) -> tuple[bytes, list[int] | None]:
        """The unwrapped buffer (complete lines) and, when it differs, each output line's input line (0-based)."""
        if not self.partial and not looks_wrapped(data):
            return data, None
        out: list[bytes] = []
        origin: list[int] = []
        for index, line in enumerate(data.split(b"\n")[:-1]):
            msg = _json_message(line) if line.startswith(b"{") else None
            text = line if msg is None else msg
            m = _CRI.match(text)
            if m is not None:
                if m.group(1) == b"P":  # a partial: kept, and an empty line holds its place
                    self.partial = (self.partial + m.group(2))[:MAX_PARTIAL]
                    text = b""
                else:
                    text, self.partial = self.partial + m.group(2), b""
            for part in text.split(b"\n"):
                out.append(part)
                origin.append(index)
        return b"".join(part + b"\n" for part in out), origin
