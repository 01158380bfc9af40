# ckptio developer targets. `make test` is what CI runs (.ci/run).
#   make install      build/refresh the venv (ci/install.sh; quiet and ~seconds when up to date)
#   make demo         FLASH-like checkpoint/restart demo on 4 ranks
#   make test         the test suite without the slow fault matrices (tests start mpirun themselves)
#   make test-nodes   only its tests on emulated nodes (tests/multinode.py)
#   make test-bindings  only its tests of the C/Fortran bindings (those on emulated nodes are make test-nodes')
#   make test-faults  every fault-injection test, the slow matrices included
#   make test-cephfs  the stripe-layout tests on a real single-host CephFS (ci/cephfs.sh; root, /dev/fuse)
#   make test-slow    only the slow tests (make test + make test-slow = everything on this MPI; what .ci/run does)
#   make test-matrix  the per-MPI-IO matrix (conformance sync/async/staged at 1, 2, 4 and oversubscribed rank
#                     counts, N-to-M, strace aggregators, bindings, bounded faults, cross-MPI restart); .ci/run runs
#                     it on MPICH (MPI=mpich)
#   make test-matrix-driver  its part that goes through the MPI-IO driver; .ci/run runs it on Open MPI's ROMIO
#                     (OMPI_MCA_io=romio321)
#   make test-slurm   the tests under a real Slurm (tests/slurm, issue 25): ci/slurm.sh brings up slurmctld and
#                     2 emulated nodes on this machine (apt-installs Slurm and munge if missing; root)
#   make lint         ruff
#   make docs         the documentation (docs/ -> docs/_build/html), warnings and broken internal links are errors
#   make bench        benchmarks on 4 ranks (results and plots under bench_results/; see benchmarks/README.md);
#                     IOR=/path/to/ior adds IOR as the storage ceiling
#   make clean        build products and caches; `make distclean` also removes the venv and bench_results/
# VENV=/path selects another venv (default .venv in the repo root).
# MPI=mpich selects the second MPI stack (Debian's MPICH, ROMIO underneath MPI-IO) in its own venv .venv-mpich:
#   make install MPI=mpich / make test MPI=mpich / make demo MPI=mpich. The default, MPI=openmpi, is Open MPI in .venv.
#   The MPICH venv carries its own mpirun (MPICH's Hydra) in its bin/, which PATH below puts first.

ROOT := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
MPI ?= openmpi
ifeq ($(filter $(MPI),openmpi mpich),)
$(error MPI=$(MPI): expected openmpi or mpich)
endif
VENV ?= $(if $(filter mpich,$(MPI)),.venv-mpich,.venv)
override VENV := $(if $(filter /%,$(VENV)),$(VENV),$(ROOT)/$(VENV))
PY := $(VENV)/bin/python
PYTEST_FLAGS ?= -q

# Open MPI 4.1 as root on one node: allow root, allow more ranks than cores, and launch locally
# (plm=isolated: no ssh/rsh needed -- without it mpirun aborts on machines that have no ssh client).
# Under a batch system, `make test OMPI_MCA_plm=^isolated` lets Open MPI pick its usual launcher (slurm, rsh).
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1
export OMPI_MCA_plm ?= isolated
# Waiting ranks yield the core (tests/mpi_helpers.py says why): a spinning job beside another slows both ~2x.
export OMPI_MCA_mpi_yield_when_idle ?= 1
# Not set: OMPI_MCA_btl_vader_single_copy_mechanism=none. Shared-memory single copy (CMA) works on the reference
# machine (4-rank Alltoallv up to 32 MB checked); export it if a container forbids process_vm_readv (CAP_SYS_PTRACE).
export PATH := $(VENV)/bin:$(PATH)
export VENV MPI

SHELL := /bin/bash
.DEFAULT_GOAL := test
.PHONY: install demo test test-nodes test-bindings test-cephfs test-faults test-slow test-matrix test-matrix-driver test-slurm lint docs bench clean distclean

install:
	bash ci/install.sh

demo: install
	bash examples/flash_like/demo.sh

# `make test`: everything except the tests marked slow (the long fault-injection matrices) or matrix (extra rank
# counts run per MPI-IO implementation by `make test-matrix`); `make test-faults`:
# every fault test, slow ones included.
TEST_MARKS ?= not slow and not matrix and not cephfs
test: install
	$(PY) -m pytest tests -m "$(TEST_MARKS)" $(PYTEST_FLAGS)

# `make test-nodes`: make test's tests on emulated nodes (tests/multinode.py) alone; .ci/run runs them in another
# lane than make test (make test TEST_MARKS="... and not nodes").
test-nodes: install
	$(PY) -m pytest tests -m "nodes and not slow and not matrix and not cephfs" $(PYTEST_FLAGS)

# `make test-bindings`: make test's tests of the C/Fortran bindings alone (without those on emulated nodes, which
# are make test-nodes'); .ci/run runs them in the main lane after make test (make test TEST_MARKS="... and not
# bindings": the MPICH matrix gets the CPU back meanwhile).
test-bindings: install
	$(PY) -m pytest tests -m "bindings and not nodes and not slow and not matrix and not cephfs" $(PYTEST_FLAGS)

# `make test-cephfs`: ckptio's stripe layouts on a real single-host CephFS (tests/cephfs/conftest.py runs
# `ci/cephfs.sh up`: installs Ceph if missing, starts or reuses the cluster, mounts it with ceph-fuse; the tests
# skip, saying why, without root or /dev/fuse).
test-cephfs: install
	$(PY) -m pytest tests/cephfs $(PYTEST_FLAGS)

test-faults: install
	$(PY) -m pytest tests/faults $(PYTEST_FLAGS)

# `make test-slow`: only the tests marked slow (the long fault matrices); with `make test` it covers what
# `make test-faults` adds, without running the bounded fault tests twice (what .ci/run uses).
test-slow: install
	$(PY) -m pytest tests -m slow $(PYTEST_FLAGS)

# The matrix every MPI-IO implementation must pass (tests/test_mpi_stacks.py has the cross-MPI restart, which
# needs both venvs: `make install MPI=mpich` once). Fault subset: the fast, bounded fault tests (killed ranks in
# every phase, corruption, declarations...), not the slow matrices.
MATRIX_TESTS := tests/test_conformance.py tests/test_async_series.py::test_conformance_in_background_modes \
                tests/test_mpi_stacks.py tests/test_aggregators_strace.py tests/test_bindings.py tests/faults \
                tests/test_pnetcdf_swap.py
test-matrix: install
	$(PY) -m pytest $(MATRIX_TESTS) -m "not slow and not stack_independent" $(PYTEST_FLAGS)

# `make test-matrix-driver`: the part of the matrix that goes through the MPI-IO driver, for a second driver of the
# same MPI library (CI: Open MPI's ROMIO beside its default OMPIO): conformance, N-to-M, background modes, the
# cross-MPI restart, the aggregators' strace check, killed and leaving ranks, lost writes and write errors, full
# disks. What does not depend on the driver (declarations refused before any file is opened, edge paths, series identity, the C/Fortran
# glue, damaged files found by checksums) runs under OMPIO in `make test` and under MPICH in `make test-matrix`.
DRIVER_TESTS := tests/test_conformance.py tests/test_async_series.py::test_conformance_in_background_modes \
                tests/test_mpi_stacks.py tests/test_aggregators_strace.py tests/faults/test_killed_writer.py \
                tests/faults/test_killed_write_leftovers.py tests/faults/test_rank_leaves.py \
                tests/faults/test_lost_writes.py tests/faults/test_aggregated_write_failure.py \
                tests/faults/test_disk_and_permissions.py tests/faults/test_one_client_write_error.py \
                tests/faults/test_write_error_lost_by_mpiio.py tests/test_pnetcdf_swap.py
test-matrix-driver: install
	$(PY) -m pytest $(DRIVER_TESTS) -m "not slow and not stack_independent" $(PYTEST_FLAGS)

# `make test-slurm`: tests/slurm under the Slurm of ci/slurm.sh (left running afterwards: `bash ci/slurm.sh down`).
# Not in `make test` (tests/slurm/conftest.py collects them only when asked for). Its own --basetemp: the jobs'
# outputs stay for a look afterwards, and other pytest sessions of the same user cannot rotate them away mid-run.
test-slurm: install
	bash ci/slurm.sh up
	$(PY) -m pytest tests/slurm -m slurm --basetemp=/var/tmp/ckptio-slurm-tests $(PYTEST_FLAGS)

lint: install
	$(PY) -m ruff check .

# `make docs`: Sphinx with -W (every warning is an error), -n (nitpicky: every cross-reference must resolve) and -E
# (a fresh environment: an incremental build would not repeat the warnings of unchanged pages);
# nothing is fetched from the network (no linkcheck); ci/check_links.py checks the relative links of the Markdown
# files outside docs/ (README.md, CONTRIBUTING.md, benchmarks/, fortran_bindings/, examples/).
docs: install
	$(PY) -m sphinx -E -W -n --keep-going -q -b html docs docs/_build/html
	$(PY) ci/check_links.py

# `make bench`: the full benchmark (2 GiB, 6 rounds: an even number, see benchmarks/common.py round_order; 2 rounds
# of small variables) on BENCH_NP ranks with issue 29's references and goal table; results and PNGs in
# bench_results/ (see benchmarks/README.md). First builds PnetCDF's FLASH-IO benchmark from Debian's source package
# (ci/build_flash_io.sh: once, ~1 min; never in `make test`; if it cannot be built the run reports the FLASH-IO
# case skipped). IOR=/path/to/ior: IOR as the storage ceiling (else `ior` on PATH; without one, a built-in MPI-IO
# reference of IOR's pattern, said in one line).
# A shorter run: `make bench BENCH_ARGS="--size 1G --plot"`.
BENCH_NP ?= 4
BENCH_ARGS ?= --plot --small-repeats 2 --repeats 6
# FLASH-IO links Debian's PnetCDF, which is built for Open MPI: with MPI=mpich its case is reported skipped.
FLASH_IO_DIR := build/flash-io
bench: install
	$(if $(filter openmpi,$(MPI)),bash ci/build_flash_io.sh $(FLASH_IO_DIR) || \
	  echo "make bench: FLASH-IO not built (above): its case is reported skipped")
	mpirun -n $(BENCH_NP) $(PY) -m benchmarks.run $(BENCH_ARGS) \
	  $(if $(filter openmpi,$(MPI)),--flash-io $(FLASH_IO_DIR)/flash_benchmark_io) $(if $(IOR),--ior $(IOR)) \
	  --results bench_results

clean:
	rm -rf build .pytest_cache .hypothesis .ruff_cache *.egg-info docs/_build
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) bench_results
