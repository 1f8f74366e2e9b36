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


# Issue 72: what a run left is read through one boundary (observe/boundary.py). These
# modules read files, each only of the suite's own or the kernel's, never a run's; any other
# module that opens, lists or loads a file fails here, until it reads through the boundary
# or is added with why.
OWN_FILES = {
    "observe/boundary.py": "the boundary itself",
    "check/shards.py": "torch.load of bytes the boundary read",
    "platforms/preflight.py": "the class's sources, before any run (links and large files "
                              "skipped)",
    "platforms/session.py": "the grading session's own results file and log",
    "report/class_report.py": "the class's grade files, written by the suite's sessions",
    "report/grading.py": "the instructor's grading.json",
    "report/roster.py": "the instructor's export of the class",
    "report/timeline_picture.py": "a timeline the suite wrote",
    "run/access.py": "the access journal, root's",
    "run/bounds.py": "the cgroups and /proc; the run's folder only by lstat (its sizes, never "
                     "a byte of its files, never through a link)",
    "run/box.py": "/proc and the cgroups; the memory budget's own file",
    "run/bytecode.py": "the suite's own bytecode folder",
    "run/cgbox.py": "the cgroups",
    "run/contain.py": "/proc; the walk that chowns a run's folder (lstat, no link followed)",
    "run/corrupt.py": "a checkpoint of the reference, for the suite's own tests",
    "run/nsinit.py": "/proc, inside the run's namespaces",
    "run/privileges.py": "/proc",
    "run/procfs.py": "/proc",
    "run/runner.py": "its own outcome file; /proc; the logs through its own descriptors",
    "run/stress.py": "/proc and the box's probe, the suite's",
    "run/unseen.py": "the class folder's listing, the instructor's",
    "run/warm.py": "/proc; the fork server's own log",
}
_READS = {"open", "read_text", "read_bytes", "iterdir", "glob", "rglob", "listdir", "scandir",
          "walk", "copyfile", "copy", "copy2", "copytree"}
_LOADERS = {"json", "torch", "yaml", "pickle", "np", "numpy"}  # their `load` opens a file


def _reads_files(path: Path) -> bool:
    """Whether the module calls a function that opens, lists or loads a file by its name
    (`open`, Path.read_text, os.listdir, json.load, shutil.copy...)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(
                f, ast.Attribute) else ""
            if name in _READS or (name == "load" and isinstance(f, ast.Attribute) and \
                    getattr(f.value, "id", "") in _LOADERS):
                return True
    return False


def test_what_a_run_left_is_read_through_the_boundary_alone():
    readers = {str(p.relative_to(HARNESS)) for p in HARNESS.rglob("*.py") if _reads_files(p)}
    assert readers - set(OWN_FILES) == set(), (
        "these read files without tests/harness/observe/boundary.py: read what a run left "
        "through it, or list the module in OWN_FILES with why it reads only the suite's own")
    assert set(OWN_FILES) - readers == set(), "listed, but reads no file: remove it"
    for module in ("observe/parse.py", "observe/traces.py", "observe/crash.py"):
        assert not _reads_files(HARNESS / module), module
