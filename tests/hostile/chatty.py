"""Prints 32 MiB to stdout and exits 0 having trained nothing."""

import sys

from _common import out_dir

out_dir()
line = "loss is going down, trust me " * 36 + "\n"
for _ in range(32 * 2**20 // len(line)):
    sys.stdout.write(line)
