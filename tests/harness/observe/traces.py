"""What the observer (tests/observer/sitecustomize.py) saw of a run, read back into data:
every process, the process group it joined, its collectives in order (the Python calls, and
the Flight Recorder's entries that no Python call issued), its backward calls and the tensor
storages it kept; plus where each rank is blocked when a run hangs.

Pure functions of the trace files: the runner polls them while a run is alive (deadlock
detection) and the communication and memory checks read them after it ends.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.observe.boundary import MB, Refused, RunFolder, integer, loads, one_line

# Bytes per element of the dtypes collectives carry (the observer records names)
ITEMSIZE = {"float64": 8, "double": 8, "int64": 8, "long": 8, "float32": 4, "float": 4,
            "int32": 4, "int": 4, "float16": 2, "bfloat16": 2, "half": 2, "int16": 2}
OBSERVER_DIR = Path(__file__).resolve().parents[2] / "observer"  # goes on the run's PYTHONPATH
# ("wait": an asynchronous call's Work waited on, recorded as a blocking call of its own)
P2P = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "wait")
# gloo's Flight Recorder names -> the op they count as (it records reduce_scatter as all_reduce)
_FR_OP = re.compile(r"^\w+:(?P<op>\w+)$")
# The most the suite reads of one process's trace (a rank of a 20-step run writes ~1-3 MB),
# of one stack dump, and of one record; a pid, rank or size beyond these is no process's
TRACE_CAP, STACK_CAP, RECORD_CAP = 256 * MB, 1 * MB, 4 * MB
PID_MAX, RANK_MAX = 2**22, 2**16
PROCESSES_CAP = 4096  # traces read of one run (a 4-rank run writes ~10)
TEXT_CAP = 300  # a call site, an op, a peer: one line of at most this many characters


@dataclass
class Call:
    """One collective or point-to-point call of one process."""

    index: int
    op: str
    numel_in: int
    numel_out: int
    dtype: str
    group: list[int]
    site: str
    t0: int
    t1: int | None = None
    error: str | None = None
    is_async: bool = False
    peer: str = ""
    source: str = "python"  # or "flight-recorder": issued by torch's C++ without a Python call
    fresh: int | None = None  # all-to-all and sends: elements of data not sent or received
    #                           before in the step (a chunk sent to many peers counts once)
    nonfinite: bool = False  # the data the rank put in held a NaN or an infinity
    values: list[float] = field(default_factory=list)  # a small reduction's inputs
    # A gradient-sized reduction's input: n, sum, sq (sum of squares), sample (16 elements)
    digest: dict[str, Any] | None = None
    of: str = ""  # a wait: the call whose Work it waits on, where the observer knew it
    # Every step: a reduction's or all-to-all's input at 16 positions of each rank's part
    # ("x"), or a gather's input at 16 positions ("p"); what the Adam yardstick fits
    trail: dict[str, Any] | None = None

    @property
    def p2p(self) -> bool:
        return self.op in P2P

    def sends_to(self) -> int | None:
        """The global rank a send (`send`, `isend`) goes to, None for any other call or
        where it is not named (`group_dst` is a place in the call's group)."""
        m = re.search(r"(group_)?dst=(\d+)", self.peer) if self.op in ("send", "isend") \
            else None
        if m is None:
            return None
        at = int(m[2])
        if not m[1]:
            return at
        return self.group[at] if at < len(self.group) else None

    def signature(self) -> tuple[Any, ...]:
        """What must agree across ranks: op, sizes, dtype and group size. Of a rooted call,
        what every rank passes: only a gather's root passes its gather_list (the outputs),
        only a scatter's root its scatter_list (the inputs)."""
        n_in = 0 if self.op == "scatter" else self.numel_in
        n_out = 0 if self.op == "gather" else self.numel_out
        return (self.op, n_in, n_out, self.dtype, len(self.group))

    @property
    def name(self) -> str:
        """The op as a student reads it: a wait on a call's Work is told as that call (a
        rank sitting in `pg.recv(...).wait()` is blocked in that recv)."""
        return self.of if self.op == "wait" and self.of not in ("", "work", "functional") \
            else self.op

    def describe(self) -> str:
        what = f"{self.name}({self.peer})" if self.peer and self.p2p else self.name
        n = self.numel_in or self.numel_out  # a scatter's ranks but its root pass outputs only
        size = f" of {n} {self.dtype}" if n else ""
        return f"{what}{size} at {self.site}"


@dataclass
class ProcessTrace:
    pid: int
    ppid: int = 0
    argv: list[str] = field(default_factory=list)
    rank: int | None = None
    size: int | None = None
    calls: list[Call] = field(default_factory=list)
    flight_recorder: list[dict[str, Any]] | None = None
    backwards: list[int] = field(default_factory=list)  # start times, ns
    backward_steps: list[int] = field(default_factory=list)  # per backward: its step
    work: list[dict[str, int]] = field(default_factory=list)  # per backward: tokens, rows
    leaf_elements: list[int] = field(default_factory=list)  # per backward: what it reached
    # The first backward's 2-D leaves: shape, a checksum per row and per column (with those
    # its nested passes reached: a reentrant checkpoint's blocks)
    leaves: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] | None = None  # where its optimizer state lives (first checkpoint)
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, loss) per backward
    grads_finite: list[tuple[int, bool]] = field(default_factory=list)  # under --inject nan@
    nemesis: dict[str, Any] | None = None  # the fault the suite's nemesis made in it
    raised: dict[str, Any] | None = None  # an exception its launcher would keep (mp.spawn)
    stack: str = ""
    ended: bool = False  # it ended as Python ends (no kill, no exec into another program)

    def open_call(self) -> Call | None:
        """The blocking call this process is inside (started, not returned), if any."""
        last = self.calls[-1] if self.calls else None
        if last is None or last.t1 is not None or last.is_async:
            return None
        return last

    def collectives(self) -> list[Call]:
        """Collectives in issue order: Python calls, and the Flight Recorder's entries that
        no Python call bracketed (DDP's Reducer all-reduces during backward)."""
        spans = [(c.t0, c.t1 if c.t1 is not None else 2**63) for c in self.calls]
        merged = [c for c in self.calls if not c.p2p]
        for e in self.flight_recorder or []:
            t = e.get("time_created_ns") or 0
            if e.get("is_p2p") or any(a <= t <= b for a, b in spans):
                continue
            m = _FR_OP.match(str(e.get("profiling_name", "")))
            sizes = e.get("input_sizes") or []
            numel = sum(_prod(s) for s in sizes)
            merged.append(Call(-1, m["op"] if m else str(e.get("profiling_name")), numel,
                               sum(_prod(s) for s in e.get("output_sizes") or []),
                               str((e.get("input_dtypes") or ["?"])[0]).lower(),
                               list(range(self.size or 0)), "torch C++ (no Python call)", t,
                               t, source="flight-recorder"))
        return sorted(merged, key=lambda c: c.t0)

    def backwards_per_step(self, steps: int, flag: int = 1) -> int:
        """The backward passes of one training step (its micro-batches), as the run took
        them: its backward passes over the `steps` it ran, when they divide evenly; else the
        `--micro-batches` it was given (`flag`). One clock for every check and picture: a
        program that ignores the flag runs one backward per step, and each of its steps is
        charged as one step, not as part of a longer one."""
        n = len(self.backwards)
        return n // steps if steps and n and n % steps == 0 else max(flag, 1)

    def persistent_bytes(self, same_storage: bool = False) -> int | None:
        """What the process held from one memory snapshot to the other: storages alive at
        both and those replaced by one of the same size; with `same_storage`, the former
        alone."""
        key = "same_storage_bytes" if same_storage else "persistent_bytes"
        done = [m for m in self.memory if "persistent_bytes" in m]
        return done[-1].get(key, done[-1]["persistent_bytes"]) if done else None

    def model_elements(self) -> int | None:
        """P as this process computed it: the most elements one of its backward passes
        differentiated (the leaves it reached, or autograd.grad's inputs), None before any.
        Parameters no backward reaches (a flat shard or a master copy kept as an
        nn.Parameter, buffers) are not the model's."""
        return max(self.leaf_elements) if self.leaf_elements else None


def _prod(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


@dataclass
class Observation:
    """Every process the observer saw in one run (empty: nothing loaded it)."""

    directory: Path
    processes: list[ProcessTrace] = field(default_factory=list)
    # what the boundary refused of the observer's folder (a link, a FIFO, a forged record)
    problems: list[str] = field(default_factory=list)

    def ranks(self) -> dict[int, ProcessTrace]:
        """rank -> the process that joined the process group as that rank (the first one)."""
        out: dict[int, ProcessTrace] = {}
        for p in sorted(self.processes, key=lambda p: p.pid):
            if p.rank is not None and p.rank not in out:
                out[p.rank] = p
        return out

    def trainers(self) -> dict[int, ProcessTrace]:
        """rank -> process, for ranks that trained; a 1-process run without a process group
        counts as rank 0 when it ran backward."""
        ranks = self.ranks()
        if not ranks:
            ran = [p for p in self.processes if p.backwards]
            return {0: ran[0]} if len(ran) == 1 else {}
        return ranks


def _text(rec: dict[str, Any], key: str, default: str = "") -> str:
    """A record's string field as one bounded line (a newline in a run's record is how a
    forged line would reach a report)."""
    value = rec.get(key)
    return one_line(value, TEXT_CAP) if value is not None else default


def _int(rec: dict[str, Any], key: str, lo: int = 0, hi: int = 2**62) -> int:
    """A record's integer field, or 0 where it is not an integer in [lo, hi]."""
    value = integer(rec.get(key, 0), lo, hi)
    return value if value is not None else 0


def _list(rec: dict[str, Any], key: str) -> list[Any]:
    value = rec.get(key)
    return value if isinstance(value, list) else []


def _call(rec: dict[str, Any]) -> Call:
    fresh = integer(rec.get("fresh"), 0, 2**62)
    group, dtypes, values = (_list(rec, k) for k in ("group", "dtypes", "values"))
    return Call(_int(rec, "i", -1), _text(rec, "op", "?"), _int(rec, "numel_in"),
                _int(rec, "numel_out"), one_line(dtypes[0], 40) if dtypes else "?",
                [g for g in group[:RANK_MAX] if integer(g, 0, RANK_MAX) is not None],
                _text(rec, "site", "?"), _int(rec, "t0"),
                is_async=bool(rec.get("async")), peer=_text(rec, "peer"),
                fresh=fresh, nonfinite=bool(rec.get("nonfinite")),
                values=[float(v) for v in values if isinstance(v, (int, float))],
                digest=rec.get("digest") if isinstance(rec.get("digest"), dict) else None,
                of=_text(rec, "of"),
                trail=rec.get("trail") if isinstance(rec.get("trail"), dict) else None)


class TraceFile:
    """One process's trace file, read as it grows: each `update` parses only the lines
    written since the last one (the runner reads a live run's files every poll). A torn last
    line, from a kill mid-write, is skipped, and so is whatever else shares its line."""

    def __init__(self, path: Path, folder: RunFolder | None = None) -> None:
        self.path = path
        self.folder = folder or RunFolder(path.parents[1])
        self.rel = path.relative_to(self.folder.root)
        self.trace: ProcessTrace | None = None
        self.refused = ""  # why the file is not read (a link, a FIFO, too large)
        self.malformed = 0  # records that were not of the observer's form
        self._offset = 0
        self._partial = b""  # the last line, while its newline is not written yet
        self._by_index: dict[int, Call] = {}

    def update(self, final: bool = False) -> ProcessTrace | None:
        """The trace with every complete line read (`final`: the run has ended, so a last
        line without its newline is read too, if it parses)."""
        if self.refused:
            return self.trace
        try:
            data = self.folder.read(self.rel, TRACE_CAP - self._offset, self._offset)
        except Refused as e:
            self.refused = str(e)
            return self.trace
        except OSError:
            return self.trace
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        for line in lines:
            if len(line) > RECORD_CAP:
                self.malformed += 1
                continue
            try:
                self._take(line)
            except (TypeError, ValueError, KeyError, AttributeError, OverflowError):
                self.malformed += 1  # a record not of the observer's form: not evidence
        if self.trace is not None:
            stack = self.rel.parent / f"stack-{self.trace.pid}.txt"
            with contextlib.suppress(Refused):
                self.trace.stack = self.folder.read(stack, STACK_CAP).decode(
                    "utf-8", "replace")
        return self.trace

    def _take(self, line: bytes) -> None:
        try:
            rec = loads(line.decode("utf-8", errors="replace"))
        except ValueError:
            return
        if not isinstance(rec, dict):
            return
        ev, trace, by_index = rec.get("ev"), self.trace, self._by_index
        if ev == "hello":
            argv = _list(rec, "argv")
            self.trace = ProcessTrace(_int(rec, "pid", 0, PID_MAX), _int(rec, "ppid", 0, PID_MAX),
                                      [one_line(a, TEXT_CAP) for a in argv[:64]])
            by_index.clear()
        elif trace is None:
            return
        elif ev == "init" and "rank" in rec:
            rank, size = integer(rec["rank"], 0, RANK_MAX), integer(rec.get("size"), 1, RANK_MAX)
            if rank is not None and size is not None:
                trace.rank, trace.size = rank, size
        elif ev == "call":
            c = _call(rec)
            trace.calls.append(c)
            by_index[c.index] = c
        elif ev == "end" and integer(rec.get("i"), -1, 2**62) in by_index:
            by_index[rec["i"]].t1 = _int(rec, "t1")
            by_index[rec["i"]].error = _text(rec, "error") if rec.get("error") else None
        elif ev == "bye":
            trace.ended = True
        elif ev == "fr" and "entries" in rec:
            trace.flight_recorder = list(rec["entries"])
        elif ev == "bw":
            work = {k: int(rec[k]) for k in ("tokens", "rows", "token_crc") if k in rec}
            trace.backwards.append(_int(rec, "t"))
            trace.backward_steps.append(_int(rec, "step"))
            trace.work.append(work)
            if rec.get("leaves") and not trace.leaves:
                trace.leaves = list(rec["leaves"])
            if rec.get("leaf_elements"):
                trace.leaf_elements.append(int(rec["leaf_elements"]))
            if "loss" in rec:
                trace.losses.append((int(rec.get("step", 0)), float(rec["loss"])))
        elif ev == "leaves":  # a pass inside a step's backward (a reentrant checkpoint)
            if rec.get("leaf_elements"):
                trace.leaf_elements.append(int(rec["leaf_elements"]))
            trace.leaves += list(rec.get("slices") or [])  # the initial weights it reached
        elif ev == "grads":
            trace.grads_finite.append((int(rec.get("step", 0)), bool(rec.get("finite"))))
        elif ev == "nemesis":
            trace.nemesis = {**rec, "kind": _text(rec, "kind"), "t": _int(rec, "t"),
                             "rank": integer(rec.get("rank"), 0, RANK_MAX),
                             "step": integer(rec.get("step"), 0, 2**31)}
        elif ev == "raise" and trace.raised is None:
            # what a rank raised, as its launcher would print it: many lines, but its rank
            # an integer and its time a number (crash.py tells them in one line)
            trace.raised = {"text": str(rec.get("text", ""))[:STACK_CAP], "t": _int(rec, "t"),
                            "rank": integer(rec.get("rank"), 0, RANK_MAX), "via": _text(rec, "via")}
        elif ev == "mem":
            trace.memory.append(rec)
        elif ev == "state" and trace.state is None:
            trace.state = rec


class ObservationReader:
    """A run's observe directory, read as the run goes: each `read` parses only what was
    written since the last (the runner polls a live run every 0.2 s; reading every file
    whole each time cost a grading's pytest 0.6 of its 5.1 CPU-s, under cProfile)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.folder = RunFolder(directory.parent)  # the run's folder: the boundary's root
        self._files: dict[str, TraceFile] = {}

    def read(self, final: bool = False) -> Observation:
        """Every process seen so far (`final`: the run has ended; see TraceFile.update)."""
        obs = Observation(self.directory)
        rel = Path(self.directory.name)
        kind = self.folder.kind(rel)
        if kind != "dir":
            if kind != "missing":
                obs.problems.append(f"{rel} is a {kind}, not the folder the suite made: "
                                    "leave the observer's folder as it is")
            return obs
        try:
            names = [e for e in self.folder.entries(rel)
                     if e.name.startswith("p") and e.name.endswith(".jsonl")]
        except Refused as e:  # made a link since it was looked at (the run is alive)
            obs.problems.append(str(e))
            return obs
        for entry in names[:PROCESSES_CAP]:
            tf = self._files.setdefault(entry.name, TraceFile(self.directory / entry.name,
                                                              self.folder))
            trace = tf.update(final)
            if tf.refused:
                obs.problems.append(tf.refused)
            if tf.malformed:
                obs.problems.append(f"{rel}/{entry.name}: {tf.malformed} records not of the "
                                    "observer's form")
            if trace is not None:
                obs.processes.append(trace)
        if len(names) > PROCESSES_CAP:
            obs.problems.append(f"{rel} holds {len(names)} traces: the suite reads the first "
                                f"{PROCESSES_CAP}")
        return obs


def load_observation(directory: Path) -> Observation:
    """The observation of a run that has ended, read whole."""
    return ObservationReader(directory).read(final=True)


MISMATCH_S = 0.5  # how long provably mismatched calls are watched before the run is stopped


def _position(p: ProcessTrace, c: Call) -> int:
    """1-based place of collective `c` among the process's collectives."""
    return sum(1 for x in p.calls[:p.calls.index(c) + 1] if not x.p2p)


def _on_group(p: ProcessTrace, group: list[int], upto: Call | None = None) -> int:
    """How many collectives process `p` has issued on `group` (the ranks it spans), up to
    and including `upto` when given: each process group numbers its own calls, and gloo
    matches the k-th of one member with the k-th of every other."""
    n = 0
    for x in p.calls:
        n += not x.p2p and x.group == group
        if x is upto:
            break
    return n


# Collectives none of whose members returns before every member has entered it. (A broadcast
# or scatter root may return once its sends are buffered, a gather's or reduce's other
# members once theirs are; the *_object calls make further calls inside: no wait on the
# others is inferred from any of those.)
_EVERY_MEMBER = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                 "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier")


def _waits_in_a_cycle(ranks: dict[int, ProcessTrace], blocked: dict[int, Call]) -> bool:
    """Some ranks wait on each other in a ring that cannot turn: each is inside a collective
    that needs a member of its group which has not issued that call yet and is itself
    inside another call that needs one of them (the heads of exercise 1's two groups: ranks
    0,2 in a barrier of all four, ranks 1,3 in an all-reduce of their tensor-parallel pair
    that ranks 0,2 have not reached). A member that has issued the call has given its part
    (a message on its way, on a throttled box): no wait on it is inferred."""
    waits: dict[int, set[int]] = {}
    for r, c in blocked.items():
        if c.p2p or c.op not in _EVERY_MEMBER or r not in c.group:
            continue
        k = _on_group(ranks[r], c.group, c)
        waits[r] = {q for q in c.group if q != r and q in ranks
                    and _on_group(ranks[q], c.group) < k}
    # The ranks stuck for good: each waits on one of them (the greatest such set)
    stuck = {r for r, w in waits.items() if w}
    while True:
        free = {r for r in stuck if not waits[r] & stuck}
        if not free:
            return bool(stuck)
        stuck -= free


_ENDPOINT = re.compile(r"(src|dst)=(\d+)")


def _endpoint(c: Call) -> tuple[str, int] | None:
    """("recv", src) or ("send", dst): what a point-to-point call does and with which rank,
    if it names one."""
    m = _ENDPOINT.search(c.peer) if c.p2p else None
    return ("recv" if m[1] == "src" else "send", int(m[2])) if m else None


def _messages(p: ProcessTrace, kind: str, peer: int) -> int:
    """How many point-to-point calls of `kind` ("send" or "recv", blocking or not) process
    `p` has issued to or from `peer`."""
    ops = ("send", "isend") if kind == "send" else ("recv", "irecv")
    return sum(1 for c in p.calls if c.op in ops and _endpoint(c) == (kind, peer))


def _mismatched(ranks: dict[int, ProcessTrace], blocked: dict[int, Call]) -> bool:
    """Calls that can never complete together: different collectives (op, shape, or place in
    the sequence), or a point-to-point call whose peer is itself inside a collective and has
    not posted the other half (a receive from a rank that has sent this one fewer messages
    than it asked for; a send to one that asked for fewer): a message still on its way, as
    in a ring's last hop on a throttled box, is matched."""
    coll = {r: (tuple(c.group), _on_group(ranks[r], c.group, c), *c.signature())
            for r, c in blocked.items() if not c.p2p}
    # Only calls at the same place in one group's sequence can be told not to match: a rank
    # behind the others (in collective k while they are in k+1) has given them its part of
    # k, or they could not have left it; it is slow (a throttled box), not stuck.
    at: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
    for key in coll.values():
        at.setdefault(key[:2], set()).add(key)
    if any(len(keys) > 1 for keys in at.values()) or _waits_in_a_cycle(ranks, blocked):
        return True
    for r, c in blocked.items():
        end = _endpoint(c)
        if end is None:
            continue
        mine, peer = end
        if peer not in ranks:
            return True  # no such rank (a recv from rank 1 in the one-rank run): never
        if peer not in coll:
            continue
        theirs = "send" if mine == "recv" else "recv"
        if _messages(ranks[peer], theirs, r) < _messages(ranks[r], mine, peer):
            return True
    return False


def deadlocked(obs: Observation, now_ns: int, after_s: float,
               mismatch_s: float = MISMATCH_S) -> float | None:
    """All N ranks joined and every one has been inside an unfinished collective or
    point-to-point call for `after_s` seconds, or for `mismatch_s` when those calls provably
    cannot match; returns how long they have all been blocked, or None. (Waiting at the
    rendezvous is not a call.)"""
    ranks = obs.ranks()
    sizes = {p.size for p in ranks.values()}
    if len(sizes) != 1 or set(ranks) != set(range(sizes.pop() or 0)):
        return None
    blocked = {r: p.open_call() for r, p in ranks.items()}
    calls = {r: c for r, c in blocked.items() if c is not None}
    if len(calls) != len(ranks):
        return None  # a rank outside any call runs Python: progress, however slow

    waited = (now_ns - max(c.t0 for c in calls.values())) / 1e9
    if waited >= after_s or (waited >= min(mismatch_s, after_s) and _mismatched(ranks, calls)):
        return waited
    return None


def _innermost_frame(stack: str) -> str:
    """'file:line in func' of the first submission frame of the main thread's dump."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", stack.strip())
    for block in reversed(blocks):  # the latest dump comes last
        if "most recent call first" not in block:
            continue
        for m in re.finditer(r'File "(?P<f>[^"]+)", line (?P<l>\d+) in (?P<fn>\S+)', block):
            if "/torch/" in m["f"] or "/observer/" in m["f"] or "threading.py" in m["f"] \
                    or "typing_extensions" in m["f"]:  # torch's deprecation wrappers
                continue
            return f"{'/'.join(m['f'].split('/')[-2:])}:{m['l']} in {m['fn']}"
    return ""


def rank_list(ranks: list[int]) -> str:
    """'rank 3', 'ranks 0-3', 'ranks 0,2' of sorted, distinct ranks."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ",".join(map(str, ranks))


def where_blocked(obs: Observation) -> str:
    """One line: each rank's unfinished call (ranks in the same call grouped), else its stack.
    e.g. 'rank 0 blocked in recv(src=1) at main.py:153; ranks 1-3 in all_reduce #13 at
    main.py:160'."""
    groups: dict[str, list[int]] = {}
    for rank, p in sorted(obs.ranks().items()):
        c = p.open_call()
        if c is not None:
            what = (f"{c.name}({c.peer})" if c.p2p and c.peer else c.name if c.p2p
                    else f"{c.op} #{_position(p, c)}") + f" at {c.site}"
            if p.size and (end := _endpoint(c)) is not None and end[1] >= p.size:
                what += f" (there is no rank {end[1]} in a run of {p.size})"
        else:
            frame = _innermost_frame(p.stack)
            last = p.calls[-1].describe() if p.calls else "none"
            what = (f"not in a collective (at {frame}; last call {last})" if frame
                    else f"not in a collective (last call {last})")
        groups.setdefault(what, []).append(rank)
    if not groups:
        return "no rank joined a process group"
    parts = []
    for i, (what, ranks) in enumerate(groups.items()):
        verb = "blocked in " if i == 0 and not what.startswith("not ") else (
            "in " if not what.startswith("not ") else "")
        parts.append(f"{rank_list(ranks)} {verb}{what}")
    return "; ".join(parts)


def stacks(obs: Observation, limit: int = 12) -> str:
    """Each rank's faulthandler dump (the first `limit` lines), for the failure message."""
    out = []
    for rank, p in sorted(obs.ranks().items()):
        if p.stack.strip():
            lines = [ln for ln in p.stack.strip().splitlines()
                     if f"{OBSERVER_DIR.name}/sitecustomize.py" not in ln]  # the suite's frame
            out.append(f"rank {rank} (pid {p.pid}):\n  " + "\n  ".join(lines[:limit]))
    return "\n".join(out)
