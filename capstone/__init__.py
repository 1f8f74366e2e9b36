"""capstone: MiniGPT trained end to end with ZeRO-1 and sharded checkpoints on gloo ranks.

`python -m capstone` runs the demo; `python -m capstone --out DIR [flags]` is one run under
run contract v1 (docs/contract.md), which the invariant suite in tests/ checks.
"""

__version__ = "0.1.0"
