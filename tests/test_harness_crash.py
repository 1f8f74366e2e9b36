"""A crash is told by its exception: the rank, the error and the submission's line, from the
first traceback in the run's stderr (whatever launcher printed it), not the launcher's last
words; a rank killed by a signal, by its signal."""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from tests.harness.observe.crash import Crash, _first, first_exception

SPAWN = """Traceback (most recent call last):
  File "/work/sub/main.py", line 40, in <module>
    mp.spawn(rank_main, args=(n, args), nprocs=n)
  File "/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 328, in spawn
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
torch.multiprocessing.spawn.ProcessRaisedException:

-- Process 1 terminated with the following error:
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 90, in _wrap
    fn(i, *args)
  File "/work/sub/main.py", line 22, in rank_main
    start = offsets[step]
IndexError: list index out of range
"""
TORCHRUN = """[rank2]: Traceback (most recent call last):
[rank2]:   File "/work/sub/train.py", line 9, in <module>
[rank2]:     loss = model(x).sum() / zero
[rank2]: ZeroDivisionError: division by zero
E1201 torch.distributed.elastic.multiprocessing.api: failed (exitcode: 1) local_rank: 2
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""
KILLED = "torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with " \
         "signal SIGKILL\n"


def test_the_first_traceback_names_the_rank_the_error_and_the_line():
    assert first_exception(SPAWN) == ("rank 1 raised IndexError: list index out of range at "
                                      "sub/main.py:22 (`start = offsets[step]`)")
    assert first_exception(TORCHRUN) == ("rank 2 raised ZeroDivisionError: division by zero "
                                         "at sub/train.py:9 (`loss = model(x).sum() / zero`)")
    assert first_exception(KILLED) == "rank 3 was killed by SIGKILL"
    assert first_exception("main.py: error: unrecognized arguments: --seed 0\n") == ""


# A real run of such a crash (tests/hostile/index_error.py: mp.spawn, rank 1 raises in step 3)
# is graded whole, and its base run's reason asserted, in tests/test_root_cause.py.


def test_a_crash_shows_the_lines_around_the_one_that_raised(tmp_path):
    main = tmp_path / "main.py"
    main.write_text("".join(f"line{i}\n" for i in range(1, 11)))
    text = ("Traceback (most recent call last):\n"
            f'  File "{main}", line 5, in step\n    line5\nIndexError: x\n')
    crashed = _first(text, 1)
    assert crashed.said.startswith("rank 1 raised IndexError: x at ")
    assert crashed.around(tmp_path).splitlines() == [
        "     3 | line3", "     4 | line4", ">    5 | line5", "     6 | line6", "     7 | line7"]
    assert Crash("rank 1 raised X", str(tmp_path / "gone.py"), 3).around(tmp_path) == ""
    assert Crash("rank 1 raised X", "main.py", 5).around(tmp_path).startswith("     3 |")


def test_a_traceback_shows_no_line_of_a_file_outside_the_submissions_folder(tmp_path):
    """Issue 72: the traceback is the run's text; the grader (root) would show five lines
    of whatever file it names: a classmate's, a root-only one, the suite's."""
    own, other = tmp_path / "student", tmp_path / "classmate"
    own.mkdir()
    other.mkdir()
    (other / "main.py").write_text("SECRET = 1\n" * 9)
    (own / "link.py").symlink_to(other / "main.py")
    for named in [other / "main.py", own / ".." / "classmate" / "main.py", "../classmate/main.py",
                  own / "link.py", "link.py", "/etc/passwd", "/dev/zero"]:
        assert Crash("rank 0 raised X", str(named), 3).around(own) == "", named


# A traceback's frames: the submission's or a library's, with the code line Python prints,
# its carets, or none (a frozen frame's): whatever the mix, the error and the innermost own
# line are told.
FRAMES = st.lists(st.tuples(st.sampled_from(["/work/sub/main.py", "/work/sub/zero.py",
                                             "/usr/lib/python3.11/importlib/__init__.py",
                                             "<frozen importlib._bootstrap>",
                                             "/venv/lib/python3.11/site-packages/torch/x.py"]),
                            st.integers(1, 999), st.sampled_from(["code", "carets", "none"])),
                  min_size=1, max_size=6)
ERRORS = st.sampled_from(["ModuleNotFoundError: No module named 'capstone'",
                          "KeyError: 'betas'", "RuntimeError: shapes (3,) and (4,) differ",
                          "ValueError: x"])


@given(FRAMES, ERRORS, st.sampled_from([None, 2]))
@example([("/work/sub/main.py", 2, "code"), ("<frozen importlib._bootstrap>", 1204, "none"),
          ("<frozen importlib._bootstrap>", 1140, "none")],
         "ModuleNotFoundError: No module named 'capstone'", None)  # importlib.import_module
def test_every_traceback_tells_its_error_and_its_innermost_own_line(frames, error, torchrun):
    lines = ["Traceback (most recent call last):"]
    for file, number, shown in frames:
        lines.append(f'  File "{file}", line {number}, in f')
        if shown != "none":
            lines.append(f"    value = step({number})")
        if shown == "carets":
            lines.append("            ^^^^^^^^^^^^")
    lines.append(error)
    if torchrun is not None:
        lines = [f"[rank{torchrun}]: {ln}" for ln in lines]
    said = first_exception("\n".join(lines) + "\n")
    assert error in said, said
    own = [(f, n, s) for f, n, s in frames if f.startswith("/work/")] or frames
    file, number, shown = own[-1]
    assert f" at {'/'.join(Path(file).parts[-2:])}:{number}" in said, said
    assert ("`value = step(" in said) == (shown != "none"), said
