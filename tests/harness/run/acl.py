"""A POSIX ACL entry written as the kernel stores it, without the `acl` package's setfacl.

`system.posix_acl_access` holds a little-endian header (version 2) and entries of
(tag u16, permissions u16, id u32), sorted by tag, then id. Adding a named user's entry
needs a mask entry, the union of the group class's permissions (named users and groups, the
owning group): what `setfacl -m u:UID:PERMS` writes. The owner's, the owning group's and
others' permissions stay as they were (read from the ACL, or from the mode where there is
none).
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

ATTR = "system.posix_acl_access"
VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED_ID = 0xFFFFFFFF
_HEADER, _ENTRY = struct.Struct("<I"), struct.Struct("<HHI")

Entry = tuple[int, int, int]  # tag, permissions (rwx as 4|2|1), id


def read(path: Path) -> list[Entry]:
    """The file's ACL entries: its stored ACL, or the three its mode stands for."""
    try:
        raw = os.getxattr(path, ATTR)
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
        mode = path.stat().st_mode
        return [(USER_OBJ, mode >> 6 & 7, UNDEFINED_ID), (GROUP_OBJ, mode >> 3 & 7, UNDEFINED_ID),
                (OTHER, mode & 7, UNDEFINED_ID)]
    if len(raw) < _HEADER.size or _HEADER.unpack_from(raw)[0] != VERSION:
        raise ValueError(f"{path}: an ACL of a version this writer does not know")
    return [_ENTRY.unpack_from(raw, off) for off in range(_HEADER.size, len(raw), _ENTRY.size)]


def encode(entries: list[Entry]) -> bytes:
    return _HEADER.pack(VERSION) + b"".join(_ENTRY.pack(*e) for e in sorted(entries))


def with_user(entries: list[Entry], uid: int, perms: int) -> list[Entry]:
    """`entries` with user `uid` given `perms` (added to what it had), the mask recomputed."""
    had = next((p for t, p, i in entries if t == USER and i == uid), 0)
    kept = [e for e in entries if not (e[0] == USER and e[2] == uid)]
    return with_mask([*kept, (USER, had | perms, uid)])


def with_mask(entries: list[Entry]) -> list[Entry]:
    """`entries` with their mask recomputed: the union of the group class's permissions
    (named users and groups, the owning group), as setfacl computes it."""
    kept = [e for e in entries if e[0] != MASK]
    mask = 0
    for tag, p, _ in kept:
        if tag in (USER, GROUP_OBJ, GROUP):
            mask |= p
    return [*kept, (MASK, mask, UNDEFINED_ID)]


def grant(path: Path, uid: int, perms: int = 1) -> bool:
    """Give user `uid` `perms` on `path` (1: pass through a directory) by an ACL entry, as
    root; False where the file system takes no ACLs."""
    try:
        os.setxattr(path, ATTR, encode(with_user(read(path), uid, perms)))
    except (OSError, ValueError):
        return False
    return True
