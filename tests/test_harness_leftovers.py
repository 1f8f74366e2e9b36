"""Issue 72: after a run, the grader (root) acts on what the run left, with its own rights. A
dishonest student's programs (tests/hostile/left_*.py, one vector each) leave tracebacks
naming files that are not theirs, links, trace records naming other processes, FIFOs,
endless, huge or deep files, manifests naming files outside their checkpoints and text made
to be read as markup. Each is run through the suite's run cache under both containments
(namespaces, and the run user as where a Docker grader refuses unshare), and what the suite
then did is checked against canaries: files (hashed before and after, their bytes looked for
in everything the suite said), a process outside the run (alive, never signalled), the
grader's own time and memory, the processes left. A class of two (an honest student and a
hostile one trying the vectors across its runs) is graded by `python -m tests.grade_class`
as root, and the grades folder is searched for every canary's bytes.

Where a vector would harm the machine on a suite that falls for it (a signal to every
process, an endless read into memory, a read that never returns), the grading is driven in
a process of its own (`drive`): in a PID namespace of its own where it would signal, with
its memory capped, and stopped at a bound of the test's."""

from __future__ import annotations

import contextlib
import csv
import ctypes
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from tests.harness.check.checks import (
    check_checkpoint_files,
    check_clean_exit,
    check_monotonic_loss,
)
from tests.harness.observe.violations import Violation, summarize
from tests.harness.run import access, contain
from tests.harness.run.result import Run
from tests.harness.run.runner import SESSION_VAR, Watch, kill_pids, processes_with_token
from tests.harness.run.runs import BASE, RESUMED, RunCache

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "hostile"
BOUND = 2.0  # seconds: the programs are up in well under 0.1 s; left_pid sleeps to it
SLACK = 10.0
DRIVE_S = 60.0  # a driven grading that has not ended by then hangs (its start included)
MEM_BYTES = 512 * 2**20  # what one process of a run may allocate
GRADER_DATA_BYTES = 2 * 2**30  # a driven grader's own allocations, at most (RLIMIT_DATA)
READ_MB = 150  # what reading a run's files may add to the grader's peak memory, at most
READ_BYTES_MB = 64  # what the grader may read of a run's files, at most (its read(2) bytes)
LINK_WORDS = ("link", "symlink")


# -- set-up ---------------------------------------------------------------------------------

@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder outside pytest's temporary root, for what a run user must reach (a class, a
    submission): every pytest that starts closes that root to others again."""
    made = Path(tempfile.mkdtemp(prefix="capstone-leftover-"))
    made.chmod(0o755)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def hostile(name: str, *variant: str) -> tuple[str, ...]:
    return (sys.executable, str(HOSTILE / f"{name}.py"), *variant)


def cache(root: Path, cwd: Path = ROOT, bound: float = BOUND,
          file_bytes: int = 8 * 2**20) -> RunCache:
    return RunCache(root, bound, cwd, MEM_BYTES, file_bytes,
                    Watch(observe=True, contain=True, grace_s=0.5))


def token(kind: str) -> str:
    return f"{kind}-{secrets.token_hex(12)}"


def root_only(path: Path, text: str) -> Path:
    """A file only root may read (0600 in a folder of mode 0700)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    path.write_text(text)
    path.chmod(0o600)
    return path


def digest(path: Path) -> str:
    """What a canary is, by content, mode and kind (a link put in its place changes it)."""
    st = path.lstat()
    data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
    return f"{st.st_mode:o}:{hashlib.sha256(data).hexdigest()}"


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): digest(p) for p in sorted(folder.rglob("*"))}


def said(r: Run, *violations: Violation) -> str:
    """Everything the suite keeps or says of a run: its outcome, the problems of its files,
    the violations given, what it read of the observer's traces, and the files it wrote
    beside the run (regular ones: a link the run planted is not the suite's)."""
    parts = [json.dumps(asdict(r.outcome)), *map(str, r.parsed.problems), *map(str, violations)]
    if r.observed is not None:
        for p in r.observed.processes:
            parts += [p.stack, json.dumps(p.raised), json.dumps(p.argv)]
    d = Path(r.outcome.out).parent
    for name in ("outcome.json", "timeline.json", "sandbox.json"):
        path = d / name
        if path.is_file() and not path.is_symlink():
            parts.append(path.read_text(errors="replace"))
    return "\n".join(parts)


def left_behind(r: Run) -> list[int]:
    return processes_with_token(r.outcome.token)


def within_bound(r: Run, c: RunCache) -> None:
    assert r.outcome.wall_s <= c.timeout_s + SLACK, \
        f"the suite waited {r.outcome.wall_s:.1f}s (bound {c.timeout_s:.1f}s)"


def told_as_link(r: Run, name: str) -> bool:
    return any(name in str(p) and any(w in str(p) for w in LINK_WORDS)
               for p in r.parsed.problems)


class Opens:
    """Which of `paths` (files; folders: the files in them) are opened or read while it is
    on, as the kernel tells it (inotify): the grader's reads, whatever it says of them."""

    IN_ACCESS, IN_OPEN, IN_ISDIR = 0x1, 0x20, 0x40000000

    def __init__(self, paths: list[Path]) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.watched: dict[int, Path] = {}
        for p in paths:
            wd = self.libc.inotify_add_watch(self.fd, str(p).encode(),
                                             self.IN_OPEN | self.IN_ACCESS)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {p}")
            self.watched[wd] = p

    def seen(self) -> list[str]:
        found = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            i = 0
            while i < len(data):
                wd, mask, _, n = struct.unpack_from("iIII", data, i)
                name = data[i + 16:i + 16 + n].rstrip(b"\0").decode(errors="replace")
                i += 16 + n
                if mask & self.IN_ISDIR:
                    continue  # a folder listed, not a file read
                where = self.watched.get(wd, Path("?"))
                found.append(str(where / name) if name else str(where))
        return sorted(set(found))

    def close(self) -> None:
        os.close(self.fd)


# -- driven gradings: in a process of their own -----------------------------------------------

def drive(job: dict[str, Any]) -> None:
    """(In the test's subprocess.) Grade one hostile run as the suite does, with a canary
    process beside it and this process's own signals recorded, and print what happened as
    one JSON line: the suite's error if it raised one, the time its `get` took, the run's
    outcome and problems, the processes left, the signals the grader and the canary got,
    and the grader's peak memory before and after."""
    import resource

    got: list[str] = []
    for name in ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP"):
        signal.signal(getattr(signal, name),
                      lambda s, _f: got.append(signal.Signals(s).name))
    resource.setrlimit(resource.RLIMIT_DATA,
                       (GRADER_DATA_BYTES, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    log = Path(job["canary_log"])
    canary = subprocess.Popen([sys.executable, str(HOSTILE / "_canary.py"), str(log)],
                              start_new_session=True, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    Path(job["canary_pid"]).write_text(str(canary.pid))  # for the test to end, if this hangs
    deadline = time.monotonic() + 20
    while not (log.is_file() and "ready" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.environ["LEFT_CANARY_PID"] = str(canary.pid)
    os.environ.update(job.get("env", {}))
    c = cache(Path(job["root"]), bound=job.get("bound", BOUND),
              file_bytes=job.get("file_bytes", 8 * 2**20))
    report: dict[str, Any] = {"timeout_s": c.timeout_s, "error": ""}
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    import psutil

    chars0 = psutil.Process().io_counters().read_chars  # bytes this process read(2)
    t0 = time.monotonic()
    try:
        r = c.get(tuple(job["impl"]), BASE)
    except BaseException as e:  # the suite's own error: what the test reports
        report["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        r = None
    report["get_s"] = time.monotonic() - t0
    report["rss_growth_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    report["read_mb"] = (psutil.Process().io_counters().read_chars - chars0) / 2**20
    if r is not None:
        report["wall_s"] = r.outcome.wall_s
        report["outcome"] = asdict(r.outcome)
        report["problems"] = [str(p) for p in r.parsed.problems]
        report["clean_exit"] = [str(v) for v in check_clean_exit(r)]
        report["left"] = processes_with_token(r.outcome.token)
    time.sleep(0.2)  # a signal on its way
    report["canary_alive"] = canary.poll() is None
    report["canary_log"] = log.read_text().split()
    report["grader_signals"] = got
    canary.kill()
    canary.wait()
    print(json.dumps(report))


def driven(tmp_path: Path, impl: tuple[str, ...], isolate: bool = False,
           **job: Any) -> dict[str, Any]:
    """`drive` in a subprocess of its own session (with `isolate`, in a PID namespace of its
    own, with an access journal of its own: a signal to every process reaches only that
    namespace's); its report, or
    {"hung": ...} where it had not ended after DRIVE_S. Its runs carry a session marker of
    their own: whatever of them is left is found, reported and ended."""
    session = f"{os.environ.get(SESSION_VAR, 'nosession')}-left{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, **{SESSION_VAR: session})
    job = {"impl": list(impl), "root": str(tmp_path / "runs"),
           "canary_log": str(tmp_path / "canary.log"),
           "canary_pid": str(tmp_path / "canary.pid"), **job}
    argv = [sys.executable, "-c", "import json, sys\nfrom tests.test_harness_leftovers "
            "import drive\ndrive(json.loads(sys.argv[1]))", json.dumps(job)]
    if isolate:
        argv = [shutil.which("unshare") or "unshare", "--pid", "--fork", "--kill-child",
                "--mount-proc", *argv]
        # its own access journal: the machine's names its holders by host pids, which a PID
        # namespace does not see (it would put back what live gradings hold, and they its)
        env[access.STORE_VAR] = str(tmp_path / "access")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=DRIVE_S)
        report = json.loads(out.strip().splitlines()[-1]) if out.strip() else \
            {"error": f"the driver wrote nothing (exit {proc.returncode}): {err[-2000:]}"}
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
        report = {"hung": f"the grading had not ended after {DRIVE_S:.0f}s (it hangs)"}
        if not isolate:  # (in a namespace, the canary ended with it)
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(Path(job["canary_pid"]).read_text()), signal.SIGKILL)
    left = processes_with_token(f"{session}-", prefix=True)
    kill_pids(left)
    report["left_after"] = left
    return report


def drove_well(report: dict[str, Any]) -> None:
    """The driven grading ended, without an error of the suite's, within its bound."""
    assert "hung" not in report, report["hung"]
    assert not report["error"], f"the suite raised {report['error']}"
    assert report["wall_s"] <= report["timeout_s"] + SLACK, \
        f"the suite waited {report['wall_s']:.1f}s (bound {report['timeout_s']:.1f}s)"
    assert report["left"] == [] and report["left_after"] == [], \
        f"processes left: {report['left']} {report['left_after']}"


# -- 1. a traceback naming files that are not the submission's ----------------------------------

@pytest.mark.parametrize("variant", ["classmate", "classmate_abs", "root", "suite", "own"])
def test_where_it_raised_shows_only_the_submissions_own_files(contained, folder, tmp_path,
                                                              monkeypatch, variant):
    """tests/hostile/left_traceback.py, copied as a class's hostile/main.py, writes a
    traceback whose only frame is line 3 of its classmate's main.py (../other/main.py, from
    the submission's folder, where a grading session's pytest runs; and by its absolute
    path), of a file only root may read, or of the suite's own runner.py: "where it raised"
    shows none of their lines (the grader read them with its own rights); its own file's it
    shows."""
    sub, other = folder / "class" / "hostile", folder / "class" / "other"
    for d in (sub, other):
        d.mkdir(parents=True)
    for name in ("left_traceback.py", "_common.py"):
        shutil.copy(HOSTILE / name, sub / ("main.py" if name.startswith("left") else name))
    classmate = token("CLASSMATE")
    (other / "main.py").write_text("".join(f"# {classmate} line {n}\n" for n in range(1, 8)))
    secret = token("ROOT")
    root_file = root_only(tmp_path / "root" / "secret",
                          "".join(f"{secret} line {n}\n" for n in range(1, 8)))
    monkeypatch.setenv("LEFT_ROOT_FILE", str(root_file))
    suite_lines = (ROOT / "tests" / "harness" / "run" / "runner.py").read_text().splitlines()
    own_lines = (sub / "main.py").read_text().splitlines()
    forbidden = {"classmate": [classmate], "classmate_abs": [classmate], "root": [secret],
                 "suite": [ln for ln in suite_lines[:5] if len(ln.strip()) > 12],
                 "own": [classmate, secret]}[variant]
    before = digest(root_file), tree_digest(other)
    monkeypatch.chdir(sub)  # as a grading session's pytest runs: in the submission's folder
    c = cache(tmp_path / "runs", cwd=sub)
    r = c.get((sys.executable, str(sub / "main.py"), variant), BASE)
    assert "RuntimeError: x" in r.outcome.first_error, r.outcome.reason()
    leaked = [f for f in forbidden if f in said(r, *check_clean_exit(r))]
    assert not leaked, f"the grader showed {variant}'s lines: {r.outcome.crash_source!r}"
    if variant == "own":
        assert own_lines[2] in r.outcome.crash_source, r.outcome.crash_source
    else:
        assert r.outcome.crash_source == "", r.outcome.crash_source
    assert (digest(root_file), tree_digest(other)) == before
    within_bound(r, c)
    assert left_behind(r) == []


# -- 2. links where the suite reads and writes after the run -----------------------------------

def test_links_a_run_leaves_are_never_read_or_written_through(contained, tmp_path,
                                                              monkeypatch):
    """tests/hostile/left_links.py `files`: `timeline.json` and `sandbox.json` (which the
    suite writes beside the run after it) are links to a file outside the run; its own
    stderr log, its stack file, rank 0's metrics and summary.json links to a file only root
    may read. Neither file changes, none of their bytes is in anything the suite says, and
    the run is told its files are links."""
    written, secret = token("WRITTEN"), token("ROOT")
    outside = tmp_path / "outside.txt"
    outside.write_text(f"{written}\n")
    root_file = root_only(tmp_path / "root" / "secret", f"{secret}\n" * 8)
    before = digest(outside), digest(root_file)
    monkeypatch.setenv("LEFT_CANARY", str(outside))
    monkeypatch.setenv("LEFT_ROOT_CANARY", str(root_file))
    c = cache(tmp_path / "runs")
    r = c.get(hostile("left_links", "files"), BASE)
    planted = json.loads((r.parsed.out / "links.json").read_text())
    assert planted.get("out/metrics/rank-0.jsonl") == "linked", planted
    assert (digest(outside), digest(root_file)) == before, "a canary changed"
    text = said(r, *check_clean_exit(r), *check_monotonic_loss(r))
    assert written not in text and secret not in text, "a canary's bytes are in what it said"
    for name in ("rank-0.jsonl", "summary.json"):
        assert told_as_link(r, name), [str(p) for p in r.parsed.problems]
    within_bound(r, c)
    assert left_behind(r) == []


def test_an_observer_folder_replaced_by_a_link_is_not_read(contained, tmp_path, monkeypatch):
    """tests/hostile/left_links.py `observe`: the observer's folder renamed and a link put in
    its place, to a folder only root may read holding another run's traces (a raise and a
    stack that name a secret): the suite reads none of them, nor changes them."""
    secret = token("FORGED")
    forged = tmp_path / "forged"
    forged.mkdir(mode=0o700)
    records = [{"ev": "hello", "pid": 1, "ppid": 0, "argv": [secret]},
               {"ev": "init", "rank": 0, "size": 4},
               {"ev": "raise", "rank": 0, "t": 1, "via": "excepthook",
                "text": f'Traceback (most recent call last):\n  File "main.py", line 1, in '
                        f"<module>\n    x\nRuntimeError: {secret}\n"}]
    (forged / "p1-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in records))
    (forged / "stack-1.txt").write_text(f"{secret}\n")
    for p in forged.iterdir():
        p.chmod(0o600)
    before = tree_digest(forged)
    monkeypatch.setenv("LEFT_FORGED_DIR", str(forged))
    c = cache(tmp_path / "runs")
    r = c.get(hostile("left_links", "observe"), BASE)
    planted = json.loads((r.parsed.out / "links.json").read_text())
    assert planted.get("observe") == "linked", planted
    assert secret not in said(r, *check_clean_exit(r)), r.outcome.reason()
    assert tree_digest(forged) == before
    within_bound(r, c)
    assert left_behind(r) == []


# -- 3. a trace record naming a process outside the run ------------------------------------------

@pytest.mark.parametrize("variant", ["canary", "minus1", "zero"])
def test_a_pid_a_run_writes_in_its_traces_is_never_signalled(contained, tmp_path, variant):
    """tests/hostile/left_pid.py writes a `hello` record in the observer's folder whose pid is
    a process outside the run (a canary that records every signal it gets), -1 or 0, then
    sleeps until it is stopped at its bound, where the suite asks each traced process for
    its stack: the canary is alive and got no signal, nor did the grader. (Driven in a
    process of its own; -1 in a PID namespace of its own, where a suite that sends kill(-1)
    as root reaches only that namespace's processes, the canary among them.)"""
    isolate = variant == "minus1"  # the others name the canary's pid, or the grader's group
    if isolate and not _can_isolate():
        pytest.skip("no PID namespace to drive it in: kill(-1) as root would reach every "
                    "process of this machine")
    report = driven(tmp_path, hostile("left_pid", variant), isolate=isolate)
    assert "hung" not in report, report["hung"]
    assert report["canary_alive"] and report["canary_log"] == ["ready"], \
        f"the canary got {report['canary_log'][1:]} (alive: {report['canary_alive']})"
    assert report["grader_signals"] == [], f"the grader got {report['grader_signals']}"
    drove_well(report)
    assert report["outcome"]["timed_out"], report["outcome"]  # it slept to its bound


def _can_isolate() -> bool:
    exe = shutil.which("unshare")
    if exe is None:
        return False
    probe = subprocess.run([exe, "--pid", "--fork", "--kill-child", "--mount-proc", "true"],
                           capture_output=True, timeout=20)
    return probe.returncode == 0


# -- 4. FIFOs where the suite reads ---------------------------------------------------------------

def test_fifos_a_run_leaves_never_hang_the_grading(contained, tmp_path):
    """tests/hostile/left_fifo.py makes summary.json, rank 0's metrics, an observer trace
    file and its stdout log FIFOs, then exits 0: the grading ends within its bound (an open
    of a FIFO with no writer never returns) and says those files are not regular files."""
    report = driven(tmp_path, hostile("left_fifo"))
    drove_well(report)
    problems = report["problems"]
    for name in ("summary.json", "rank-0.jsonl"):
        assert any(name in p and "not a regular file" in p for p in problems), problems


# -- 5. a trace record whose text forges the suite's own lines ------------------------------------

def test_a_forged_record_names_no_timeline_for_the_grading_to_copy(contained, tmp_path,
                                                                   monkeypatch):
    """tests/hostile/left_record.py writes a raise record whose rank is a string holding
    newlines and whose text holds "timeline of the base run: <a file only root may read>
    (open it in ui.perfetto.dev)", as the suite names the timelines it keeps, and a path to
    it climbing out of the run: the run's error is told in one line, no line of what the
    check says is a timeline's, and the feedback a grading writes from it (grade_class's
    write_feedback) copies nothing but the suite's own timelines."""
    from tests.harness.report.class_report import write_feedback

    secret = token("ROOT")
    root_file = root_only(tmp_path / "root" / "canary", f"{secret}\n")
    before = digest(root_file)
    monkeypatch.setenv("LEFT_ROOT_CANARY", str(root_file))
    c = cache(tmp_path / "runs")
    r = c.get(hostile("left_record"), BASE)
    violations = check_clean_exit(r)
    assert r.outcome.first_error and "\n" not in r.outcome.first_error, r.outcome.first_error
    output = f"termination of the base run: {len(violations)} violation(s)\n" \
        f"{summarize(violations)}"
    forged = [ln for ln in output.splitlines() if ln.startswith("timeline of the ")]
    assert not forged, forged
    grades = tmp_path / "grades"
    graded = grades / "students" / "hostile"
    graded.mkdir(parents=True)
    results = {"score": 0.0, "output": "", "tests": [
        {"name": "tests/test_invariant_no_deadlock.py::test_run_ends_cleanly_within_the_bound"
                 "[base]", "score": 0.0, "max_score": 5.0, "status": "failed",
         "output": output, "visibility": "visible"}]}
    (graded / "results.json").write_text(json.dumps(results))
    write_feedback(grades, "hostile", results, graded)
    copied = [p for p in (grades / "feedback").rglob("*") if p.is_file() and
              secret.encode() in p.read_bytes()]
    assert not copied, f"the grading copied the root-only file to {copied}"
    assert digest(root_file) == before
    within_bound(r, c)
    assert left_behind(r) == []


# -- 6. endless, huge and deep files --------------------------------------------------------------

@pytest.mark.parametrize("variant", ["zero", "huge", "deep", "line"])
def test_endless_huge_or_deep_files_are_refused_not_read_whole(contained, tmp_path, variant):
    """tests/hostile/left_big.py: summary.json a link to /dev/zero, rank 0's metrics a 200 MB
    file, summary.json and a trace line nested 100,000 deep, a 10 MB line in the metrics and
    the traces: the suite raises nothing of its own (no MemoryError, no RecursionError), adds
    at most READ_MB to its peak memory, reads at most READ_BYTES_MB of them (counted by the
    kernel, not by the clock), and says what it refused. (Driven with the grader's memory
    capped: an endless read stops there.)"""
    report = driven(tmp_path, hostile("left_big", variant), file_bytes=256 * 2**20)
    drove_well(report)
    assert report["read_mb"] <= READ_BYTES_MB, \
        f"the grader read {report['read_mb']:.0f} MB of the run's files"
    assert report["rss_growth_mb"] <= READ_MB, \
        f"reading the run's files grew the grader by {report['rss_growth_mb']:.0f} MB"
    problems = report["problems"]
    if variant == "zero":
        assert any("summary.json" in p and any(w in p for w in LINK_WORDS)
                   for p in problems), problems
    elif variant == "huge":
        assert any("rank-0.jsonl" in p for p in problems), problems
    elif variant == "deep":
        assert any("summary.json" in p for p in problems), problems


# -- 7. manifests naming files outside their checkpoint, a linked checkpoint ---------------------

def test_checkpoints_are_read_only_inside_their_own_folder(contained, folder, tmp_path,
                                                            monkeypatch):
    """tests/hostile/left_manifest.py: step 20's manifest names a file only root may read by
    its absolute path (with its right digest for rank 0, a wrong one for rank 1), `../../x`
    and a path climbing out of the run; step 10 is a link to a classmate's checkpoint. The
    grader opens none of those files (inotify), tells the right guess as it tells the wrong
    one (no sha256 oracle), says none of their bytes or digests; the resume from step 10 is
    not given the link (not started, or given a folder of the run's own)."""
    secret = token("ROOT")
    root_file = root_only(tmp_path / "root" / "canary", f"{secret}\n")
    right = hashlib.sha256(root_file.read_bytes()).hexdigest()
    marker = token("CLASSMATE")
    classmate = folder / "other" / "checkpoint"
    classmate.mkdir(parents=True)
    shards = []
    for rank in range(4):
        (classmate / f"rank-{rank}.pt").write_text(f"{marker} {rank}\n")
        shards.append({"rank": rank, "file": f"rank-{rank}.pt", "bytes": 1, "sha256":
                       hashlib.sha256((classmate / f"rank-{rank}.pt").read_bytes()).hexdigest()})
    (classmate / "manifest.json").write_text(json.dumps(
        {"contract": 1, "step": 10, "world_size": 4, "n_params": 30080, "shards": shards,
         "note": marker}))
    (classmate / "main.py").write_text(f"# {marker}\n")
    before = digest(root_file), tree_digest(classmate)
    monkeypatch.setenv("LEFT_ROOT_CANARY", str(root_file))
    monkeypatch.setenv("LEFT_ROOT_CANARY_SHA", right)
    monkeypatch.setenv("LEFT_CLASSMATE_DIR", str(classmate))
    c = cache(tmp_path / "runs")
    opens = Opens([root_file, classmate])
    try:
        base = c.get(hostile("left_manifest"), BASE)
        outside = base.parsed.out / "x"
        opens_x = Opens([outside])
        try:
            violations = check_checkpoint_files(base, [10, 20])
            read = opens.seen() + opens_x.seen()
        finally:
            opens_x.close()
    finally:
        opens.close()
    assert base.outcome.returncode == 0, base.outcome.reason()
    text = "\n".join(map(str, violations))
    assert not read, f"the grader opened {read}"
    assert right not in text and secret not in text and marker not in text, text
    charged = {(v.rank, v.step) for v in violations}
    assert {(r, 20) for r in range(4)} <= charged, text
    assert any(v.step == 10 for v in violations), text

    def told(rank: int, guess: str) -> list[tuple[str, str, str]]:
        return sorted((str(v.expected).replace(guess, "<guess>"),
                       str(v.found).replace(guess, "<guess>"),
                       v.message.replace(guess, "<guess>"))
                      for v in violations if v.rank == rank and v.step == 20)

    wrong = hashlib.sha256(b"a wrong guess").hexdigest()
    assert told(0, right) == told(1, wrong), "the right digest is told apart from a wrong one"
    resumed = c.get(hostile("left_manifest"), RESUMED)
    argv = resumed.outcome.argv
    started = not resumed.outcome.first_error.startswith("the suite did not start this resume")
    if not started:  # refused, and said so, in the student's terms
        assert "do not link them" in resumed.outcome.reason(), resumed.outcome.reason()
        assert not (resumed.parsed.out / "resume_read.json").exists()
    if "--resume" in argv and started:
        given = Path(argv[argv.index("--resume") + 1])
        assert not given.is_symlink(), f"the resume was given the link {given}"
        assert given.resolve().is_relative_to(base.parsed.out.resolve()), given.resolve()
    seen = resumed.parsed.out / "resume_read.json"
    assert not seen.is_file() or marker not in seen.read_text(), seen.read_text()[:500]
    assert marker not in said(resumed, *check_clean_exit(resumed))
    assert (digest(root_file), tree_digest(classmate)) == before
    within_bound(base, c)
    assert left_behind(base) == [] and left_behind(resumed) == []


# -- 8. text made to be read as markup ------------------------------------------------------------

MARKUP = ("<img src=x>", "[link](http://x)")


def _outside_code(markdown: str) -> str:
    """The Markdown with its code (fenced blocks, backtick spans) taken out: what a reader
    renders as markup."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return re.sub(r"(`+).*?\1", "", text)


def unescaped(markdown: str) -> list[str]:
    """Run-chosen markup a page shows as markup: an HTML tag, a link, a forged table row."""
    plain = _outside_code(markdown)
    found = [m for m in MARKUP if m in plain]
    found += [ln for ln in plain.splitlines() if ln.startswith("| forged |")]
    return found


def test_markup_in_a_runs_text_is_drawn_and_written_as_text(contained, tmp_path):
    """tests/hostile/left_mathtext.py logs NaN losses, and puts `$\\frac{$`, a Markdown link,
    an HTML tag and table cells in its error and in a call site of its traces (an open
    collective, which the timeline picture draws), with a newline and a forged table row
    where a field holds one: the pictures are drawn, and the feedback page and the class
    summary written, with that text shown as text."""
    pytest.importorskip("matplotlib")
    from tests.harness.report.class_report import write_feedback, write_summary
    from tests.harness.report.pictures import as_text, facts, render

    c = cache(tmp_path / "runs")
    r = c.get(hostile("left_mathtext"), BASE)
    assert r.outcome.returncode == 1, r.outcome.reason()
    ending, losses = check_clean_exit(r), check_monotonic_loss(r)
    pictures = {}
    for invariant, violations, test in (
            ("no_deadlock", ending,
             "tests/test_invariant_no_deadlock.py::test_run_ends_cleanly_within_the_bound[base]"),
            ("monotonic_loss", losses,
             "tests/test_invariant_monotonic_loss.py::test_loss_falls_at_every_step[base]")):
        f = facts(invariant, [r], violations)
        if f is not None:
            render(f, tmp_path / f"{invariant}.png", f"hostile: {invariant}")
            assert "\n| forged |" not in as_text(f)
            pictures[test] = f
    assert pictures, "nothing to draw: the vector did not reach a picture"
    grades = tmp_path / "grades"
    graded = grades / "students" / "hostile"
    graded.mkdir(parents=True)
    tests = [{"name": name, "score": 0.0, "max_score": 5.0, "status": "failed",
              "visibility": "visible",
              "output": f"{name.split('::')[0]}: {len(vs)} violation(s)\n{summarize(vs)}"}
             for name, vs in zip(pictures, (ending, losses), strict=False)]
    results = {"score": 0.0, "output": tests[0]["output"], "tests": tests,
               "extra_data": {"pictures": pictures}}
    write_feedback(grades, "hostile", results, graded)
    write_summary(grades, {"hostile": results})
    pages = {p.name: p.read_text() for p in grades.rglob("*.md")}
    assert pages and {n: u for n, p in pages.items() if (u := unescaped(p))} == {}
    within_bound(r, c)
    assert left_behind(r) == []


# -- a class of two: an honest student beside a hostile one ---------------------------------------

RUN_USERS = (contain.RUN_USER, contain.NS_USER)


@pytest.fixture(params=["allowed", "refused"])
def class_folder(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, dict]]:
    """A folder to grade a class in and the environment of its grading: its runs contained
    in namespaces ("allowed"), or as the run user with an `unshare` that exits 1 first on
    PATH ("refused"), as in Gradescope's Docker boxes; skipped where this machine cannot."""
    env = dict(os.environ)
    if request.param == "refused":
        if os.geteuid() != 0 or contain.run_user() is None:
            pytest.skip(f"no run user here: {contain.why_not_user()}")
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "unshare").write_text("#!/bin/sh\nexit 1\n")
        (fake / "unshare").chmod(0o755)
        env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    elif contain._unshare_prefix() is None:
        pytest.skip("unshare is not allowed here")
    if os.geteuid() != 0:
        pytest.skip("the class is graded as root")
    made = Path(tempfile.mkdtemp(prefix="capstone-class-"))
    made.chmod(0o755)
    try:
        yield made, env
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _every_file(folder: Path) -> Iterator[Path]:
    for top, dirs, files in os.walk(folder, followlinks=False):
        for name in [*files, *dirs]:
            yield Path(top) / name


@pytest.mark.platforms  # a whole grading (a minute or two): the platforms tier
@pytest.mark.long
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_class_with_a_hostile_student_leaks_nothing_and_harms_nobody(class_folder):
    """`python -m tests.grade_class`, as root, grades a class of two: `honest` (the reference
    submission, a unique marker in its main.py) and `hostile` (tests/hostile/left_class: each
    of its runs tries the leftover vectors), beside a file only root may read, a file the
    hostile runs name, and a process outside every run. After grading: grade_class ended
    well; no byte of the honest main.py's marker, of the root-only file, of the named file
    or of the suite's runner.py is in any file under the grades folder; nothing outside the
    runs changed (the canaries, the honest submission); the process is alive and got no
    signal; the hostile student scores under 100, the honest one its known 100; no process
    of the run users is left of this class."""
    folder, env = class_folder
    subs, grades = folder / "submissions", folder / "grades"
    honest, bad = subs / "honest", subs / "hostile"
    honest.mkdir(parents=True)
    bad.mkdir()
    marker = token("HONEST")
    (honest / "main.py").write_text(
        f"# {marker}\n" + (ROOT / "tests" / "submissions" / "reference" / "main.py").read_text())
    for p in HOSTILE.glob("left_*.py"):
        shutil.copy(p, bad / p.name)
    shutil.copy(HOSTILE / "_common.py", bad / "_common.py")
    shutil.copy(HOSTILE / "left_class" / "main.py", bad / "main.py")
    secret, named_token, forged_token = token("ROOT"), token("NAMED"), token("FORGED")
    root_file = Path("/root") / f"capstone-leftover-{secrets.token_hex(6)}"
    named = folder / "named" / "file.txt"
    forged = folder / "forged"
    log = folder / "canary.log"
    canary = None
    try:
        root_file.write_text("".join(f"{secret} line {n}\n" for n in range(1, 8)))
        root_file.chmod(0o600)
        root_only(named, f"{named_token}\n")
        forged.mkdir(mode=0o700)
        (forged / "p1-1.jsonl").write_text(json.dumps(
            {"ev": "hello", "pid": 1, "ppid": 0, "argv": [forged_token]}) + "\n" + json.dumps(
            {"ev": "raise", "rank": 0, "t": 1, "via": "excepthook", "text":
             f'Traceback (most recent call last):\n  File "main.py", line 1, in <module>\n'
             f"    x\nRuntimeError: {forged_token}\n"}) + "\n")
        (forged / "stack-1.txt").write_text(f"{forged_token}\n")
        canary = subprocess.Popen([sys.executable, str(HOSTILE / "_canary.py"), str(log)],
                                  start_new_session=True)
        deadline = time.monotonic() + 20
        while not (log.is_file() and "ready" in log.read_text()) and \
                time.monotonic() < deadline:
            time.sleep(0.02)
        (bad / "targets.json").write_text(json.dumps({
            "LEFT_ROOT_CANARY": str(root_file), "LEFT_ROOT_FILE": str(root_file),
            "LEFT_ROOT_CANARY_SHA": hashlib.sha256(root_file.read_bytes()).hexdigest(),
            "LEFT_CANARY": str(named), "LEFT_CLASSMATE": "../honest/main.py",
            "LEFT_CLASSMATE_DIR": str(honest), "LEFT_FORGED_DIR": str(forged),
            "LEFT_CANARY_PID": str(canary.pid)}))
        outside = {"root": digest(root_file), "named": digest(named),
                   "forged": tree_digest(forged), "honest": tree_digest(honest)}
        done = subprocess.run(
            [sys.executable, "-m", "tests.grade_class", str(subs), "--out", str(grades),
             "--suite-seed", "7", "--reference-visible", "--run-timeout", "30",
             "--session-timeout", "420"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=840)
        assert done.returncode == 0, done.stderr[-3000:]
        suite_lines = [ln for ln in (ROOT / "tests" / "harness" / "run" / "runner.py")
                       .read_text().splitlines()[:5] if len(ln.strip()) > 12]
        wanted = {"the honest main.py's marker": marker, "the root-only file": secret,
                  "the named file": named_token, "the forged traces": forged_token,
                  **{f"runner.py's line {ln[:30]!r}": ln for ln in suite_lines}}
        found = {}
        for p in _every_file(grades):
            if p.is_symlink():
                found[str(p)] = f"a link to {os.readlink(p)}"
            elif p.is_file():
                data = p.read_bytes()
                hits = [what for what, s in wanted.items() if s.encode() in data]
                if hits:
                    found[str(p.relative_to(grades))] = ", ".join(hits)
        assert found == {}, found
        after = {"root": digest(root_file), "named": digest(named),
                 "forged": tree_digest(forged), "honest": tree_digest(honest)}
        assert after == outside, [k for k in outside if outside[k] != after[k]]
        time.sleep(0.2)
        assert canary.poll() is None and log.read_text().split() == ["ready"], \
            f"the canary process got {log.read_text().split()[1:]}"
        with open(grades / "grades.csv") as f:
            scores = {row["student"]: float(row["score"]) for row in csv.DictReader(f)}
        assert scores["hostile"] < 100, scores
        assert scores["honest"] == 100, scores
        import psutil

        left = []
        for p in psutil.process_iter(["username", "cwd", "cmdline"]):
            with contextlib.suppress(psutil.Error, TypeError):
                if p.info["username"] in RUN_USERS and (
                        str(folder) in (p.info["cwd"] or "") or
                        str(folder) in " ".join(p.info["cmdline"] or [])):
                    left.append(p.pid)
        assert left == [], f"processes of the run users left: {left}"
    finally:
        if canary is not None:
            canary.kill()
            canary.wait()
        root_file.unlink(missing_ok=True)
