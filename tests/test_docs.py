"""The guide's commands run (`-m docs`): every shell block of README.md and docs/*.md marked
`<!-- docs: runnable -->` (optionally `; writes PATH ...`) runs in a fresh temporary copy of
the checkout (the files git tracks), with this interpreter's environment first on PATH, and
must exit 0 and leave each file it says it writes: a JSON file that parses, a CSV with a
header and rows, any other file not empty. The shape of what it prints is checked, never its
numbers (they are the machine's and the day's).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"<!-- docs: runnable(?:; writes (?P<writes>[^>]*?))? -->\n```(?:bash|sh)\n"
                  r"(?P<body>.*?)```", re.S)
pytestmark = pytest.mark.docs


@dataclass(frozen=True)
class Block:
    """One runnable shell block: where it is, what it runs, the files it says it writes."""

    page: str
    line: int
    body: str
    writes: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def runnable_blocks(pages: list[Path] = PAGES) -> list[Block]:
    """Every block the pages mark runnable, in page order."""
    out = []
    for page in pages:
        text = page.read_text()
        name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
        for m in MARK.finditer(text):
            out.append(Block(name, text[:m.start()].count("\n") + 1, m["body"],
                             tuple((m["writes"] or "").split())))
    return out


def _copy_checkout(dest: Path) -> Path:
    """The files git tracks, copied to `dest` (a fresh clone's tree, without its history)."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                             capture_output=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _shape_problem(path: Path) -> str | None:
    """Why `path` is not a file of the shape its name promises, or None."""
    if not path.is_file() or path.stat().st_size == 0:
        return "missing or empty"
    if path.suffix == ".json":
        try:
            json.loads(path.read_text())
        except ValueError as e:
            return f"not JSON: {e}"
    if path.suffix == ".csv":
        rows = list(csv.reader(path.read_text().splitlines()))
        if len(rows) < 2:
            return "a CSV without a header and a row"
    return None


def test_the_guide_marks_its_commands_runnable():
    """README's set-up, grading and class commands are among the runnable blocks (a block
    whose marker was lost would silently stop being tested)."""
    blocks = [b for b in runnable_blocks() if b.page == "README.md"]
    assert any("python -m capstone" in b.body for b in blocks)
    assert any("--grade-json" in b.body for b in blocks)
    assert any("tests.grade_class" in b.body for b in blocks)


def test_a_block_that_fails_or_writes_nothing_is_told(tmp_path):
    """The runner's own teeth: a block that exits non-zero, or leaves a promised file
    missing or malformed, fails."""
    page = tmp_path / "page.md"
    page.write_text("<!-- docs: runnable; writes out.json -->\n```bash\necho '{' > out.json\n"
                    "```\n<!-- docs: runnable -->\n```bash\nexit 3\n```\n")
    first, second = runnable_blocks([page])
    assert _shape_problem(_run(first, tmp_path)[1] / "out.json") is not None
    assert _run(second, tmp_path)[0].returncode == 3


def _run(block: Block, where: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.body], cwd=where, env=env,
                          capture_output=True, text=True, timeout=1500)
    return done, where


@pytest.mark.long
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("block", runnable_blocks(), ids=str)
def test_each_runnable_block_runs_in_a_fresh_copy(block, tmp_path):
    for name in block.writes:  # a file outside the copy may already exist (a regrade)
        if Path(name).is_absolute():
            Path(name).unlink(missing_ok=True)
            Path(name).write_text("{}")
    copy = _copy_checkout(tmp_path / "checkout")
    done, _ = _run(block, copy)
    assert done.returncode == 0, (f"{block} exited {done.returncode}:\n{block.body}\n"
                                  f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    for name in block.writes:
        path = Path(name) if Path(name).is_absolute() else copy / name
        problem = _shape_problem(path)
        assert problem is None, f"{block}: {name}: {problem}"
