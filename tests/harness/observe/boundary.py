"""The one way into what a run left: its files, read beneath its folder, never through a
link, only when regular, every read capped, every JSON bounded in depth.

After a run the grader (root, on a grader's machine) reads what the run wrote; a run that
plants a link (`metrics/rank-0.jsonl -> /root/secret`), a FIFO (the read blocks for ever),
a link to `/dev/zero` (the read never ends), a 10 GB file or `[[[[...` a hundred thousand
deep would make the grader read, hang or crash on the run's behalf. Every read of a run's
directory (the contract's files, the observer's traces and stacks, the logs) goes through
`RunFolder`, and what it refuses is a located contract violation of the student's
(`Refused`), never the suite's error and never a hang:

- opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
  where the kernel has it (Linux 5.6+), else one component at a time with `O_NOFOLLOW`
  from the folder's own descriptor; no `..`, no absolute name;
- `O_NONBLOCK` and `fstat`: a regular file only (a FIFO or a device is refused before a
  byte is read); a file another user owns, linked in by a hard link, is refused too;
- at most `cap` bytes read (a larger file is refused, not read);
- JSON no deeper than `DEPTH` (a deeper document, or one deep enough to exhaust Python's
  recursion, is refused), lines no longer than the caller's cap.

(The tests/harness/run/ modules name no run-controlled path but through it:
tests/test_harness_layers.py holds them to it.)
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

MB = 2**20
DEPTH = 64  # JSON nesting a record may have: the contract's deepest file nests 4
_SYS_OPENAT2 = 437  # the same number on x86_64, arm64 and every architecture since 5.6
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x02, 0x04, 0x08
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
LINK_FIX = "write your files, do not link them"


class Refused(Exception):
    """A path of the run's folder the suite will not read, and why (one line, the path
    relative to the run's folder first): the student's contract violation."""

    def __init__(self, rel: str, why: str) -> None:
        super().__init__(f"{rel} {why}")
        self.rel, self.why = rel, why


class Missing(Refused):
    """The run did not write it."""

    def __init__(self, rel: str) -> None:
        super().__init__(rel, "was not written")


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_libc: Any = None
_has_openat2: bool | None = None  # None: not tried yet


def _openat2(dirfd: int, rel: str, flags: int) -> int | None:
    """openat2 beneath `dirfd` with no link followed; None where the kernel lacks it."""
    global _libc, _has_openat2
    if _has_openat2 is False:
        return None
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    how = _OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(_SYS_OPENAT2, dirfd, rel.encode(), ctypes.byref(how),
                       ctypes.sizeof(how))
    if fd >= 0:
        _has_openat2 = True
        return int(fd)
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM) and not _has_openat2:
        _has_openat2 = False  # (EPERM: a seccomp profile that refuses the call)
        return None
    raise OSError(err, os.strerror(err), rel)


def _parts(rel: str | os.PathLike[str]) -> list[str]:
    """The names of a relative path; an absolute one or one with `..` is refused."""
    text = os.fspath(rel)
    parts = [p for p in PurePosixPath(text).parts if p not in ("", ".")]
    if text.startswith("/") or ".." in parts or "\0" in text or not parts:
        raise Refused(text, "names a path outside the run's folder: write your files "
                            "beneath --out")
    return parts


@dataclass(frozen=True)
class Entry:
    """One name in a folder of the run's, as it is (never followed)."""

    name: str
    kind: str  # "file", "dir", "link" or "other" (a FIFO, a socket, a device)
    size: int


def _kind(mode: int) -> str:
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else \
        "link" if stat.S_ISLNK(mode) else "other"


@dataclass(frozen=True)
class RunFolder:
    """A run's folder, read as hostile input. `root` is the suite's own folder (made by the
    suite, in a folder the run cannot write): every path is relative to it. `owner`: the
    uid the run's program had, where it had one of its own (a hard link to a file of
    another owner is refused)."""

    root: Path
    owner: int | None = None

    def _root_fd(self) -> int:
        return os.open(self.root, _DIR)

    def _walk(self, dirfd: int, parts: list[str], rel: str) -> int:
        """The component-at-a-time fallback: every folder opened O_NOFOLLOW|O_DIRECTORY
        from the one before, the last name O_NOFOLLOW|O_NONBLOCK."""
        fd = os.dup(dirfd)
        try:
            for i, name in enumerate(parts):
                last = i == len(parts) - 1
                try:
                    nxt = os.open(name, _READ if last else _DIR, dir_fd=fd)
                except OSError as e:
                    raise self._why(fd, name, "/".join(parts[:i + 1]), e) from None
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _why(self, dirfd: int, name: str, upto: str, e: OSError) -> Refused:
        if e.errno == errno.ENOENT:
            return Missing(upto)
        try:
            kind = _kind(os.lstat(name, dir_fd=dirfd).st_mode)
        except OSError:
            return Refused(upto, f"cannot be read ({e.strerror})")
        if kind == "link":
            return Refused(upto, f"is a link: {LINK_FIX}")
        if e.errno == errno.ENOTDIR:
            return Refused(upto, "is not a folder")
        return Refused(upto, f"cannot be read ({e.strerror})")

    def _locate(self, parts: list[str], e: OSError) -> Refused:
        """Which component made openat2 refuse (for the message), found without following
        anything."""
        fd = self._root_fd()
        try:
            for i, name in enumerate(parts):
                try:
                    nxt = os.open(name, _READ if i == len(parts) - 1 else _DIR, dir_fd=fd)
                except OSError as e2:
                    return self._why(fd, name, "/".join(parts[:i + 1]), e2)
                os.close(fd)
                fd = nxt
            return Refused("/".join(parts), f"cannot be read ({e.strerror})")
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def opened(self, rel: str | os.PathLike[str], directory: bool = False) -> Iterator[int]:
        """A descriptor of `rel` (a regular file, or with `directory` a folder), beneath
        the run's folder with no link at any component; Refused (Missing) otherwise."""
        parts = _parts(rel)
        text = "/".join(parts)
        try:
            root = self._root_fd()
        except OSError as e:
            raise Refused(str(self.root), f"cannot be read ({e.strerror})") from None
        try:
            flags = _DIR if directory else _READ
            try:
                fd = _openat2(root, text, flags)
            except OSError as e:
                raise (Missing(text) if e.errno == errno.ENOENT else
                       self._locate(parts, e)) from None
            if fd is None:
                fd = self._walk(root, parts, text)
        finally:
            os.close(root)
        try:
            st = os.fstat(fd)
            if directory and not stat.S_ISDIR(st.st_mode):
                raise Refused(text, "is not a folder")
            if not directory:
                if stat.S_ISDIR(st.st_mode):
                    raise Refused(text, "is a folder, not a file")
                if not stat.S_ISREG(st.st_mode):
                    raise Refused(text, "is not a regular file (a FIFO, a socket or a "
                                        "device): write plain files")
                if st.st_nlink > 1 and self.owner is not None and \
                        st.st_uid not in (self.owner, os.geteuid()):
                    raise Refused(text, f"is a hard link to a file of another user: "
                                        f"{LINK_FIX}")
            yield fd
        finally:
            os.close(fd)

    def kind(self, rel: str | os.PathLike[str]) -> str:
        """"file", "dir", "link", "other" or "missing" (a link or a folder on the way
        beneath the run's folder that is a link: "link")."""
        parts = _parts(rel)
        try:
            with self.opened(PurePosixPath(*parts[:-1]), directory=True) \
                    if len(parts) > 1 else self._root() as fd:
                return _kind(os.lstat(parts[-1], dir_fd=fd).st_mode)
        except Missing:
            return "missing"
        except FileNotFoundError:
            return "missing"
        except (Refused, OSError):
            return "link"

    @contextlib.contextmanager
    def _root(self) -> Iterator[int]:
        fd = self._root_fd()
        try:
            yield fd
        finally:
            os.close(fd)

    def is_file(self, rel: str | os.PathLike[str]) -> bool:
        return self.kind(rel) == "file"

    def is_dir(self, rel: str | os.PathLike[str]) -> bool:
        return self.kind(rel) == "dir"

    def entries(self, rel: str | os.PathLike[str] = ".") -> list[Entry]:
        """The names in a folder of the run's (sorted; none followed); Refused where the
        folder itself cannot be reached that way."""
        ctx = self._root() if os.fspath(rel) in (".", "") else self.opened(rel, directory=True)
        out = []
        with ctx as fd:
            for name in sorted(os.listdir(fd)):
                with contextlib.suppress(OSError):
                    st = os.lstat(name, dir_fd=fd)
                    out.append(Entry(name, _kind(st.st_mode), st.st_size))
        return out

    def read(self, rel: str | os.PathLike[str], cap: int, offset: int = 0) -> bytes:
        """The file's bytes from `offset`; Refused where there are more than `cap` of
        them (nothing is read then)."""
        with self.opened(rel) as fd:
            size = os.fstat(fd).st_size
            if size - offset > cap:
                raise Refused("/".join(_parts(rel)),
                              f"is {size / MB:.1f} MB, more than the {cap / MB:.0f} MB the "
                              "suite reads of it")
            return _pread(fd, cap, offset)

    def tail(self, rel: str | os.PathLike[str], nbytes: int) -> bytes:
        """The last `nbytes` of the file (a log of any size)."""
        with self.opened(rel) as fd:
            size = os.fstat(fd).st_size
            return _pread(fd, nbytes, max(0, size - nbytes))

    def head(self, rel: str | os.PathLike[str], nbytes: int) -> bytes:
        """The first `nbytes` of the file (a log of any size)."""
        with self.opened(rel) as fd:
            return _pread(fd, nbytes, 0)

    def text(self, rel: str | os.PathLike[str], cap: int) -> str:
        """The file as UTF-8 (undecodable bytes replaced), at most `cap` bytes."""
        return self.read(rel, cap).decode("utf-8", "replace")

    def read_json(self, rel: str | os.PathLike[str], cap: int) -> Any:
        """The file as one JSON document (Refused: not JSON, too large, too deep)."""
        data = self.read(rel, cap)
        try:
            return loads(data)
        except ValueError as e:
            raise Refused("/".join(_parts(rel)), str(e)) from None


def _pread(fd: int, n: int, offset: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.pread(fd, min(n - got, 4 * MB), offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def loads(data: bytes | str, depth: int = DEPTH) -> Any:
    """One JSON document no deeper than `depth`; ValueError otherwise (never a
    RecursionError: the C decoder's own recursion limit is caught, and the depth is then
    measured without recursion)."""
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {depth} levels") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"invalid JSON ({e})") from None
    if nesting(obj) > depth:
        raise ValueError(f"JSON nested deeper than {depth} levels")
    return obj


def nesting(obj: Any) -> int:
    """How deep lists and objects nest in `obj` (0 for a scalar), without recursion."""
    deepest, todo = 0, [(obj, 1)]
    while todo:
        x, d = todo.pop()
        items = x.values() if isinstance(x, dict) else x if isinstance(x, list) else None
        if items is None:
            continue
        deepest = max(deepest, d)
        todo.extend((y, d + 1) for y in items if isinstance(y, (dict, list)))
    return deepest


def one_line(value: Any, limit: int = 200) -> str:
    """A run-chosen value as one line of at most `limit` characters: no control
    characters (a newline in a record is how a forged line reaches a report)."""
    text = value if isinstance(value, str) else str(value)
    text = "".join(ch if ch.isprintable() else " " for ch in text[:limit * 4])
    return text if len(text) <= limit else text[:limit - 1] + "…"


def integer(value: Any, lo: int, hi: int) -> int | None:
    """`value` where it is an int (not a bool) in [lo, hi], else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        return None
    return value


def replace_own(path: Path, data: bytes) -> None:
    """Write one of the suite's own files (an outcome, a timeline) into a run's folder once
    the run is over and its folder taken back: made under a fresh name (O_EXCL) and renamed
    over `path`, so that whatever the run left at that name (a link to any file of the
    machine, a FIFO) is replaced, never written through; a folder left there is removed
    first (without following a link in it)."""
    import shutil
    import tempfile

    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
