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

and each touched file's ACL and mode are put back as they were when the run ends. Where the
file system takes no ACLs, others' bits are taken away for the run instead (and put back).
Links are never followed: a submission may plant one to anywhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.harness.run import acl

if TYPE_CHECKING:
    from collections.abc import Iterator

PASS, DENY, OWN = 1, 0, 5  # the run user's permissions: passage alone, none, or read and
#                           pass (its own folder: an entry a killed session left is undone)


@dataclass(frozen=True)
class Saved:
    """A path's access as it was: its ACL's bytes (None: it had none) and its mode."""

    path: Path
    acl: bytes | None
    mode: int


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


def _save(path: Path) -> Saved | None:
    try:
        st = path.lstat()
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return None  # a link has no access of its own; where it points is restricted itself
    try:
        raw: bytes | None = os.getxattr(path, acl.ATTR, follow_symlinks=False)
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
        raw = None
    return Saved(path, raw, stat.S_IMODE(st.st_mode))


def _restrict(saved: Saved, uid: int, perms: int) -> None:
    others = [e for e in acl.read(saved.path) if not (e[0] == acl.USER and e[2] == uid)]
    entries = acl.with_mask([*others, (acl.USER, perms, uid)])
    try:
        os.setxattr(saved.path, acl.ATTR, acl.encode(entries), follow_symlinks=False)
    except OSError:  # no ACLs here: others' bits for the run (the run user is "others")
        os.chmod(saved.path, saved.mode & ~0o007 | perms, follow_symlinks=False)


def _restore(saved: Saved) -> None:
    with contextlib.suppress(OSError):
        if saved.acl is not None:
            os.setxattr(saved.path, acl.ATTR, saved.acl, follow_symlinks=False)
        else:
            with contextlib.suppress(OSError):
                os.removexattr(saved.path, acl.ATTR, follow_symlinks=False)
        os.chmod(saved.path, saved.mode, follow_symlinks=False)


@contextlib.contextmanager
def hidden_from(uid: int, hidden: list[Path], shown: Path) -> Iterator[list[Path]]:
    """For the block: `hidden` folders closed to user `uid` but for the way to `shown` (the
    run's own submission); yields the paths restricted; puts each back as it was after."""
    saved: list[Saved] = []
    try:
        for path, perms in plan(hidden, shown):
            s = _save(path)
            if s is not None:
                saved.append(s)
                _restrict(s, uid, perms)
        yield [s.path for s in saved]
    finally:
        for s in reversed(saved):
            _restore(s)
