"""The harness's stages import one way: each only the stages before it (tests/harness/
__init__.py gives the order), so a checker never reaches into the report and no two stages
need each other."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parent / "harness"
ORDER = ("observe", "run", "check", "diagnose", "report", "platforms")


def _imports(path: Path) -> set[str]:
    """The harness stages a module imports (`from tests.harness.STAGE...`)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("tests.harness."):
            out.add(node.module.split(".")[2])
    return out


def test_every_module_is_in_a_stage():
    assert sorted(p.name for p in HARNESS.iterdir() if p.is_dir()
                  and not p.name.startswith("__")) == sorted(ORDER)
    assert [p.name for p in HARNESS.glob("*.py")] == ["__init__.py"]


def test_a_stage_imports_only_the_stages_before_it():
    upward = [f"{p.relative_to(HARNESS)} imports {stage}"
              for p in HARNESS.rglob("*.py") if p.parent != HARNESS
              for stage in _imports(p)
              if ORDER.index(stage) > ORDER.index(p.parent.name)]
    assert not upward, upward
