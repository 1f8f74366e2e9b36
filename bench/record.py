"""Where a bench keeps what it measured: one record per bench in docs/figures/NAME.json, with
the machine and the date, from which bench/figures.py writes docs/figures.md. The guide shows
no measured figure typed by hand: each comes from such a record.

    from bench.record import Figure, save
    save("speed", [Figure("demo / import torch", "1.14x (1.29 / 1.14 s)", "<= 1.2x")])
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "figures"


@dataclass(frozen=True)
class Figure:
    """One measured figure: what it is, its value as the bench words it, the target."""

    what: str
    value: str
    target: str = ""


def machine() -> dict[str, Any]:
    """What the figures were measured on (they compare only within one machine and hour)."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:  # psutil does not name the CPU
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       "")
    except OSError:
        pass
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "none"
    return {"cpus": psutil.cpu_count(), "memory_gib": round(psutil.virtual_memory().total
                                                            / 2**30, 1),
            "cpu": cpu or platform.machine(), "python": platform.python_version(),
            "torch": torch, "system": f"{platform.system()} {platform.release()}"}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def save(name: str, figures: list[Figure], command: str | None = None,
         where: Path = RECORDS) -> Path:
    """Write bench `name`'s record (replacing its last one): its figures, the command that
    measured them (this process's, by default), the machine, the date and the commit."""
    where.mkdir(parents=True, exist_ok=True)
    record = {"bench": name,
              "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "commit": _commit(), "machine": machine(),
              "command": command or "python " + " ".join(
                  [os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
              "figures": [asdict(f) for f in figures]}
    path = where / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
