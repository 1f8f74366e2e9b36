"""Reads its classmates: every file of the folders beside its own (a class graded folder by
folder), of those it knows by name where it cannot list the class (`guess.txt` beside it: a
classmate's folder or file, by its path from the class folder), and of any grading output
it can find; then raises an exception holding what it read, so that it would reach its own
feedback page and the class's CSV."""

import contextlib
import os
from pathlib import Path

from _common import out_dir

out_dir()
here = Path.cwd()
seen = []
guessed = (here / "guess.txt").read_text().split() if (here / "guess.txt").is_file() else []
for g in guessed:  # a file it knows by name, read without listing its folder
    with contextlib.suppress(OSError):
        seen.append((here.parent / g).read_text(errors="replace")[:2000])
for root in (here.parent, *(here.parent / g for g in guessed),
             *[Path(p) for p in os.environ.get("PEEK_ALSO", "").split(":") if p]):
    for top, _, files in os.walk(root):
        if Path(top).resolve().is_relative_to(here.resolve()):
            continue  # its own
        for name in files:
            with contextlib.suppress(OSError):
                seen.append((Path(top) / name).read_text(errors="replace")[:2000])
raise RuntimeError(f"read {len(seen)} files of others: " + " | ".join(seen)[:20000])
