"""Trains as the reference does, and before it, from a child forked by `os.fork` (or by libc's
`fork()` through ctypes, which skips Python's at-fork hooks: plan_prober_libc.py), asks the
suite's fault plan every question a rank could ask (each step's backward, each checkpoint's
save, on every rank), writing what it learned into probe.json in its --out: a guard that
would roll back at the moment the plan names, without reading the numbers."""

import ctypes
import json
import os
import socket
import sys
from pathlib import Path

FORK = "os"


def probe(where: str) -> list[str]:
    found = []
    for when in ("backward", "save"):
        for step in range(1, 21):
            for rank in range(4):
                try:
                    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                        s.settimeout(5.0)
                        s.connect(where)
                        s.sendall(f"{when} {step} {rank}\n".encode())
                        got = s.recv(64).decode(errors="replace")
                except OSError:
                    continue
                if got:
                    found.append(f"{when} {step} {rank}: {got}")
    return found


def main() -> None:
    argv = sys.argv[1:]
    out = Path(argv[argv.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    where = os.environ.get("CAPSTONE_NEMESIS_SOCK", "")
    if where:
        pid = ctypes.CDLL(None, use_errno=True).fork() if FORK == "libc" else os.fork()
        if pid == 0:
            (out / "probe.json").write_text(json.dumps({"fork": FORK, "found": probe(where)}))
            os._exit(0)
        os.waitpid(pid, 0)
    from capstone.cli import exit_now
    from capstone.cli import main as train

    exit_now(train(argv))


if __name__ == "__main__":
    main()
