"""Vector: a crash whose traceback names a file that is not the submission's, hoping that the
grader (root) reads "where it raised" out of it with its own rights. It trains nothing: it
writes to stderr a traceback whose only frame is line 3 of

- `classmate`: a classmate's file, by its path from its own folder (`../other/main.py`,
  or $LEFT_CLASSMATE), which is the grader's working directory in a grading session;
- `classmate_abs`: the same file by its absolute path (whatever the grader's directory);
- `root`: a file only root may read ($LEFT_ROOT_FILE, else /root/.bashrc);
- `suite`: the suite's own checkout (tests/harness/run/runner.py, found through the
  observer's folder on its PYTHONPATH: <suite>/tests/observer), or $LEFT_SUITE_FILE;
- `own`: its own file (what the grader may show),

and exits 1."""

import os
import sys
from pathlib import Path

from _common import out_dir


def suite_file() -> str:
    if os.environ.get("LEFT_SUITE_FILE"):
        return os.environ["LEFT_SUITE_FILE"]
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry.endswith(os.path.join("tests", "observer")):
            return str(Path(entry).parents[1] / "tests" / "harness" / "run" / "runner.py")
    return str(Path(__file__).resolve().parents[2] / "tests" / "harness" / "run" / "runner.py")


out_dir()
variant = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "root"
named = {
    "classmate": lambda: os.environ.get("LEFT_CLASSMATE", "../other/main.py"),
    "classmate_abs": lambda: os.path.abspath(os.environ.get("LEFT_CLASSMATE",
                                                            "../other/main.py")),
    "root": lambda: os.environ.get("LEFT_ROOT_FILE", "/root/.bashrc"),
    "suite": suite_file,
    "own": lambda: str(Path(__file__).resolve()),
}[variant]()
sys.stderr.write("Traceback (most recent call last):\n"
                 f'  File "{named}", line 3, in <module>\n'
                 "    x\n"
                 "RuntimeError: x\n")
sys.exit(1)
