"""capstone: MiniGPT trained end to end with ZeRO-1 and sharded checkpoints on gloo ranks.

`python -m capstone` runs the demo; `python -m capstone --out DIR [flags]` is one run under
run contract v1 (docs/contract.md), which the invariant suite in tests/ checks.
"""

__version__ = "0.1.0"

import os as _os

# numpy's OpenBLAS starts a thread per extra core at import, and a process with threads is
# not safe to fork (Python >= 3.12 warns). The launcher forks its ranks from this process,
# which does no BLAS work of its own; each rank sets its own thread count (launch.py).
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
