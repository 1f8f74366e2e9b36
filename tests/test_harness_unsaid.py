"""A hidden reference nobody chose to hide is never charged to a student
(tests/harness/run/unsaid.py): a run that fails reaching for it is told apart from a run
that fails on its own, however the failure is worded; and a class whose programs import it
is found before anyone is graded (tests/harness/platforms/preflight.py)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from tests.harness.platforms.preflight import importers_of
from tests.harness.run.unsaid import not_graded, reached

REFERENCE = Path("/srv/course/capstone")

# Who raised it, as the crash reader words it, and the line it quotes after " at F:L"
WHO = st.sampled_from(["the run raised", "rank 2 raised", "ranks 0-3 raised"])
WHERE = st.sampled_from(["", " at main.py:5 (`from capstone.cli import main`)",
                         " at sub/zero.py:40 (`import capstone.zero as z`)"])
SUB = st.sampled_from(["", ".cli", ".model", ".zero.shard"])
FILE = st.sampled_from(["__init__.py", "trainer.py", "zero/__init__.py"])


@st.composite
def reaching(draw: st.DrawFn) -> str:
    """A run's first error that reached for the hidden reference: its import found an empty
    folder (namespaces) or was refused (the run user), or a file read was."""
    sub, file = draw(SUB), draw(FILE)
    what = draw(st.sampled_from([
        f"ModuleNotFoundError: No module named 'capstone{sub}'",
        f"ImportError: cannot import name 'main' from 'capstone{sub}' (unknown location)",
        f"PermissionError: [Errno 13] Permission denied: '{REFERENCE / file}'",
        f"FileNotFoundError: [Errno 2] No such file or directory: '{REFERENCE / file}'",
        f"PermissionError: [Errno 13] Permission denied: '{REFERENCE}'"]))
    return f"{draw(WHO)} {what}{draw(WHERE)}"


@st.composite
def its_own(draw: st.DrawFn) -> str:
    """A run's first error that is its own, though it may name the package, a look-alike,
    another folder called capstone, or quote a line that imports it."""
    what = draw(st.sampled_from([
        "ModuleNotFoundError: No module named 'capstone_utils'",
        "ModuleNotFoundError: No module named 'mycapstone'",
        "ModuleNotFoundError: No module named 'torch'",
        "KeyError: 'capstone'",
        "RuntimeError: No module named 'capstone' was wanted here",
        f"PermissionError: [Errno 13] Permission denied: '{REFERENCE}2/x.py'",
        "PermissionError: [Errno 13] Permission denied: '/home/other/capstone/trainer.py'",
        "AssertionError: loss went up"]))
    return f"{draw(WHO)} {what}{draw(WHERE)}"


@given(reaching())
@example("the run raised ModuleNotFoundError: No module named 'capstone.cli' at "
         "reference/main.py:5 (`from capstone.cli import exit_now, main`)")  # namespaces
@example(f"the run raised PermissionError: [Errno 13] Permission denied: "
         f"'{REFERENCE}/__init__.py' at reference/main.py:5 (`from capstone.cli import x`)")
def test_a_run_reaching_for_the_hidden_reference_is_not_graded(error):
    assert reached(error, [REFERENCE]) == REFERENCE
    why = not_graded(error, [REFERENCE])
    assert "not your program's fault" in why and "--reference-visible" in why \
        and "--reference-hidden" in why and error in why


@given(its_own())
@example("the run raised KeyError: 'betas' at main.py:20 (`from capstone.cli import main`)")
def test_a_run_failing_on_its_own_is_charged_as_ever(error):
    assert reached(error, [REFERENCE]) is None and not_graded(error, [REFERENCE]) == ""


@given(reaching())
def test_where_the_instructor_said_it_is_hidden_the_failure_is_the_programs(error):
    assert not_graded(error, []) == ""


def test_the_class_that_imports_the_reference_is_found_before_grading(tmp_path):
    programs = {
        "static": "import sys\nfrom capstone.cli import main\n",
        "plain": "import capstone\n",
        "nested": None,  # in a module of its own package
        "relative": "from .capstone import x\n",  # its own module, relative
        "own": "import capstone\n",  # beside its own capstone/ package
        "dynamic": "import importlib\nimportlib.import_module('caps' + 'tone')\n",
        "lookalike": "import capstone_utils\nfrom mycapstone import y\n",
        "broken": "from capstone import (\n",  # does not parse: its run says why
        "linked": None,  # main.py is a link (to /dev/zero: never read)
    }
    for name, code in programs.items():
        (tmp_path / name).mkdir()
        if code is not None:
            (tmp_path / name / "main.py").write_text(code)
    (tmp_path / "nested" / "pkg").mkdir()
    (tmp_path / "nested" / "pkg" / "train.py").write_text("from capstone import zero\n")
    (tmp_path / "own" / "capstone").mkdir()
    (tmp_path / "linked" / "main.py").symlink_to("/dev/zero")
    found = importers_of("capstone", sorted(tmp_path.iterdir()))
    assert [f.name for f in found] == ["nested", "plain", "static"]
