"""The suites every backend must pass, shipped with the package so a new format can run them too (issue 24).

* :mod:`ckptio.testing.contract`: the storage contract suite. It drives a backend's methods directly, in the
  order :mod:`ckptio.backends.base` documents, without the engine (as zarr's ``StoreTests`` drive a store):
  ``mpirun -n N python -m ckptio.testing.contract --backend NAME --outdir DIR``, or in one process without MPI
  (pytest: subclass :class:`ckptio.testing.contract.StorageContractTests`).
* :mod:`ckptio.testing.conformance`: the end-to-end suite through the public API (``ckptio.create`` /
  ``ckptio.open``): ``mpirun -n N python -m ckptio.testing --backend NAME --outdir DIR``.
  Its parts: :mod:`ckptio.testing.harness` (the environment and the write protocol played call by call) and
  :mod:`ckptio.testing.layouts` (the checkpoints it writes).
* :mod:`ckptio.testing.memory`: the in-memory reference backend (``MemoryBackend``), which the contract suite
  runs on in milliseconds, without MPI or a file system. Not registered by default.
"""

from __future__ import annotations

from ckptio.testing.conformance import CASES, main

__all__ = ["CASES", "main"]
