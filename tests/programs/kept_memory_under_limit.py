"""The program of ``tests/test_restart_memory.py``'s memory-limit test (no MPI): a restart output of 200 MiB,
dropped (its memory kept for a next read: run it with ``CKPTIO_RECYCLE_SECONDS`` > 0), then 250 MiB of the
simulation's own, in a memory cgroup limited to 400 MiB. Prints ``KEPT <MiB>`` and then ``OK`` if the second
allocation succeeded; kept memory that stayed pinned makes the kernel kill this process instead (exit -9). Then,
the simulation's memory freed, a second restart output of 200 MiB: ``SECOND faults=<page faults to fill it>
taken_back=<kept mappings dropped because the kernel took pages of them> reused=<outputs made in kept memory>``."""

from __future__ import annotations

import resource

import numpy as np

from ckptio.engine import restart_memory

OUTPUT = 200 << 20
OWN = 250 << 20


def main() -> None:
    out = restart_memory.empty((OUTPUT,), np.uint8)
    out[...] = 1  # what the read does
    del out
    print("KEPT", restart_memory.RECYCLED.kept_bytes >> 20, flush=True)
    own = np.ones(OWN, np.uint8)  # the simulation's next allocation
    print("OK" if int(own.sum()) == OWN else "WRONG", flush=True)
    del own
    recycled = restart_memory.RECYCLED
    out = restart_memory.empty((OUTPUT,), np.uint8)  # the next restart
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    out[...] = 2
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print(f"SECOND faults={faults} taken_back={recycled.taken_back} reused={recycled.reused}", flush=True)


if __name__ == "__main__":
    main()
