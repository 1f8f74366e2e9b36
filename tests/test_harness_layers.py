"""The harness's stages import one way: each only the stages before it (tests/harness/
__init__.py gives the order), so a checker never reaches into the report and no two stages
need each other."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

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


def _module_imports(path: Path) -> set[str]:
    """The harness modules `path` imports, at its top or inside a function (`from
    tests.harness.run import box` names the module box)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("tests.harness."):
            parts = node.module.split(".")[2:]
            names = [a.name for a in node.names]
            if (HARNESS.joinpath(*parts)).is_dir():  # a package: its modules by name
                out |= {"/".join([*parts, n]) for n in names
                        if HARNESS.joinpath(*parts, f"{n}.py").is_file()}
            else:
                out.add("/".join(parts))
    return out


def test_no_two_modules_need_each_other():
    """Within a stage too (a lazy import counts: it only hides the cycle from the import
    system), so each module can be read, tested and replaced after the ones it uses."""
    graph = {str(p.relative_to(HARNESS).with_suffix("")): _module_imports(p)
             for p in HARNESS.rglob("*.py") if p.name != "__init__.py"}
    assert graph["run/runner"] >= {"run/warm", "run/box"}  # the graph is read as written
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        pytest.fail(f"modules that need each other: {' -> '.join(e.args[1])}")
