"""The storage contract suite (ckptio.testing.contract) on every backend: the in-memory reference backend in this
process without MPI; the three real formats under mpirun at 1, 2 and 4 ranks (one job per format and rank count,
every case in it); and a fourth format added exactly as a third party adds one, one module
(tests/thirdparty/ckptio_flat.py) plus one entry point, with no change to ckptio: the suite passes on it, and
the engine writes it on 3 ranks and restarts it on 2. Broken variants of the reference backend show that each
case fails when the contract is broken."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ckptio.backends import registry
from ckptio.backends.base import Placement
from mpi_helpers import BACKENDS, REPO, mpi_env, parse_cases, run_mpi

from ckptio.errors import CapabilityError, CheckpointIOError
from ckptio.testing.contract import CASES, StorageContractTests, run_case
from ckptio.testing.harness import Environment
from ckptio.testing.memory import FILES, MemoryBackend, MemoryExtentReader, MemoryFiles, MemoryWriteHandle

THIRD_PARTY = REPO / "tests" / "thirdparty"
PROGRAM = REPO / "tests" / "programs" / "contract.py"  # the MPI program of these tests
CASE_NAMES = [name for name, _ in CASES]

sys.path.insert(0, str(THIRD_PARTY))  # the in-process run imports the module itself (mpirun jobs: its entry point)
import ckptio_flat  # noqa: E402


# ------------------------------------------------------------------------- in this process, no MPI
class TestMemoryBackend(StorageContractTests):
    """The reference backend keeps the contract, 3 ranks played by this process."""

    backend_class = MemoryBackend
    files = MemoryFiles()


class TestMemoryBackendOnOneRank(TestMemoryBackend):
    simulated_ranks = 1


class TestFourthFormatInProcess(StorageContractTests):
    """The third party's own test module would hold just this: its format, 4 ranks played by one process."""

    backend_class = ckptio_flat.FlatBackend
    simulated_ranks = 4


def test_the_contract_suite_on_the_memory_backend_makes_no_mpi_call(tmp_path):
    proc = subprocess.run([sys.executable, str(PROGRAM), "memory", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env=mpi_env())
    cases = parse_cases(proc.stdout)
    assert proc.returncode == 0 and set(cases) == set(CASE_NAMES) and set(cases.values()) == {"PASS"}, proc
    assert "MPI LOADED False" in proc.stdout


def test_the_memory_backend_is_known_by_name_only_once_registered(monkeypatch):
    monkeypatch.setattr(registry, "_classes", dict(registry._classes))  # the registration ends with the test
    assert "memory" not in registry.known_backends()
    with pytest.raises(CapabilityError, match="unknown backend 'memory'"):
        registry.get_backend("memory")
    registry.register(MemoryBackend)
    assert isinstance(registry.get_backend("memory"), MemoryBackend)


# ------------------------------------------------------------------------- each case can fail
class _ReservesOnlyTheHeader(MemoryWriteHandle):
    def reserved_ranges(self):
        return [(0, 16)] if self._slot is None else super().reserved_ranges()


class _NoStepWithoutBlocks(MemoryWriteHandle):
    def write(self, blocks, tables=None):
        return super().write(blocks, tables) if blocks else []


class _MarksWithTheDocument(MemoryWriteHandle):
    def write_document(self, document):
        steps = super().write_document(document)
        return [*steps, *super().mark_complete(document is not None)]


class _AbortRaises(MemoryWriteHandle):
    def abort(self):
        raise RuntimeError("the file is still open")


class _ReadsInReverse(MemoryExtentReader):
    def read(self, extents, slot=0):
        arrays, calls = super().read(extents, slot)
        return arrays[::-1], calls


class _FlipsABit(MemoryWriteHandle):
    def write(self, blocks, tables=None):
        steps = super().write(blocks, tables)

        def damage() -> None:
            for w in self._written:
                if w.stored_nbytes:
                    FILES[self.path][w.file_offset + w.stored_nbytes - 1] ^= 0x10

        return [(label, lambda fn=fn: (fn(), damage())) for label, fn in steps]


def _backend(handle=MemoryWriteHandle, **methods):
    return type("Broken", (MemoryBackend,), {"handle_class": handle, **methods})


def _refuses_complex(self, name, dtype):
    if dtype.kind == "c":
        raise CapabilityError(f"{name}: no complex numbers here")


def _cannot_write_nothing(self, path, comm, info, variables, placement, options):
    if not variables:
        raise CheckpointIOError(f"{path}: a file without variables cannot be created")
    return MemoryBackend.create(self, path, comm, info, variables, placement, options)


def _shares_for_everyone(self, variables, stripe_unit, nprocs):
    placement = MemoryBackend.place(self, variables, stripe_unit, nprocs)
    every = [s["offsets"] for s in placement.shares]
    shares = [{**s, "everyone": every} for s in placement.shares]
    return Placement(shares[0], shares)


DEFECTS = {  # what is broken -> (the broken backend, the case that must fail, words of its reason)
    "reserves only the header": (_backend(_ReservesOnlyTheHeader), "reserved_ranges_cover_every_byte_of_the_data",
                                 "outside the reserved ranges"),
    "no write step on a rank without blocks": (
        _backend(_NoStepWithoutBlocks), "every_rank_makes_the_same_steps_when_only_the_last_rank_has_blocks",
        "same steps"),
    "marks complete with the document": (_backend(_MarksWithTheDocument),
                                         "a_file_without_the_completion_mark_is_incomplete", "accepted"),
    "abort raises": (_backend(_AbortRaises), "abort_never_raises_and_leaves_nothing_readable", "still open"),
    "the serial reader returns the extents in reverse": (
        _backend(serial_extents=lambda self, path, meta: _ReadsInReverse(path)),
        "serial_extents_read_every_block_back_bit_identically", ", not "),
    "a bit flipped in every block": (_backend(_FlipsABit), "open_extents_read_every_block_back_bit_identically",
                                     ("differ", "cannot be decoded")),  # (a raw block, or a compressed one)
    "sniffs everything": (_backend(sniff=classmethod(lambda cls, head: True)),
                          "sniff_accepts_its_own_files_and_refuses_others", "not its format's"),
    "refuses complex": (_backend(check_dtype=_refuses_complex), "check_dtype_and_check_attr_follow_the_capabilities",
                        "refuses a dtype"),
    "cannot write a checkpoint without variables": (_backend(create=_cannot_write_nothing),
                                                    "a_checkpoint_without_variables_commits", "without variables"),
    "a share lists every rank's blocks": (_backend(place=_shares_for_everyone),
                                          "place_gives_each_rank_a_share_that_does_not_grow_with_the_job",
                                          "grows with the job"),
    "extents miss a block": (_backend(extents=lambda self, meta: MemoryBackend.extents(self, meta)[:-1]),
                             "extents_cover_exactly_the_declared_data", "the extents hold"),
    "another document read back": (_backend(read_document=lambda self, path: {
        **MemoryBackend.read_document(self, path), "created": "yesterday"}),
        "write_protocol_commits_the_document_it_was_given", "did not return the document written"),
    "stores other bytes than it was given": (_backend(stored_document=lambda self, path: MemoryBackend.stored_document(
        self, path).replace(b'"', b"'", 1)), "write_protocol_commits_the_document_it_was_given",
        "did not return the bytes written"),
    "stored document of a short file": (_backend(stored_document=lambda self, path: MemoryBackend.stored_document(
        self, path) if len(MemoryFiles().read(path)) > 40 else b"{}"), "a_truncated_file_is_refused",
        "stored_document() accepted"),
    "accepts a short file": (_backend(read_document=lambda self, path: MemoryBackend.read_document(
        self, path) if len(MemoryFiles().read(path)) > 40 else {}), "a_truncated_file_is_refused", "accepted"),
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_the_suite_catches_a_backend_that_breaks_the_contract(defect, tmp_path):
    backend, name, words = DEFECTS[defect]
    why = run_case(Environment(backend, None, str(tmp_path), 3, MemoryFiles()), name, dict(CASES)[name])
    assert why is not None and any(w in why for w in ((words,) if isinstance(words, str) else words)), why
    assert run_case(Environment(MemoryBackend, None, str(tmp_path / "sound"), 3, MemoryFiles()), name,
                    dict(CASES)[name]) is None


def test_every_case_has_a_defect_that_fails_it():
    assert {name for _, name, _ in DEFECTS.values()} == set(CASE_NAMES)


# ------------------------------------------------------------------------- under mpirun
@pytest.fixture(scope="module")
def third_party(tmp_path_factory) -> dict[str, str]:
    """The environment of a process where the fourth format is installed as a package would install it: its
    module on the path and a distribution whose entry point names it (what importlib.metadata reads)."""
    site = tmp_path_factory.mktemp("site-packages")
    info = site / "ckptio_flat-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ckptio-flat\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ckptio.backends]\nflat = ckptio_flat:FlatBackend\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), str(THIRD_PARTY), os.environ.get("PYTHONPATH")]))}


_RESULTS: dict[tuple[str, int], dict[str, str]] = {}


@pytest.mark.mpi
@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", CASE_NAMES)
@pytest.mark.parametrize("nprocs", [1, 2, 4])
@pytest.mark.parametrize("backend", [*BACKENDS, "flat"])
def test_the_storage_contract_holds_under_mpirun(backend, nprocs, case, tmp_path_factory, third_party):
    """One mpirun per format and rank count runs every case (their outcomes agreed over the ranks)."""
    if (backend, nprocs) not in _RESULTS:
        outdir = tmp_path_factory.mktemp(f"contract_{backend}_{nprocs}")
        proc = run_mpi(nprocs, ["-m", "ckptio.testing.contract", "--backend", backend, "--outdir", str(outdir)],
                       timeout=400, check=False, env=third_party if backend == "flat" else None)
        _RESULTS[backend, nprocs] = parse_cases(proc.stdout) or {
            "*": f"no output (exit {proc.returncode}): {proc.stderr[-3000:]}"}
    results = _RESULTS[backend, nprocs]
    assert "*" not in results, results["*"]
    assert results.get(case) == "PASS", results.get(case, "the case did not run")


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_collective_mpiio_extent_readers_keep_the_read_contract(backend, tmp_path):
    """``CKPTIO_READ_IO=mpiio``: ``open_extents`` gives the collective reader (one ``Read_all`` per call, also on
    the ranks with nothing to read) instead of the independent one the other jobs use."""
    reads = ["open_extents_read_every_block_back_bit_identically",
             "every_rank_makes_the_same_steps_when_only_the_last_rank_has_blocks"]
    proc = run_mpi(3, ["-m", "ckptio.testing.contract", "--backend", backend, "--outdir", str(tmp_path),
                       *[f"--case={name}" for name in reads]], timeout=400, check=False,
                   env={"CKPTIO_READ_IO": "mpiio"})
    assert parse_cases(proc.stdout) == dict.fromkeys(reads, "PASS"), proc.stdout + proc.stderr[-3000:]


def test_a_fourth_format_is_found_through_its_entry_point_alone(third_party, tmp_path):
    """Without the entry point the name is unknown; with it, the suite finds the format and passes (one process
    playing 3 ranks, no MPI)."""
    args = [sys.executable, "-m", "ckptio.testing.contract", "--backend", "flat", "--outdir", str(tmp_path), "--ranks",
            "3"]
    without = subprocess.run(args, capture_output=True, text=True, timeout=120, env=mpi_env())
    assert without.returncode == 2 and "unknown backend 'flat'" in without.stderr, without
    found = subprocess.run(args, capture_output=True, text=True, timeout=120, env=mpi_env(third_party))
    cases = parse_cases(found.stdout)
    assert found.returncode == 0 and set(cases) == set(CASE_NAMES) and set(cases.values()) == {"PASS"}, found


@pytest.mark.mpi
def test_the_engine_writes_the_fourth_format_on_3_ranks_and_restarts_it_on_2(third_party, tmp_path):
    path = tmp_path / "chk_flat"
    wrote = run_mpi(3, [str(PROGRAM), "write", str(path), "flat"], env=third_party)
    assert sorted(line for line in wrote.stdout.splitlines() if line.startswith("WROTE")) == [
        "WROTE 0", "WROTE 1", "WROTE 2"], wrote.stdout
    assert path.read_bytes()[:8] == ckptio_flat.MAGIC and os.listdir(tmp_path) == ["chk_flat"]
    read = run_mpi(2, [str(PROGRAM), "read", str(path), "flat", "3"], env=third_party)
    assert sorted(line for line in read.stdout.splitlines() if line.startswith("RESTARTED")) == [
        "RESTARTED 0 flat", "RESTARTED 1 flat"], read.stdout
