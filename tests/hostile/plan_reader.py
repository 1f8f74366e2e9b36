"""Looks for the suite's fault plan everywhere a run can read: its environment (os.environ
and /proc/self/environ), its arguments, the files of its run directory, the socket the
environment names (asking it a question of its own), and its parent's environment; writes
every string it found that could name a fault (kind@step[:rank]) into plan.json in its
--out, with every variable of its environment that names a seed of the suite's (from which
the suite's public formula would draw the fault's step and rank), then ends."""

import contextlib
import json
import os
import re
import socket
import sys
from pathlib import Path

from _common import out_dir

out = out_dir()
PLAN = re.compile(r"(nan|spike|kill|killsave|crash)@\d+(:\d+)?")
texts = {"environ": json.dumps(dict(os.environ)), "argv": " ".join(sys.argv)}
for pid in ("self", str(os.getppid())):
    for what in ("environ", "cmdline"):
        with contextlib.suppress(OSError):
            texts[f"/proc/{pid}/{what}"] = Path(f"/proc/{pid}/{what}").read_bytes().decode(
                errors="replace")
for path in out.parent.rglob("*"):
    if path.is_file() and path.stat().st_size < 2**20:
        with contextlib.suppress(OSError):
            texts[str(path)] = path.read_text(errors="replace")
where = os.environ.get("CAPSTONE_NEMESIS_SOCK", "")
if where:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(where)
            s.sendall(b"backward 1 0\n")  # a question, as the observer asks them
            texts["socket"] = s.recv(4096).decode(errors="replace")
    except OSError as e:
        texts["socket"] = f"error {e}"
found = {k: m[0] for k, v in texts.items() if (m := PLAN.search(v))}
seeds = sorted(k for k in os.environ if "SEED" in k.upper())
(out / "plan.json").write_text(json.dumps({"found": found, "asked": where != "",
                                           "seeds": seeds}))
