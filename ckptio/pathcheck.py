"""What is wrong with a path that cannot be followed: a dangling symbolic link or a symbolic link loop (issue 23:
a loop was reported "does not exist", a dangling link as a raw ``FileExistsError``). Local, no MPI."""

from __future__ import annotations

import errno
import os


def symlink_problem(path: str) -> str | None:
    """Local: ``"a dangling symbolic link (to 'x')"`` or ``"a symbolic link loop"`` when ``path`` (or the first
    of its ancestors that cannot be followed) is one, naming that component; None when the path resolves or is
    simply missing."""
    try:
        os.stat(path)
        return None
    except OSError as exc:
        loop = exc.errno == errno.ELOOP
        if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return None
    here = os.path.abspath(path)
    parts = []
    while True:
        parts.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for component in reversed(parts):  # from the root down: the first component that cannot be followed
        if os.path.islink(component) and not os.path.exists(component):
            target = os.readlink(component)
            if loop or _loops(component):
                return f"{component} is a symbolic link loop (too many levels of symbolic links)"
            return f"{component} is a dangling symbolic link (to {target!r}, which does not exist)"
        if not os.path.exists(component):
            return None
    return None


def _loops(link: str) -> bool:
    try:
        os.stat(link)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def unfollowable(path: str, exc: OSError) -> OSError:
    """Local: ``exc`` (raised opening ``path``) with a message that says why the path cannot be followed when
    :func:`symlink_problem` finds a reason; a dangling link stays a FileNotFoundError."""
    why = symlink_problem(path)
    if why is None:
        return exc
    cls = FileNotFoundError if "dangling" in why else OSError
    return cls(exc.errno, why, path)
