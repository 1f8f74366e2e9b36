"""A crash told by its exception: the first traceback a run wrote to stderr, with the rank
that raised it and the submission's line, or the signal that killed a rank.

Launchers print a failed rank's traceback their own way (mp.spawn: "-- Process 1 terminated
with the following error:", torchrun: "[rank1]:" before every line, a hand-made launcher: its
own words); the first traceback is the cause, the later ones (peers that lost the collective)
its consequences. The frame that counts is the innermost one outside Python's and torch's
own files: where the submission was when it raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness.observe.boundary import MB, Refused, RunFolder, one_line
from tests.harness.observe.traces import rank_list

SOURCE_CAP = 4 * MB  # the most read of a submission's source file

_PREFIX = re.compile(r"^\[rank(\d+)\]:\s?")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')
_RANK = re.compile(r"(?:[Pp]rocess|rank) (\d+)\b")
_SIGNAL = re.compile(r"(?:[Pp]rocess|rank) (\d+) (?:terminated with signal|was killed by) "
                     r"(SIG[A-Z]+)")
# What a rank raises when a peer is gone (gloo, NCCL, the store): a consequence.
LOST_PEER = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
             "Connection refused", "NCCL communicator was aborted", "DistNetworkError",
             "Socket Timeout", "timed out")
# Exceptions a launcher raises about a failed rank (its cause is told after them).
_LAUNCHERS = ("ProcessRaisedException", "ProcessExitedException", "ChildFailedError",
              "LaunchError")
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen", "/torch/",
            "/observer/")


# multiprocessing's bootstrap prints "Process ForkProcess-1:" before a failed rank's
# traceback; ranks failing together interleave these headers with each other's lines. A
# header is never an exception: it is left out before a traceback is read.
_HEADER = re.compile(r"^Process [\w.-]+:\s*$")


def _lines(text: str) -> list[tuple[int | None, str]]:
    """(rank from a torchrun-style prefix, line without it); multiprocessing's headers left
    out."""
    out: list[tuple[int | None, str]] = []
    for line in text.splitlines():
        m = _PREFIX.match(line)
        rank, rest = (int(m.group(1)), line[m.end():]) if m else (None, line)
        if not _HEADER.match(rest):
            out.append((rank, rest))
    return out


@dataclass(frozen=True)
class Crash:
    """A run's first exception: `said` in one line, and the submission's frame."""

    said: str = ""
    file: str = ""
    line: int = 0
    what: str = ""  # what was raised and where, without who raised it

    def around(self, submission: Path, context: int = 2) -> str:
        """The few lines of the submission around the line that raised, the line marked;
        "" where the file is not a regular file beneath the `submission`'s own folder,
        reached with no link (a traceback is the run's text: it may name any file, and the
        grader, root, would show that file's lines to the student)."""
        if not self.file or self.line <= 0:
            return ""
        path = Path(self.file)
        if path.is_absolute():
            if not path.is_relative_to(submission):
                return ""
            path = path.relative_to(submission)
        try:
            source = RunFolder(submission).read(path, SOURCE_CAP).decode(
                "utf-8", "replace").splitlines()
        except Refused:
            return ""
        lo, hi = max(1, self.line - context), min(len(source), self.line + context)
        return "\n".join(f"{'>' if n == self.line else ' '} {n:4d} | "
                         f"{one_line(source[n - 1], 160)}" for n in range(lo, hi + 1))


def first_exception(text: str, rank: int | None = None) -> str:
    """One line: which rank raised what, where in the submission; or which rank a signal
    killed; "" when the stderr holds neither. `rank`: the traceback's own, where known."""
    return _first(text, rank).said


def _first(text: str, rank: int | None = None) -> Crash:
    lines = _lines(text)
    for i, (prefixed, line) in enumerate(lines):
        if not line.startswith("Traceback (most recent call last):"):
            continue
        frames: list[tuple[str, str, str]] = []  # file, line, the code on it
        j = i + 1
        while j < len(lines):
            m = _FRAME.match(lines[j][1])
            if m:
                # the frame's code line is indented; a frozen frame has none, and the line
                # after the innermost one is then the exception itself
                after = lines[j + 1][1] if j + 1 < len(lines) else ""
                code = after.strip() if after[:1] in (" ", "\t") and \
                    not _FRAME.match(after) else ""
                frames.append((m["file"], m["line"], code))
                j += 2 if code else 1
                continue
            if lines[j][1].startswith((" ", "\t")) or not lines[j][1].strip():
                j += 1
                continue
            break
        error = lines[j][1].strip() if j < len(lines) else "an exception"
        if any(w in error for w in _LAUNCHERS):
            continue  # the launcher's own: the rank's traceback follows, or a signal's words
        own = [f for f in frames if not any(x in f[0] for x in _LIBRARY)] or frames
        where, file, number = "", "", "0"
        if own:
            file, number, code = own[-1]
            where = f" at {'/'.join(Path(file).parts[-2:])}:{number}" + \
                (f" (`{code[:80]}`)" if code else "")
        if rank is None:
            rank = prefixed if prefixed is not None else _rank_before(lines, i)
        who = f"rank {rank}" if rank is not None else "the run"
        what = one_line(f"{error[:200]}{where}", 400)  # the run's text: one line
        return Crash(f"{who} raised {what}", file, int(number), what)
    for _, line in lines:
        m = _SIGNAL.search(line)
        if m:
            return Crash(f"rank {m.group(1)} was killed by {m.group(2)}")
    return Crash()


def _rank_before(lines: list[tuple[int | None, str]], at: int) -> int | None:
    """The rank a launcher names in the few lines before a traceback."""
    for _, line in reversed(lines[max(0, at - 3):at]):
        m = _RANK.search(line)
        if m:
            return int(m.group(1))
    return None


def killed_by_suite(nemesis: dict[str, Any]) -> Crash:
    """The suite's own kill of a rank, told as the suite's doing."""
    rank, step = nemesis.get("rank"), nemesis.get("step")
    where = (f"inside torch.save of its shard of checkpoint {step}"
             if nemesis.get("kind") == "killsave" else f"as step {step} started")
    return Crash(f"rank {rank} was killed by the suite {where} (the fault under test, not "
                 "the program's error)")


def first_exception_of(stderr: str, raised: list[dict[str, Any]] | None = None,
                       killed: dict[str, Any] | None = None) -> Crash:
    """The run's cause of failure, told once: the suite's kill of a rank (`killed`, the
    nemesis's record) where nothing was raised before it; else the earliest exception a
    rank's observer recorded (`raised`) that is not a consequence of a peer's death, with
    every rank that raised the same at the same line ("ranks 0-3 raised KeyError ..."); else
    the first traceback of the `stderr` text (its first megabytes, read by the runner from
    its own descriptor)."""
    # A rank whose peer died fails too, sometimes before the cause is recorded (the dying
    # rank closes its connections while it unwinds): those are consequences, told last.
    told = [(rec, _first(str(rec.get("text", "")), _rank(rec))) for rec in raised or []]
    told = [(rec, c) for rec, c in told if c.said]
    causes = sorted(((rec, c) for rec, c in told
                     if not any(w in str(rec.get("text", "")) for w in LOST_PEER)),
                    key=lambda rc: _time(rc[0]))
    if killed is not None and (not causes or _time(causes[0][0]) > _time(killed)):
        return killed_by_suite(killed)  # what the other ranks raised after it follows from it
    ordered = causes or sorted(told, key=lambda rc: _time(rc[0]))
    if ordered:
        first = ordered[0][1]
        ranks = sorted({r for rec, c in ordered
                        if (r := _rank(rec)) is not None and c.what == first.what})
        if len(ranks) > 1:
            return Crash(f"{rank_list(ranks)} raised {first.what}", first.file, first.line,
                         first.what)
        return first
    return _first(stderr)


def _rank(rec: dict[str, Any]) -> int | None:
    """A record's rank where it is a small integer (a record is the run's to write)."""
    r = rec.get("rank")
    return r if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**16 else None


def _time(rec: dict[str, Any]) -> int:
    t = rec.get("t", 0)
    return t if isinstance(t, int) and not isinstance(t, bool) else 0
