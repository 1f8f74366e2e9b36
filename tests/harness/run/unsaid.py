"""Folders a grading hides without the instructor having said so, and the runs that fail
reaching for one.

The project's reference package (`capstone/`, the lesson's solution) is hidden from a
grading's runs by default, and a platform's grader (Gradescope's zip, PrairieLearn's image,
Classroom's template) does not ship it unless told. Some classes build their programs on it
as a library (the sample class `tests/submissions` does): only the instructor knows which,
and says so with `--reference-visible` (it builds on it: shipped, and the runs import it)
or `--reference-hidden` (it must not use it), to grade_class or to a grader's build. Where
nothing was said, a run that fails because it reached for the package ("No module named
'capstone'" under namespaces or where it is not shipped, "Permission denied:
.../capstone/..." under the run user) failed on the grader's set-up, not on the student's
program: it is not graded, and says what the instructor chooses, never charged to the
student.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

UNSAID_VAR = "CAPSTONE_HIDDEN_UNSAID"  # hidden folders nobody chose to hide (os.pathsep)

# How a run that reached for a hidden package fails: its import finds nothing (namespaces
# show the folder empty) or is refused (the run user's ACL entry), or a file read is.
_FILE_ERRORS = "PermissionError|FileNotFoundError|NotADirectoryError|IsADirectoryError|OSError"


def _patterns(folder: Path) -> list[str]:
    name, path = re.escape(folder.name), re.escape(str(folder))
    return [rf"(ModuleNotFoundError|ImportError): No module named '{name}(\.[^']*)?'",
            rf"ImportError: cannot import name '[^']*' from '{name}(\.[^']*)?'",
            rf"({_FILE_ERRORS})\b.*'{path}(/[^']*)?'"]


def unsaid_folders() -> list[Path]:
    """The folders this session hides without the instructor's say ($CAPSTONE_HIDDEN_UNSAID):
    the reference, unless the grading said it is visible or hidden."""
    return [Path(p) for p in os.environ.get(UNSAID_VAR, "").split(os.pathsep) if p]


def reached(first_error: str, folders: list[Path]) -> Path | None:
    """The hidden folder among `folders` that the run's first error (`Outcome.first_error`)
    shows it reaching for, or None."""
    said = first_error.split(" (`", 1)[0]  # not the source line it quotes after " at F:L"
    for folder in folders:
        if any(re.search(p, said) for p in _patterns(folder)):
            return folder
    return None


def not_graded(first_error: str, folders: list[Path] | None = None) -> str:
    """Why a run that failed reaching for a folder nobody chose to hide is not graded, with
    what the instructor chooses; "" when its failure is its own."""
    folder = reached(first_error, unsaid_folders() if folders is None else folders)
    if folder is None:
        return ""
    return (f"the run failed reaching for the project's reference package `{folder.name}` "
            "(the lesson's solution), which this grading's runs do not see unless the "
            "instructor says: not your program's fault; the instructor grades again with "
            "--reference-visible if the class builds on it, or --reference-hidden if it must "
            "not (options of grade_class and of the platforms' grader builds). The run: "
            f"{first_error}")
