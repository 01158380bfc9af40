"""A rank killed (SIGKILL) at each phase of a checkpoint: the job ends, the previous checkpoint survives.

For each backend, write mode and phase of ``Writer.close()`` (:data:`ckptio.engine.faults.PHASES`): a good
``chk_000010`` (written by its own 4-rank job, copied in), then a 4-rank job writing ``chk_000020`` with
``CKPTIO_FAULT="<phase>:<rank>"``. Then:

* ``mpirun`` returns non-zero within 60 s (Open MPI aborts the whole job when a rank dies) and no process of
  the job is left;
* ``chk_000010`` is byte-for-byte unchanged and passes ``inspect --verify``;
* ``ckptio.latest(dir)`` returns ``chk_000010``; ``chk_000020`` does not exist (exception: a rank other than 0
  killed at ``rename``, after the commit vote passed, races with rank 0's rename; then ``chk_000020`` may exist
  and must be complete and verified);
* the only other files are hidden temporaries of ``chk_000020`` (a killed job cannot remove them; ``latest``
  ignores them);
* a 4-rank restart from ``latest`` reads the right step's values.

The kill jobs of one group run a few at a time, then ONE restart job checks every group member's directory
(mpirun start-up dominates the cost). The fast group: native backend, synchronous mode, every phase, the victim
rank varying between phases (the coordinator, rank 0, for the phases where it works alone), plus HDF5 and
PnetCDF killed inside their collective data write. ``slow``: every backend x mode x phase x victim {0, 3},
one group per backend and mode.
"""

from __future__ import annotations

import hashlib
import shutil
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import KILLED_RANK_REPORTS, JobResult, available_modes, require_backend, run_job

import ckptio
from ckptio.engine.faults import MARKER, PHASES
from ckptio.tools.cli import inspect_report

BACKENDS = ("mpiio", "hdf5", "pnetcdf")
MODES = ("sync", "async", "staged")
FAST_VICTIMS = {"declare": 3, "create file": 0, "write data": 2, "checksum gather": 1, "write index": 0,
                "commit vote": 3, "rename": 0}
FAST = [("mpiio", "sync", phase, victim) for phase, victim in FAST_VICTIMS.items()] + [
    ("hdf5", "sync", "write data", 2), ("pnetcdf", "sync", "write data", 2)]
KILL_TIMEOUT = 60
PARALLEL = 3  # kill jobs at a time (mostly waiting for Open MPI to start and abort)

Key = tuple[str, str, str, int]  # backend, mode, phase, victim rank


@dataclass
class KillTrial:
    key: Key
    run_dir: Path
    survivor_digest: str
    job: JobResult | None = None
    error: str | None = None  # the kill job could not be run or timed out
    restart: dict[int, dict] | None = None


_SEEDS: dict[tuple[str, str], Path] = {}
_TRIALS: dict[Key, KillTrial] = {}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def good_checkpoint(backend: str, mode: str, factory) -> Path:
    """chk_000010 of this backend and mode, written once per session by its own job."""
    if (backend, mode) not in _SEEDS:
        d = factory.mktemp(f"good_{backend}_{mode}")
        result = run_job(["write", str(d), "10", backend, "--mode", mode], d, timeout=120)
        assert result.returncode == 0, result.describe()
        _SEEDS[backend, mode] = d / "chk_000010"
    return _SEEDS[backend, mode]


def _kill(trial: KillTrial) -> None:
    backend, mode, phase, victim = trial.key
    try:
        trial.job = run_job(["write", str(trial.run_dir), "20", backend, "--mode", mode], trial.run_dir.parent,
                            timeout=KILL_TIMEOUT, env={"CKPTIO_FAULT": f"{phase}:{victim}"})
    except BaseException:  # pytest.fail (timeout, leftover processes) included: reported by the trial's test
        trial.error = traceback.format_exc(limit=-3)


def run_group(keys: list[Key], factory) -> None:
    """Kill jobs for every key not run yet, then one restart job over all their directories."""
    todo = [k for k in keys if k not in _TRIALS]
    if not todo:
        return
    root = factory.mktemp("kills")
    trials = []
    for i, key in enumerate(todo):
        seed = good_checkpoint(key[0], key[1], factory)
        run_dir = root / f"t{i}" / "run"
        run_dir.mkdir(parents=True)
        shutil.copy2(seed, run_dir / "chk_000010")
        trials.append(KillTrial(key, run_dir, digest(seed)))
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(_kill, trials))
    restart = run_job(["restart", *(str(t.run_dir) for t in trials)], root, timeout=60 + 15 * len(trials))
    outcomes = restart.by_case()
    for t in trials:
        t.restart = outcomes.get(str(t.run_dir), {})
        _TRIALS[t.key] = t


def check_trial(key: Key, factory) -> None:
    backend, mode, phase, victim = key
    require_backend(backend)
    why_not = available_modes()[mode]
    if why_not:
        pytest.skip(why_not)
    group = FAST if key in FAST else [(backend, mode, p, v) for p in PHASES for v in (0, 3)]
    run_group(group, factory)
    trial = _TRIALS[key]
    assert trial.error is None, trial.error
    job, run_dir = trial.job, trial.run_dir
    assert job.returncode != 0, f"the job survived a killed rank\n{job.describe()}"
    assert f"{MARKER} rank {victim} " in job.stderr and repr(phase) in job.stderr, \
        f"the fault did not fire where asked\n{job.describe()}"
    assert any(r in job.stdout + job.stderr for r in KILLED_RANK_REPORTS), \
        f"mpirun did not report the killed rank\n{job.describe()}"

    survivor = run_dir / "chk_000010"
    assert digest(survivor) == trial.survivor_digest, "the previous checkpoint was modified"
    code, report = inspect_report(str(survivor), verify=True)
    assert code == 0, report

    interrupted = run_dir / "chk_000020"
    expected = survivor
    if interrupted.exists():
        assert phase == "rename" and victim != 0, f"an interrupted checkpoint appeared at its final name ({phase})"
        code, report = inspect_report(str(interrupted), verify=True)
        assert code == 0, f"a checkpoint renamed after a kill is not complete: {report}"
        expected = interrupted
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ckptio.latest(run_dir) == str(expected)
    assert not caught, [str(w.message) for w in caught]

    others = sorted(p.name for p in run_dir.iterdir() if p.name not in ("chk_000010", "chk_000020", "stage"))
    assert all(n.startswith(".chk_000020.ckptio-tmp-") for n in others), others

    step = 20 if expected == interrupted else 10
    assert sorted(trial.restart) == [0, 1, 2, 3], f"restart outcomes: {trial.restart}"
    for o in trial.restart.values():
        assert o["ok"] and o["value"] == [str(expected), step], o


@pytest.mark.mpi
@pytest.mark.parametrize("key", FAST, ids=lambda k: f"{k[0]}-{k[1]}-{k[2].replace(' ', '_')}-rank{k[3]}")
def test_killed_rank(key, tmp_path_factory):
    check_trial(key, tmp_path_factory)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("victim", (0, 3))
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_killed_rank_matrix(backend, mode, phase, victim, tmp_path_factory):
    check_trial((backend, mode, phase, victim), tmp_path_factory)


def test_fault_spec_is_validated():
    from ckptio.engine import faults as _faults

    assert _faults.parse("write data:2, rename:*") == [("write data", 2), ("rename", None)]
    for bad in ("write data", "wirte data:1", "rename:x", "rename:-1"):
        with pytest.raises(ValueError, match="CKPTIO_FAULT"):
            _faults.parse(bad)
