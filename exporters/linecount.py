"""Counting newlines at memory speed, because line numbers cost as much as matching otherwise.

``bytes.count`` walks a byte at a time (about 1.5 GB/s); numpy compares 32 or 64 bytes per instruction and
counts the hits (about 9 GB/s). numpy is a dependency, but the exporter still runs where it does not import.
"""

from __future__ import annotations

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is a declared dependency; this keeps a broken install working
    np = None  # type: ignore[assignment]

# below this, numpy's call overhead costs more than ``bytes.count``'s loop (measured: even at 4 KiB,
# 2.3 us each; at 16 KiB numpy takes 3.4 us and bytes.count 9.0 us)
_NUMPY_FROM = 4 * 1024


def count_newlines(buf: bytes, start: int = 0, end: int | None = None) -> int:
    """``buf.count(b"\\n", start, end)`` for non-negative offsets, the same number, faster on large spans."""
    stop = len(buf) if end is None else min(end, len(buf))
    if np is None or stop - start < _NUMPY_FROM:
        return buf.count(b"\n", start, stop)
    return int(np.count_nonzero(np.frombuffer(buf, np.uint8, stop - start, start) == 10))
