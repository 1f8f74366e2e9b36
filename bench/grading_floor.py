"""What a grading's runs cost alone, beside the grading: the floor under which no suite can
grade while it starts these runs cold (issue 34: a grading at the speed of its runs).

Each round, this checkout grades the submission (bench/grading.py, namespaces) and keeps its
runs; then every run the grading made is started again from the command its outcome recorded,
bare (no pytest, observer, namespaces or memory walks, no checks), two at a time as the
grading makes them, in the order the grading started them. With --against REV, REV's suite
grades the same submission in the same round.

    python bench/grading_floor.py [SUBMISSION_DIR] [--against REV] [--rounds 3]

Prints a JSON row per grading and per replay, then the medians: the grading over its runs
alone, and with REV each of them over REV's grading (the runs' is the lowest ratio to REV a
suite making these runs could reach). A run in which the suite made a fault itself (the
nemesis: a NaN, a killed rank) replays as the clean run of its flags, as long or longer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grading import grade_with, worktree  # noqa: E402  (bench/, this script's folder)
from record import Figure, save  # noqa: E402
from suite import children_cpu_s  # noqa: E402

REFERENCE = ROOT / "tests" / "submissions" / "reference"


def recorded_runs(kept: Path) -> list[list[str]]:
    """The command of every run the grading kept in `kept`, in the order it started them."""
    outcomes = [json.loads(p.read_text()) for p in kept.glob("capstone-runs/*.outcome.json")]
    if not outcomes:
        raise SystemExit(f"no runs kept in {kept}: did the grading run?")
    outcomes.sort(key=lambda o: o["ended_ns"] - o["wall_s"] * 1e9)
    return [list(o["argv"]) for o in outcomes]


def replay(commands: list[list[str]], sub: Path, out: Path, workers: int = 2) -> float:
    """Start `commands` bare, `workers` at a time, each with its own --out; wall seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": str(ROOT)}  # as a run gets them, the reference's capstone importable
    todo = list(enumerate(commands))
    lock = threading.Lock()
    failed: list[str] = []

    def work() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, argv = todo.pop(0)
            argv = list(argv)
            argv[argv.index("--out") + 1] = str(out / f"run{i}")
            proc = subprocess.run(argv, cwd=sub, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True)
            if proc.returncode:
                failed.append(f"{' '.join(argv)}: exit {proc.returncode}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise SystemExit("a replayed run failed (a correct submission's must not):\n"
                         + "\n".join(failed))
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("submission", nargs="?", type=Path, default=REFERENCE)
    ap.add_argument("--against", metavar="REV", help="another revision, graded in turns")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    sub = a.submission.resolve()
    walls: dict[str, list[float]] = {}
    with worktree(a.against) if a.against else contextlib.nullcontext() as other:
        for _ in range(a.rounds):
            with tempfile.TemporaryDirectory() as tmp:
                kept = Path(tmp) / "kept"
                row = grade_with(ROOT, sub, "namespaces", "this checkout",
                                 ["--keep-runs", str(kept)])
                walls.setdefault("grading", []).append(row["wall_s"])
                print(json.dumps(row), flush=True)
                if other is not None:
                    row = grade_with(other, sub, "namespaces", a.against)
                    walls.setdefault("against", []).append(row["wall_s"])
                    print(json.dumps(row), flush=True)
                commands = recorded_runs(kept)
                cpu0 = children_cpu_s()
                wall = replay(commands, sub, Path(tmp) / "bare")
                walls.setdefault("runs alone", []).append(wall)
                print(json.dumps({"runs alone": len(commands), "wall_s": round(wall, 1),
                                  "cpu_s": round(children_cpu_s() - cpu0, 1)}), flush=True)
    med = {k: statistics.median(v) for k, v in walls.items()}
    line = (f"{sub.name}: grading {med['grading']:.1f} s, its {len(commands)} runs alone "
            f"{med['runs alone']:.1f} s: {med['grading'] / med['runs alone']:.2f}x")
    if a.against:
        line += (f"; {a.against}'s grading {med['against']:.1f} s: this grading "
                 f"{med['grading'] / med['against']:.2f}x of it, the runs alone "
                 f"{med['runs alone'] / med['against']:.2f}x of it")
    print(f"{line} (medians of {a.rounds})")
    figures = [Figure(f"grading `{sub.name}` / its {len(commands)} runs started bare (no "
                      "pytest, observer, namespaces or checks)",
                      f"{med['grading'] / med['runs alone']:.2f}x ({med['grading']:.1f} / "
                      f"{med['runs alone']:.1f} s, medians of {a.rounds})")]
    if a.against:
        figures.append(Figure(f"the same grading / `{a.against}`'s; its runs alone / "
                              f"`{a.against}`'s grading",
                              f"{med['grading'] / med['against']:.2f}x; "
                              f"{med['runs alone'] / med['against']:.2f}x"))
    save("grading_floor", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
