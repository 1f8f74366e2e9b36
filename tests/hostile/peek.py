"""Reads its classmates: every file of the folders beside its own (a class graded folder by
folder), of those it knows by name where it cannot list the class (`guess.txt` beside it: a
classmate's folder or file, by its path from the class folder), and of any grading output
it can find; then raises an exception holding what it read, so that it would reach its own
feedback page and the class's CSV."""

from pathlib import Path

from _common import out_dir, read_others

out_dir()
seen = read_others(Path.cwd())
raise RuntimeError(f"read {len(seen)} files of others: " + " | ".join(seen)[:20000])
