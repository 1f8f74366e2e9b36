"""Not a submission: a process outside every run (the leftover tests start it) that must never
be signalled by the grader. It writes "ready" to its log once its handlers are installed, then
appends the name of every signal it receives (SIGKILL and SIGSTOP cannot be caught: a test
sees those by the process being gone), and sleeps until killed.

    python _canary.py LOG"""

import os
import signal
import sys

log = sys.argv[1]
CAUGHT = ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGALRM",
          "SIGPIPE", "SIGCONT", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGWINCH", "SIGABRT")


def record(signum, _frame):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{signal.Signals(signum).name}\n".encode())
    finally:
        os.close(fd)


for name in CAUGHT:
    signal.signal(getattr(signal, name), record)
with open(log, "a") as f:
    f.write("ready\n")
while True:
    signal.pause()
