"""Write the format-1 fixtures (run with ckptio at e075aa2 on PYTHONPATH, under mpirun -n 2)."""
import sys

import numpy as np
from mpi4py import MPI

import ckptio

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
out = sys.argv[1]
for backend, ext, comp in (("mpiio", "ckpt", None), ("mpiio", "ckpt", "zstd"), ("hdf5", "h5", None),
                           ("pnetcdf", "nc", None)):
    name = f"{out}/v1_{backend}{'_' + comp if comp else ''}.{ext}"
    kw = {"compression": comp} if comp else {}
    with ckptio.create(name, comm, backend=backend, hints={"striping_unit": 4096}, **kw) as w:
        w.write("dens", np.arange(3 * 5, dtype=np.float64).reshape(3, 5) + 15 * rank, offset=(3 * rank, 0),
                global_shape=(6, 5), dims=("y", "x"), attrs={"units": "g/cm**3"})
        if backend != "hdf5":
            w.write("tracers", np.arange(2 + rank, dtype=np.int32) + 10 * rank)
        if rank == 0:
            w.write("energy", np.array(2.5), offset=(), global_shape=())
        w.set_attr("step", 7)
    comm.Barrier()
