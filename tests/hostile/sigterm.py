"""Ignores SIGTERM and hangs in a new session of its own."""

import os
import signal
import time

from _common import out_dir

out_dir()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(3600)
time.sleep(3600)
