"""`pytest -k invariant` selects exactly the invariant modules: no helper, fixture or other
test carries the word."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _collect(*selections: tuple[str, ...]) -> list[set[str]]:
    """Node ids collected for each selection, the collections running side by side."""
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", "--collect-only", "-q",
                               "-p", "no:cacheprovider", *args], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for args in selections]
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, stdout
        out.append({line for line in stdout.splitlines() if "::" in line})
    return out


def _unfiltered(config: pytest.Config) -> bool:
    args = [Path(a).resolve() for a in config.args]
    return (not config.getoption("keyword") and not config.getoption("markexpr")
            and args in ([ROOT], [ROOT / "tests"]))


@pytest.mark.slow
def test_k_selection_is_exactly_the_seven_contract_modules(request):
    if _unfiltered(request.config):  # this session collected everything already
        everything = {item.nodeid for item in request.session.items}
        [selected] = _collect(("-k", "invariant"))
    else:
        everything, selected = _collect((), ("-k", "invariant"))
    expected = {n for n in everything if Path(n.split("::")[0]).name.startswith("test_invariant_")}
    assert len({Path(n.split("::")[0]).name for n in expected}) == 7
    assert selected == expected, (f"extra: {sorted(selected - expected)}, "
                                  f"missing: {sorted(expected - selected)}")
