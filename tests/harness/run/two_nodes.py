"""`python two_nodes.py TORCHRUN [args]`: torchrun as two "machines" on this host.

Starts two torchrun agents with --nnodes 2, one rank each, meeting at a static rendezvous
on 127.0.0.1 (the way torchrun joins separate hosts); each rank sees RANK 0 or 1 but
LOCAL_RANK 0. Exits with the first non-zero exit code of the two, else 0.
"""

from __future__ import annotations

import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    torchrun, args = sys.argv[1], sys.argv[2:]
    port = free_port()
    agents = [subprocess.Popen([torchrun, "--nnodes", "2", "--node-rank", str(node),
                                "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                                "--master-port", str(port), *args])
              for node in range(2)]
    codes = [a.wait() for a in agents]
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
