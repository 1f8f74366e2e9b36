"""docs/figures.md is written by bench/figures.py from the benches' records (docs/figures/),
each with the machine and the date: no figure of the guide is typed by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench(code: str, tmp: Path) -> str:
    """Run `code` with bench/ importable (as a bench script runs), in `tmp`."""
    return subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(ROOT / "bench"), "PATH": ""}
                          ).stdout


def test_the_figures_page_is_what_the_benches_recorded():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "figures.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    records = sorted((ROOT / "docs" / "figures").glob("*.json"))
    assert records, "no bench has recorded a figure"
    page = (ROOT / "docs" / "figures.md").read_text()
    for path in records:
        r = json.loads(path.read_text())
        assert {"bench", "date", "commit", "machine", "command", "figures"} <= set(r), path
        assert r["figures"] and f"## `{r['bench']}`" in page and r["date"] in page
        assert (ROOT / r["command"].split()[1]).is_file(), r["command"]  # a bench of bench/


def test_a_record_holds_the_machine_and_the_date_and_the_page_shows_them(tmp_path):
    out = _bench(f"""
from pathlib import Path
import figures, record
record.save("demo_bench", [record.Figure("a figure", "1.5x (3 / 2 s)", "<= 2x")],
            command="python bench/speed.py", where=Path({str(tmp_path)!r}))
print(figures.render(figures.records(Path({str(tmp_path)!r}))))
""", tmp_path)
    r = json.loads((tmp_path / "demo_bench.json").read_text())
    assert r["machine"]["cpus"] >= 1 and r["machine"]["python"] and r["date"].endswith("UTC")
    assert "| a figure | <= 2x | 1.5x (3 / 2 s) |" in out and r["date"] in out
    assert f"{r['machine']['cpus']} CPUs" in out


def test_a_page_edited_by_hand_is_told(tmp_path):
    """--check fails on a page that is not what the records say, naming the command."""
    page = tmp_path / "figures.md"
    page.write_text((ROOT / "docs" / "figures.md").read_text() + "| typed by hand | | 0.5x |\n")
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "figures.py"), "--check",
                           "--page", str(page)], capture_output=True, text=True)
    assert proc.returncode == 1 and "python bench/figures.py" in proc.stderr
