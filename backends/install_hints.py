"""What to run when a backend's library is missing: the text of every ``CapabilityError`` and of
``ckptio.backends.MISSING`` that asks for h5py with MPI or for pnetcdf-python (one place, so the advice stays the
same everywhere and names the command that works: ``ckptio-install-parallel``, not a raw pip command, which fails
for pnetcdf-python on Open MPI with ``invalid operands to binary <<``).

No imports: the backends read these constants when ``import ckptio`` loads them (startup cost, issue 16).
"""

HDF5 = ("install h5py built with parallel HDF5: `ckptio-install-parallel hdf5` (from `pip install ckptio`; it "
        "builds h5py against your MPI: set HDF5_DIR to a parallel HDF5 prefix, e.g. after `module load` of it; on "
        "Debian/Ubuntu with `apt-get install libhdf5-openmpi-dev` the exact setting is "
        "`HDF5_PKGCONFIG_NAME=hdf5-openmpi ckptio-install-parallel hdf5`, which the command also detects), or "
        "`make install` in a ckptio source tree")

PNETCDF = ("install pnetcdf-python (needs the PnetCDF C library and mpi4py): `ckptio-install-parallel pnetcdf` "
           "(from `pip install ckptio`; it patches pnetcdf-python 1.0.0 so it compiles against Open MPI too and "
           "builds it with your MPI: set PNETCDF_DIR to a PnetCDF >= 1.12.3 prefix, or have pnetcdf-config on PATH; "
           "Debian/Ubuntu: `apt-get install libpnetcdf-dev pnetcdf-bin` first), or `make install` in a ckptio "
           "source tree")
