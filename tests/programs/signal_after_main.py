"""A launcher for examples/flash_like/flash_like.py (``tests/test_batch.py``): runs the script as ``__main__``;
once the interpreter exits (an ``atexit`` hook registered before the script runs, so after ckptio's), does what
the interpreter's finalization does to the signal handlers (CPython's ``_PySignal_Fini``: a signal whose handler
is a Python function gets its default action back, an ignored or default one stays as it is) and sends its own
process ``SIGUSR1``: the batch system's time-limit warning arriving after the job's last step, while it exits.

    mpirun -n N python signal_after_main.py SCRIPT ARGS...
"""

from __future__ import annotations

import atexit
import os
import runpy
import signal
import sys


def late_warning() -> None:
    """At exit, after every exit hook the script and ckptio registered (atexit runs the last registered first):
    the interpreter's signal finalization, then the warning."""
    if callable(signal.getsignal(signal.SIGUSR1)):  # a Python handler: finalization restores the default action
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGUSR1)  # ignored, or the process ends here (SIGUSR1's default action)
    print("SIGUSR1 sent after main() returned", flush=True)


def main() -> None:
    atexit.register(late_warning)  # before the script runs: its hooks and ckptio's run before this one
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
