"""Allocates without bound (the suite's address-space cap must stop it)."""

import time

from _common import out_dir

out_dir()
hoard = []
while True:
    hoard.append(bytearray(64 * 2**20))
    time.sleep(0.01)
