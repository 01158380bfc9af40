"""Warnings that point at the caller's line, not at ckptio's (issue 23).

``warnings.warn(..., stacklevel=N)`` with a fixed ``N`` is right for one call path only: ckptio warns from
functions reached through several public entry points (``latest()`` directly or through a ``Series``, a close()
directly or through ``with``). :func:`warn` instead counts the frames of ckptio itself (the ``ckptio`` package
and its ``backends``, wherever installed) and of the standard library's ``contextlib``/``threading`` glue, and
reports the first frame outside them: the user's script. Local, no MPI.

A warning raised in ckptio's background I/O thread has no user frame; it then points at the thread's entry
(``threading.py``), which says "background" better than a ckptio line would.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings

_GLUE = ("contextlib.py",)  # the ``with`` statement's frames between a user's block and Writer.__exit__
_dirs: tuple[str, ...] = ()


def _package_dirs() -> tuple[str, ...]:
    """The directories of ckptio's code: the package and its backends (a separate directory in an editable
    install)."""
    global _dirs
    if not _dirs:
        # where ckptio.backends lives, found without importing it (this module is below the backends)
        spec = importlib.util.find_spec(f"{__package__}.backends")
        found = list(spec.submodule_search_locations or ()) if spec else []
        _dirs = tuple({os.path.dirname(os.path.abspath(sys.modules[__package__].__file__)) + os.sep,
                       *(os.path.abspath(d) + os.sep for d in found)})
    return _dirs


def caller_stacklevel() -> int:
    """For :func:`warn` (call it from there only): the stacklevel, counted from the ckptio function that called
    :func:`warn` (1 = that function), of the first frame outside ckptio."""
    dirs = _package_dirs()
    frame = sys._getframe(2)  # the function that will call warnings.warn
    level = 1
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not (path.startswith(dirs) or os.path.basename(path) in _GLUE):
            return level
        frame = frame.f_back
        level += 1
    return level - 1  # nothing outside ckptio (a thread's entry): the outermost frame


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """Local: ``warnings.warn(message, category)`` attributed to the user's line that called into ckptio."""
    warnings.warn(message, category, stacklevel=caller_stacklevel() + 1)
