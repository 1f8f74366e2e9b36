"""Where the suite's own Python processes keep their bytecode when the environment says to
write none (PYTHONDONTWRITEBYTECODE, set on some machines to keep trees free of
__pycache__): then every pytest process, the controller, each xdist worker and each grading
session, rewrites the asserts of every test module (and of hypothesis's ~80 modules, its
plugin's) anew, ~1-1.5 CPU-s each. With the bytecode kept in a private folder outside the
tree, that is done once per machine and no __pycache__ appears in the tree.

Runs never get this: a run writes no bytecode and reads none of the suite's
(runner.observed_environment), so nothing a submission does can reach a later process."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

PREFIX_VAR = "PYTHONPYCACHEPREFIX"
NO_WRITE_VAR = "PYTHONDONTWRITEBYTECODE"


def private_folder() -> Path | None:
    """The bytecode folder of this user: made 0700 here, and used only if this user owns it
    and nobody else may write to it (bytecode in it runs as this user), else None."""
    path = Path(tempfile.gettempdir()) / f"capstone-pycache-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None
    return path


def kept(env: MutableMapping[str, str]) -> Path | None:
    """Keep `env`'s bytecode in the private folder where it says to write none, changing
    `env` in place; the folder, or None where `env` is left as it is (it writes bytecode, or
    already names a PYTHONPYCACHEPREFIX, or no private folder can be had)."""
    if not env.get(NO_WRITE_VAR) or env.get(PREFIX_VAR):
        return None
    folder = private_folder()
    if folder is not None:
        del env[NO_WRITE_VAR]
        env[PREFIX_VAR] = str(folder)
    return folder


def prune(folder: Path) -> None:
    """Drop the bytecode of folders that no longer exist (the copies of the suite that the
    autograder's tests grade from live in temporary folders: ~70 MB a session), so the
    folder does not grow with every session. Another process may be writing to it: Python
    writes each file whole or not at all, and a file that is gone is compiled again."""
    for here, dirs, _ in os.walk(folder):
        source = Path("/") / Path(here).relative_to(folder)
        for d in list(dirs):
            if not (source / d).is_dir():
                shutil.rmtree(Path(here) / d, ignore_errors=True)
                dirs.remove(d)
