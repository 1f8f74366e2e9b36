"""`pytest -k invariant` selects exactly the invariant modules: no helper, fixture or other
test carries the word."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _collect(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {line for line in proc.stdout.splitlines() if "::" in line}


@pytest.mark.slow
def test_k_selection_is_exactly_the_six_contract_modules():
    everything = _collect()
    selected = _collect("-k", "invariant")
    expected = {n for n in everything if Path(n.split("::")[0]).name.startswith("test_invariant_")}
    assert len({Path(n.split("::")[0]).name for n in expected}) == 6
    assert selected == expected, (f"extra: {sorted(selected - expected)}, "
                                  f"missing: {sorted(expected - selected)}")
