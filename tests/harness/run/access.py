"""The access the suite changes on files it does not own, journaled before it changes them,
put back when the last process that needs the change ends, and replayed by the next grading
when a grading was killed (SIGKILL skips every `finally`).

An unprivileged run user must pass through the folders above its submission, read the
submission and the observer, and start the interpreter (a pyenv in a closed /root); under the
run-user containment a class's other folders are closed to it for each run (unseen.py). Each
such change is held: `hold(path, change)` writes the path's access as it was (its ACL's bytes
and its mode) into one journal on the machine, with the holder (a pid and its start time),
before `change` touches it. Processes that need the same path share it: the access is put
back when the last holder releases it (`release`, at each process's exit) or, when holders
were killed, by the next process that opens the journal (`replay`). Each path is put back on
its own: one that is gone or refuses does not keep the others as they are.

    /var/lib/capstone-access/journal.json   (root; else $TMPDIR/capstone-access-UID/)
    {"/class/alice": {"acl": null, "mode": 448, "holders": ["4242:171234.5"]}, ...}
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import errno
import functools
import json
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from filelock import FileLock

from tests.harness.run import acl

STORE_VAR = "CAPSTONE_ACCESS_JOURNAL"  # another folder for the journal (the tests' own)


@dataclass(frozen=True)
class Saved:
    """A path's access as it was: its ACL's bytes (None: it had none) and its mode."""

    path: Path
    acl: bytes | None
    mode: int


def save(path: Path) -> Saved | None:
    """`path`'s access now; None for a link (it has no access of its own) or a path gone."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return None
    try:
        raw: bytes | None = os.getxattr(path, acl.ATTR, follow_symlinks=False)
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
        raw = None
    return Saved(path, raw, stat.S_IMODE(st.st_mode))


def restore(saved: Saved) -> None:
    """Put `saved` back: its ACL (or none) and its mode. A path gone is left so."""
    with contextlib.suppress(OSError):
        if saved.acl is not None:
            os.setxattr(saved.path, acl.ATTR, saved.acl, follow_symlinks=False)
        else:
            with contextlib.suppress(OSError):
                os.removexattr(saved.path, acl.ATTR, follow_symlinks=False)
        os.chmod(saved.path, saved.mode, follow_symlinks=False)


@functools.lru_cache(maxsize=1)
def store() -> Path:
    """The journal's folder on this machine (root's, mode 0700), chosen once per process: a
    change held in one journal is put back from the same one, whatever the environment
    says later."""
    if os.environ.get(STORE_VAR):
        folder = Path(os.environ[STORE_VAR])
    elif os.geteuid() == 0:
        folder = Path("/var/lib/capstone-access")
    else:
        folder = Path(tempfile.gettempdir()) / f"capstone-access-{os.geteuid()}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _me(tag: str) -> str:
    """This process as a holder, for one purpose (`tag`): a process that holds a path for a
    session (a submission opened for reading) and for a run (a classmate's folder closed) lets
    go of each on its own."""
    return f"{_holder(os.getpid())}:{tag}"


def _holder(pid: int) -> str:
    try:
        return f"{pid}:{psutil.Process(pid).create_time()}"
    except psutil.Error:
        return f"{pid}:gone"


def _alive(holder: str) -> bool:
    pid, started = holder.split(":")[:2]
    return _holder(int(pid)) == f"{pid}:{started}"


def _load(journal: Path) -> dict[str, dict[str, object]]:
    try:
        return dict(json.loads(journal.read_text()))
    except (OSError, ValueError):
        return {}


def _write(journal: Path, entries: dict[str, dict[str, object]]) -> None:
    """Written whole and in place of the old (a kill mid-write leaves one or the other)."""
    tmp = journal.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(entries, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, journal)


def _saved(path: str, entry: dict[str, object]) -> Saved:
    raw = entry["acl"]
    return Saved(Path(path), base64.b64decode(str(raw)) if raw is not None else None,
                 int(str(entry["mode"])))


def _settle(entries: dict[str, dict[str, object]], leaving: str = "") -> list[str]:
    """Drop `leaving` and every dead holder; put back (and forget) each path none holds.
    Returns the paths put back."""
    put_back = []
    for path, entry in list(entries.items()):
        holders = [h for h in entry["holders"] if h != leaving and _alive(h)]  # type: ignore[attr-defined]
        if holders:
            entry["holders"] = holders
            continue
        restore(_saved(path, entry))
        del entries[path]
        put_back.append(path)
    return put_back


def _journal() -> tuple[Path, FileLock]:
    folder = store()
    return folder / "journal.json", FileLock(str(folder / "journal.lock"))


def hold(path: Path, change: Callable[[Path], object], tag: str = "session") -> None:
    """Apply `change` to `path`, its access as it was journaled first (or, where another
    live process holds it already, this process added as a holder of that journal entry)."""
    hold_all([(path, change)], tag=tag)


def hold_all(changes: list[tuple[Path, Callable[[Path], object]]],
             needed: Callable[[Path], bool] | None = None, tag: str = "session") -> None:
    """`hold` each (path, change), in order, under one lock and one write of the journal.
    With `needed`, a path that no live process holds is changed only where `needed(path)`
    (one that another holds is held here too, so that it stays as this process needs it)."""
    if not changes:
        return
    journal, lock = _journal()
    me = _me(tag)
    with lock:
        entries = _load(journal)
        dirty = bool(_settle(entries))
        held = []
        for path, change in changes:
            key = str(path)
            if key in entries:
                holders = entries[key]["holders"]
                if me not in holders:  # type: ignore[operator]
                    holders.append(me)  # type: ignore[attr-defined]
                    dirty = True
            else:
                saved = save(path)
                if saved is None or (needed is not None and not needed(path)):
                    continue
                entries[key] = {"acl": base64.b64encode(saved.acl).decode()
                                if saved.acl is not None else None,
                                "mode": saved.mode, "holders": [me]}
                dirty = True
            held.append((path, change))
        if dirty:
            _write(journal, entries)  # before any change: a kill from here on is replayed
        _atexit()
        for path, change in held:
            change(path)


def release(paths: list[Path] | None = None, tag: str = "session") -> list[str]:
    """This process no longer needs `paths` (None: any it holds) for `tag`: each that no
    other holder needs is put back as it was. Returns the paths put back."""
    journal, lock = _journal()
    if not journal.exists():
        return []
    with lock:
        entries = _load(journal)
        if paths is None:
            put_back = _settle(entries, leaving=_me(tag))
        else:
            mine = {k: entries[k] for k in map(str, paths) if k in entries}
            put_back = _settle(mine, leaving=_me(tag))
            for k in put_back:
                del entries[k]
            _settle(entries)
        _write(journal, entries)
        return put_back


def replay() -> list[str]:
    """Put back what killed processes left changed (a grading killed mid-run); returns those
    paths. Every `hold` does it first too."""
    journal, lock = _journal()
    if not journal.exists():
        return []
    with lock:
        entries = _load(journal)
        put_back = _settle(entries)
        _write(journal, entries)
        return put_back


_REGISTERED: list[int] = []


def _atexit() -> None:
    """`release` at this process's exit, once (a forked child is another holder)."""
    if os.getpid() not in _REGISTERED:
        _REGISTERED.append(os.getpid())
        atexit.register(_release_all, os.getpid())


def _release_all(pid: int) -> None:
    if os.getpid() == pid:  # not in a forked child that inherited the hook
        release(tag="session")
        release(tag="run")
