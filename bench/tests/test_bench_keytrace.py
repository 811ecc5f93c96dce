"""Key traces as the bench reads them (records/keytrace.py): the driver's
format and rules, plain or gzip, and errors that name the file and the line."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from aside_bench.records.keytrace import (
    KeyTraceError,
    check_replayable,
    read_key_trace,
    read_timed_key_trace,
    timed_rate,
)

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "sample.trace"


def test_keys_and_timestamps_in_order_comments_and_blanks_skipped(tmp_path: Path) -> None:
    path = tmp_path / "k.trace"
    path.write_text("# made by hand\n\na@x\t0.5\r\nb@x\t1.25\n  \n# more\na@x\n")
    assert read_key_trace(path) == ["a@x", "b@x", "a@x"]
    assert read_timed_key_trace(path) == [("a@x", 0.5), ("b@x", 1.25), ("a@x", None)]


def test_gzip_is_read_by_its_magic_whatever_the_name(tmp_path: Path) -> None:
    for name in ("keys.trace.gz", "keys.trace"):
        path = tmp_path / name
        path.write_bytes(gzip.compress(b"a@x\t0.005000\nb@x\t0.010000\n"))
        assert read_timed_key_trace(path) == [("a@x", 0.005), ("b@x", 0.01)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a@x\t0.1\n\n#c\nb@x\tsoon\n", "line 4: the timestamp must be seconds >= 0, got 'soon'"),
        ("a@x\t-1\n", "line 1: the timestamp must be seconds >= 0"),
        ("a@x\n\t0.5\n", "line 2: no key before the TAB"),
        ("a@x\nb x\n", "line 2: a key holds no blank, got 'b x'"),
        ("a@x\t0.2\nb@x\t0.1\n", "line 2: the timestamp 0.1 is below the line before's (0.2)"),
    ],
)
def test_errors_name_the_file_and_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.trace"
    path.write_text(text)
    with pytest.raises(KeyTraceError) as raised:
        read_key_trace(path)
    assert str(raised.value).startswith(f"{path}: ") and message in str(raised.value)


def test_a_trace_the_driver_cannot_replay_is_refused_but_still_read(tmp_path: Path) -> None:
    empty, zeros = tmp_path / "empty.trace.gz", tmp_path / "zeros.trace"
    empty.write_bytes(gzip.compress(b""))  # a step that sent nothing
    zeros.write_text("a@x\t0\nb@x\t0\n")
    assert read_key_trace(empty) == [] and read_key_trace(zeros) == ["a@x", "b@x"]
    with pytest.raises(KeyTraceError, match=r"empty\.trace\.gz: holds no key"):
        check_replayable(empty)
    with pytest.raises(KeyTraceError, match="every timestamp is 0"):
        check_replayable(zeros)
    assert len(check_replayable(SAMPLE)) == 3000


def test_an_unreadable_file_is_a_key_trace_error(tmp_path: Path) -> None:
    with pytest.raises(KeyTraceError, match=r"none\.trace: cannot read"):
        read_key_trace(tmp_path / "none.trace")
    cut = tmp_path / "cut.trace.gz"
    whole = gzip.compress("".join(f"k{i}@x\t{i}\n" for i in range(1000)).encode())
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(KeyTraceError, match=r"cut\.trace\.gz: cannot read"):
        read_key_trace(cut)


def test_a_timed_traces_rate_is_its_lines_over_its_last_timestamp() -> None:
    assert timed_rate([("a", 0.5), ("b", 1.0), ("c", 2.0)]) == 1.5
    assert timed_rate([("a", 0.5), ("b", None)]) is None  # partly timed: the step's rate


def test_the_shipped_sample_is_a_timed_trace_with_a_header() -> None:
    first = SAMPLE.read_text().splitlines()[0]
    assert first.startswith("# ") and "aside-load" in first
    requests = read_timed_key_trace(SAMPLE)
    assert 1000 <= len(requests) <= 10_000
    assert all(at is not None for _, at in requests)
    keys = [key for key, _ in requests]
    # Zipf: a few keys take much of the trace, most keys are asked once or twice.
    top = max(keys.count(key) for key in set(keys))
    assert top > len(keys) / 50 and len(set(keys)) > len(keys) / 5
