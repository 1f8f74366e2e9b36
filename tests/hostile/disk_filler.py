"""Writes without end: a small file and a growing file's next chunk into its --out, the same
chunk into a growing file in /tmp and a small file there every tenth time, errors ignored
(a file past RLIMIT_FSIZE, a full tmpfs): the run's bounds on its directory's bytes and
inodes and on its /tmp must stop it."""

import contextlib
import os
import signal
import time
from pathlib import Path

from _common import out_dir

out = out_dir()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past RLIMIT_FSIZE a write fails instead
tmp = Path("/tmp") / f"disk-filler-{os.getpid()}"
tmp.mkdir(exist_ok=True)
CHUNK = b"x" * 2**18
growing = [os.open(d / "growing.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
           for d in (out, tmp)]
i = 0
while True:
    for fd in growing:
        with contextlib.suppress(OSError):
            os.write(fd, CHUNK)
    with contextlib.suppress(OSError):
        (out / f"small-{i}.txt").write_bytes(b"y" * 512)
    if i % 10 == 0:
        with contextlib.suppress(OSError):
            (tmp / f"small-{i}.txt").write_bytes(b"y" * 512)
    i += 1
    time.sleep(0.002)
