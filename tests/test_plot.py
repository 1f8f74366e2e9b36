"""`python -m capstone.plot RUN_DIR` (exercise 4): a PNG of the run's metrics."""

from __future__ import annotations

import pytest

from capstone.plot import load_run, main
from tests.harness.run.runs import faulted


@pytest.mark.slow
def test_plot_of_a_run_with_a_rollback(reference_only, run, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    source = run(faulted("spike", 15)).parsed.out
    records, events, summary = load_run(source)
    assert [(e["step"], e["to_step"], e["reason"]) for e in events] == [(16, 10, "spike")]
    assert sorted(records[3]) == list(range(21)) and summary["world_size"] == 4
    png = tmp_path / "m.png"
    assert main([str(source), "--out", str(png)]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    assert str(png) in capsys.readouterr().out


def test_plot_refuses_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "holds no summary.json" in capsys.readouterr().err
