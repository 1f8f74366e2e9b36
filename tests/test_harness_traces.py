"""Reading the observer's trace files as a run writes them (the runner polls a live run): read
in pieces at any byte, they give what one read of the whole file gives, and a poll parses
only the lines written since the last one. No runs: files written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness.observe.traces import ObservationReader, TraceFile, load_observation

RECORDS: list[dict[str, object]] = [
    {"ev": "hello", "pid": 41, "ppid": 40, "argv": ["main.py"]},
    {"ev": "init", "rank": 1, "size": 2},
    {"ev": "call", "i": 0, "op": "broadcast", "numel_in": 8, "group": [0, 1], "t0": 5,
     "site": "main.py:3", "dtypes": ["float32"]},
    {"ev": "end", "i": 0, "t1": 9},
    {"ev": "bw", "t": 11, "rows": 4, "tokens": 32, "leaf_elements": 30080, "loss": 4.2,
     "step": 1},
    {"ev": "call", "i": 1, "op": "all_to_all_single", "numel_in": 16, "numel_out": 16,
     "group": [0, 1], "t0": 12, "site": "main.py:7", "dtypes": ["float32"]},
    {"ev": "mem", "persistent_bytes": 1024, "same_storage_bytes": 512},
    {"ev": "end", "i": 1, "t1": 15, "error": None},
]


def lines(torn_at: int | None = None) -> bytes:
    """The records as the observer writes them, one line each; `torn_at`: that record was
    cut mid-write (a kill), the next one written after it on the same line."""
    out = b""
    for i, rec in enumerate(RECORDS):
        line = json.dumps(rec).encode()
        out += line[:len(line) // 2] if i == torn_at else line + b"\n"
    return out


@settings(max_examples=60, deadline=None)
@given(torn_at=st.one_of(st.none(), st.integers(2, len(RECORDS) - 2)),
       cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_read_in_pieces_is_read_whole(tmp_path_factory: pytest.TempPathFactory,
                                      torn_at: int | None, cuts: list[int]) -> None:
    data = lines(torn_at)
    d = tmp_path_factory.mktemp("obs")
    whole = d / "p41.jsonl"
    whole.write_bytes(data)
    expected = load_observation(d).processes
    live = tmp_path_factory.mktemp("live")
    reader = ObservationReader(live)
    at = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        with open(live / "p41.jsonl", "ab") as f:
            f.write(data[at:cut])
        at = max(at, cut)
        reader.read()  # a poll while the run writes
    with open(live / "p41.jsonl", "ab") as f:
        f.write(data[at:])
    assert reader.read(final=True).processes == expected
    [p] = expected
    # The torn record and the one sharing its line are lost; the others are all there
    lost = set() if torn_at is None else {torn_at, torn_at + 1}
    kept = [r for i, r in enumerate(RECORDS) if i not in lost]
    assert [c.op for c in p.calls] == [r["op"] for r in kept if r["ev"] == "call"]
    assert p.rank == 1 and p.losses == [(1, 4.2) for r in kept if r["ev"] == "bw"]


def test_a_poll_parses_only_what_was_written_since_the_last(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    parsed: list[bytes] = []
    take = TraceFile._take

    def counted(self: TraceFile, line: bytes) -> None:
        parsed.append(line)
        take(self, line)
    monkeypatch.setattr(TraceFile, "_take", counted)
    path = tmp_path / "p41.jsonl"
    data = lines()
    path.write_bytes(data[:data.index(b'{"ev": "call"')])  # hello, init
    reader = ObservationReader(tmp_path)
    assert reader.read().processes[0].rank == 1 and len(parsed) == 2
    assert reader.read().processes[0].rank == 1 and len(parsed) == 2  # nothing new: no parse
    path.write_bytes(data)
    [p] = reader.read().processes
    assert len(parsed) == len(RECORDS) and [c.t1 for c in p.calls] == [9, 15]


def test_a_last_line_without_its_newline_counts_once_the_run_has_ended(tmp_path: Path
                                                                     ) -> None:
    path = tmp_path / "p41.jsonl"
    path.write_bytes(lines().rstrip(b"\n"))  # the last `end` not yet followed by its newline
    reader = ObservationReader(tmp_path)
    assert reader.read().processes[0].calls[1].t1 is None  # while live: still being written
    assert reader.read(final=True).processes[0].calls[1].t1 == 15
    assert load_observation(tmp_path).processes[0].calls[1].t1 == 15
