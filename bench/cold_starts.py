"""How much of README's test command is fresh interpreters importing torch: the floor that the
warm start cannot lower, since the issue keeps every submission's runs cold.

    python bench/cold_starts.py [-- PYTEST_ARGS ...]

For one run of the suite (`python -m pytest -n 2`, or PYTEST_ARGS), a probe in this venv's
site-packages (removed afterwards) logs every interpreter that starts importing torch, with
the test it ran under (pytest's PYTEST_CURRENT_TEST: a grading session's inner tests are
named as they are there). A fork (a rank, a warm start) imports nothing and is not counted.
The CPU of one `import torch` is measured in the same minutes; the floor is the count times
it. Prints the count and the floor per test module, then beside the suite's busy CPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from suite import children_cpu_s, machine_busy_s  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]

# Run at every interpreter's start (a .pth line): an audit hook that logs the first import of
# torch once, at its start (a process the suite SIGKILLs later is still counted). A run's /tmp,
# /dev/shm and / are its own or read-only (tests/harness/run/nsinit.py); the cgroup filesystem
# is the one place every run, as root in its namespaces, still writes to the machine's: the
# log is an empty directory per start, under a cgroup made for it.
PROBE = '''
import os, sys
_LOG = os.environ.get("COLD_START_PROBE_DIR")
if _LOG:
    def _cold_start_hook(event, args, _done=[]):
        if event == "import" and args[0] == "torch" and not _done:
            _done.append(1)
            test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
            name = f"{os.getpid()}-{os.urandom(4).hex()}-{test}".replace("/", "|")[:250]
            try:
                os.mkdir(os.path.join(_LOG, name))
            except OSError:
                pass
    sys.addaudithook(_cold_start_hook)
'''
CGROUP = Path("/sys/fs/cgroup/pids")


def import_cpu_s(n: int = 5) -> float:
    """Median CPU-seconds (user + sys) of `python -c "import torch"`."""
    cpus = []
    for _ in range(n):
        cpu0 = children_cpu_s()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        cpus.append(children_cpu_s() - cpu0)
    return statistics.median(cpus)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pytest_args", nargs="*", default=["-n", "2"])
    a = ap.parse_args()
    packages = Path(site.getsitepackages()[0])
    if not os.access(packages, os.W_OK):
        raise SystemExit(f"{packages} is not writable: run this in the project's venv")
    if not os.access(CGROUP, os.W_OK):
        raise SystemExit(f"{CGROUP} is not writable: this bench needs root and cgroup v1")
    log = Path(tempfile.mkdtemp(prefix="cold-starts-", dir=CGROUP))
    module, pth = packages / "_capstone_cold_start.py", packages / "_capstone_cold_start.pth"
    module.write_text(PROBE)
    pth.write_text("import _capstone_cold_start\n")
    try:
        cpu = import_cpu_s()
        t0, busy0 = time.monotonic(), machine_busy_s()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *a.pytest_args], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "COLD_START_PROBE_DIR": str(log)})
        wall, busy = time.monotonic() - t0, machine_busy_s() - busy0
    finally:
        pth.unlink(missing_ok=True)
        module.unlink(missing_ok=True)
        starts = [d.name for d in log.iterdir() if d.is_dir()]
        for d in log.iterdir():
            if d.is_dir():
                d.rmdir()
        log.rmdir()
    tests = [n.split("-", 2)[2].replace("|", "/") for n in starts]
    last = [ln for ln in proc.stdout.splitlines() if " in " in ln][-1:]
    per = collections.Counter(t.split("::")[0] or "(outside a test)" for t in tests)
    print(json.dumps({"suite": last[0].strip("= ") if last else f"exit {proc.returncode}",
                      "wall_s": round(wall, 1), "machine_busy_cpu_s": round(busy, 1),
                      "import_torch_cpu_s": round(cpu, 2), "cold_starts": len(tests),
                      "floor_cpu_s": round(len(tests) * cpu, 1)}))
    print("\ncold starts per test module (inner grading sessions name their own tests):")
    for name, n in per.most_common():
        print(f"{n:5d} {n * cpu:7.1f} CPU-s  {name}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
