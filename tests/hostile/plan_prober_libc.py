"""plan_prober.py with its prober forked by libc's `fork()` through ctypes (no at-fork hooks
of Python's run in the child)."""

import plan_prober

if __name__ == "__main__":
    plan_prober.FORK = "libc"
    plan_prober.main()
