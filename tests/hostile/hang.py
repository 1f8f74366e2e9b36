"""Four 'ranks' that log a few steps, then wait forever on a collective that never comes."""

import os
import time

from _common import out_dir, write_records

out = out_dir()
for rank in range(1, 4):
    if os.fork() == 0:
        write_records(out, rank, rank)  # rank r got to step r
        time.sleep(3600)
write_records(out, 0, 2)
time.sleep(3600)
