"""``count_newlines`` is ``bytes.count(b"\\n")``: on both paths (numpy for long spans, ``bytes.count`` below)."""

from __future__ import annotations

import random

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporters import linecount
from exporters.linecount import count_newlines


def _buffer(seed: int, size: int) -> bytes:
    rnd = random.Random(seed)
    return bytes(rnd.choice(b"ab\n\r \x00\xff") for _ in range(size))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), size=st.integers(0, 70_000), a=st.floats(0, 1), b=st.floats(0, 1))
def test_equals_bytes_count_on_any_span(seed: int, size: int, a: float, b: float) -> None:
    buf = _buffer(seed, size)
    start, end = sorted((int(a * size), int(b * size)))
    assert count_newlines(buf, start, end) == buf.count(b"\n", start, end)
    assert count_newlines(buf, start) == buf.count(b"\n", start)
    assert count_newlines(buf) == buf.count(b"\n")


def test_long_span_takes_numpy_and_short_span_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path is really taken for long spans (a broken numpy call would show here), not for short."""
    buf = b"x\n" * 100_000
    assert count_newlines(buf) == 100_000
    calls: list[int] = []
    real = numpy.count_nonzero

    def spy(a: numpy.ndarray) -> int:
        calls.append(1)
        return int(real(a))

    monkeypatch.setattr(numpy, "count_nonzero", spy)
    assert count_newlines(buf, 10, 200_000) == 99_995
    assert calls == [1]
    assert count_newlines(buf, 0, 100) == 50
    assert calls == [1]


def test_end_past_the_buffer_is_the_buffer_end() -> None:
    buf = b"\n" * 50_000
    assert count_newlines(buf, 1, 10**9) == 49_999


def test_without_numpy_the_same_count(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = _buffer(3, 100_000)
    monkeypatch.setattr(linecount, "np", None)
    assert count_newlines(buf, 7, 90_000) == buf.count(b"\n", 7, 90_000)
