"""What a run may not see under the run-user containment (unshare refused: Gradescope's and
PrairieLearn's Docker boxes): a class's other submissions and the grading's outputs.

Under namespaces a run sees those folders empty (nsinit mounts over them). Without
namespaces the run's processes run as the run user, who reads whatever others may read;
the submissions a grading already ran were even opened to others (`contain.readable`). So,
for the length of one run (runs under the run user go one at a time on the machine, under
`contain.lease`), each hidden folder gets a POSIX ACL entry naming the run user alone:

    CLASS/            u:capstone-run:--x   (passage to its own folder, no listing)
    CLASS/alice/      u:capstone-run:r-x   (the run's own submission, its working directory)
    CLASS/bob/        u:capstone-run:---   (a named user's entry outranks others' bits)
    CLASS/roster.csv  u:capstone-run:---
    grades/           u:capstone-run:---

and each touched file's ACL and mode are put back as they were when the run ends (journaled
first: a grading killed mid-run is put back by the next, tests/harness/run/access.py). Where
the file system takes no ACLs, others' bits are taken away for the run instead (and put back).
Links are never followed: a submission may plant one to anywhere.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from tests.harness.run import access, acl

if TYPE_CHECKING:
    from collections.abc import Iterator

PASS, DENY, OWN = 1, 0, 5  # the run user's permissions: passage alone, none, or read and
#                           pass (its own folder: an entry a killed session left is undone)


def plan(hidden: list[Path], shown: Path) -> list[tuple[Path, int]]:
    """(path, the run user's permissions) for each path to restrict: a hidden folder that
    holds `shown` is passage on the way down to it and denied beside it, `shown` itself
    readable; any other hidden folder is denied whole."""
    shown = Path(os.path.realpath(shown))
    found: list[tuple[Path, int]] = []
    for folder in (Path(os.path.realpath(h)) for h in hidden):
        if not folder.is_dir() or folder == shown:
            continue
        if not shown.is_relative_to(folder):
            found.append((folder, DENY))
            continue
        below = folder
        for part in shown.relative_to(folder).parts:
            found.append((below, PASS))
            with contextlib.suppress(OSError):
                found += [(below / n, DENY) for n in sorted(os.listdir(below)) if n != part]
            below = below / part
        found.append((shown, OWN))
    return found


def _restrict(path: Path, uid: int, perms: int) -> None:
    others = [e for e in acl.read(path) if not (e[0] == acl.USER and e[2] == uid)]
    entries = acl.with_mask([*others, (acl.USER, perms, uid)])
    try:
        os.setxattr(path, acl.ATTR, acl.encode(entries), follow_symlinks=False)
    except OSError:  # no ACLs here: others' bits for the run (the run user is "others")
        os.chmod(path, stat.S_IMODE(path.lstat().st_mode) & ~0o007 | perms,
                 follow_symlinks=False)


@contextlib.contextmanager
def hidden_from(uid: int, hidden: list[Path], shown: Path) -> Iterator[list[Path]]:
    """For the block: `hidden` folders closed to user `uid` but for the way to `shown` (the
    run's own submission); yields the paths restricted; puts each back as it was after, or
    the next grading does where this one is killed (access.py's journal)."""
    planned = [(path, perms) for path, perms in plan(hidden, shown)
               if not path.is_symlink() and path.exists()]
    paths = [path for path, _ in planned]
    try:
        access.hold_all([(path, functools.partial(_restrict, uid=uid, perms=perms))
                         for path, perms in planned], tag="run")
        yield paths
    finally:
        access.release(paths, tag="run")
