"""Issue 23's minor cases that need MPI: paths that cannot be a checkpoint (a trailing slash, a name longer than
the file system takes, symlink loops and dangling symlinks, a stage directory that is a file), an ``out=`` whose
elements overlap, a missing file. One job per (backend, rank count) runs ``edge_job.py edges``; every rank
records each case, most go wrong on the last rank only. All in ``make test``."""

from __future__ import annotations

import pytest
from conftest import FAULTS, assert_every_rank_failed, require_backend, run_job

JOB = FAULTS / "edge_job.py"
# (backend, ranks): every backend at 4 ranks; mpiio also at 1, 2, 3
RUNS = [("mpiio", 1), ("mpiio", 2), ("mpiio", 3), ("mpiio", 4), ("hdf5", 4), ("pnetcdf", 4)]


@pytest.fixture(scope="module", params=RUNS, ids=[f"{b}-{n}" for b, n in RUNS])
def job(request, tmp_path_factory) -> tuple[dict[str, dict[int, dict]], int]:
    backend, nprocs = request.param
    require_backend(backend)
    work = tmp_path_factory.mktemp(f"edges_{backend}_{nprocs}")
    result = run_job(["edges", str(work / "d"), backend], work, nprocs=nprocs, timeout=180, job=JOB)
    assert result.returncode == 0, result.describe()
    return result.by_case(), nprocs


def _failed(job, case: str, cls: str, *words: str) -> dict[int, dict]:
    """Every rank raised ``cls`` (a CheckpointError) whose message holds every one of ``words``; nothing was left
    behind (neither the checkpoint's name nor a temporary file)."""
    by_case, nprocs = job

    class _Result:
        def by_case(self):
            return by_case

        def describe(self):
            return repr(by_case.get(case))

    per_rank = assert_every_rank_failed(_Result(), case, nprocs)
    for rank, o in per_rank.items():
        assert cls in o["bases"] and "CheckpointError" in o["bases"], f"{case}, rank {rank}: {o}"
        for word in words:
            assert word in o["msg"], f"{case}, rank {rank}: {word!r} not in {o['msg']!r}"
    left = by_case.get(f"{case}:files", {}).get(0, {}).get("value", [])
    assert not [n for n in left if "ckptio-tmp" in n or n.startswith(("chk_0000", "c" * 100))], left
    return per_rank


@pytest.mark.mpi
def test_trailing_slash_is_refused_before_any_data_is_written(job):
    """Before: the data was written and only the final rename failed (NotADirectoryError). Now the arguments
    phase (the first agreed phase of close()) refuses it on every rank."""
    _failed(job, "trailing_slash", "DeclarationError", "declare (arguments)", "names a directory")
    per_rank = _failed(job, "trailing_slash_last_rank", "DeclarationError", "declare (arguments)")
    _, nprocs = job
    assert "names a directory" in per_rank[0]["msg"] and f"rank {nprocs - 1}" in per_rank[0]["msg"]


@pytest.mark.mpi
def test_a_name_longer_than_name_max_is_refused_and_the_longest_name_works(job):
    """Before: a 240-character name aborted every rank inside Open MPI's OMPIO (the temporary name is 25 bytes
    longer, beyond NAME_MAX; and OMPIO aborts on any path beyond 244 bytes). Now a clear error on every rank in
    the arguments phase; the longest name both limits allow commits, one character more is refused."""
    _failed(job, "name_too_long", "CheckpointIOError", "declare (arguments)", "file name too long", "NAME_MAX",
            "at most 230 bytes")
    _failed(job, "name_one_too_long", "CheckpointIOError", "declare (arguments)", "too long")
    by_case, nprocs = job
    assert all(by_case["name_longest"][r]["ok"] for r in range(nprocs)), by_case["name_longest"]


@pytest.mark.mpi
def test_a_self_overlapping_out_is_refused_on_every_rank(job):
    """Before: a writable stride-0 ``out`` on one rank was accepted and held one value everywhere."""
    _failed(job, "stride0_out", "ReadRequestError", "overlap in memory", "'x'")
    by_case, nprocs = job
    assert all(by_case["still_reads_after_bad_out"][r]["value"] is True for r in range(nprocs))


@pytest.mark.mpi
def test_a_missing_file_is_a_file_not_found_error_on_every_rank(job):
    """Before (one rank too): ``CollectiveCheckpointIOError`` "... on 1 rank(s)", not a FileNotFoundError."""
    per_rank = _failed(job, "missing_file", "CheckpointNotFoundError", "missing")
    assert all("FileNotFoundError" in o["bases"] for o in per_rank.values())


@pytest.mark.mpi
def test_a_stage_dir_that_is_a_file_is_named_as_such(job):
    """Before: "remove the probe failed: NotADirectoryError" (the cleanup's error replaced the cause)."""
    for case, what in (("stage_dir_is_a_file", "it is a regular file"),
                       ("stage_dir_under_a_file", "plainfile is a regular file")):
        per_rank = _failed(job, case, "CheckpointIOError", what, "not a directory")
        assert not any("probe" in o["msg"] for o in per_rank.values()), per_rank


@pytest.mark.mpi
def test_symlink_loops_and_dangling_symlinks_are_named(job):
    """Before: a symlink loop was "does not exist", a dangling symlink a raw FileExistsError."""
    _failed(job, "open_symlink_loop", "CheckpointIOError", "symbolic link")
    per_rank = _failed(job, "open_dangling_symlink", "CheckpointNotFoundError", "dangling symbolic link", "nowhere")
    assert all("FileNotFoundError" in o["bases"] for o in per_rank.values())
    _failed(job, "create_in_symlink_loop_dir", "CheckpointIOError", "loop", "symbolic link")
    _failed(job, "create_in_dangling_symlink_dir", "CheckpointIOError", "dangling symbolic link", "nowhere")


def test_serial_open_of_a_missing_file_is_a_file_not_found_error(tmp_path):
    """One process (no mpirun): ``except FileNotFoundError`` catches ``ckptio.open("missing")``, as ``open()``'s
    would; it is still a CheckpointIOError (and a CollectiveError, raised alike on every rank of a job)."""
    import ckptio

    for path in (tmp_path / "missing", tmp_path / "no_dir" / "chk_000001"):
        with pytest.raises(FileNotFoundError) as info:
            ckptio.open(path)
        assert isinstance(info.value, ckptio.CheckpointNotFoundError), type(info.value).__mro__
        assert isinstance(info.value, ckptio.CheckpointIOError) and str(path) in str(info.value)
    (tmp_path / "dir").mkdir()
    with pytest.raises(ckptio.CheckpointIOError) as info:  # other OS errors are not "not found"
        ckptio.open(tmp_path / "dir")
    assert not isinstance(info.value, FileNotFoundError)
