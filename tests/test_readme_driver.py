"""The README's complete drivers (issue 27, item 1): what a reader copies must run.

The Python driver is taken from README.md (``<!-- snippet:driver-python -->``) and run as the README says: on 2
ranks to step 10, then restarted on 3 ranks to step 20 (async checkpoints, ``Series.latest()``, particles read at
another rank count); the final checkpoint must equal an uninterrupted 2-rank run's, bit for bit (``ckptio diff``).
The Fortran twin (``<!-- snippet:driver-fortran -->``) is compiled against the bindings that ``make install``
builds (``build/fortran``, through its pkg-config file) and run the same way; its checkpoint must equal the Python
driver's. Every file goes to tmp_path.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import FORTRAN_BUILD, REPO, mpi_env, run_program

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(600)]
CKPTIO = str(Path(sys.executable).parent / "ckptio")


def snippets() -> dict[str, str]:
    text = (REPO / "README.md").read_text()
    found = dict(re.findall(r"<!-- snippet:(driver-[\w-]+) -->\s*```\w*\n(.*?)```\s*<!-- /snippet -->", text, re.S))
    assert set(found) == {"driver-python", "driver-fortran"}, sorted(found)
    return found


def diff(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CKPTIO, "diff", str(a), str(b)], capture_output=True, text=True, env=mpi_env(),
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def python_runs(tmp_path_factory) -> Path:
    """The README's Python driver: run/ (2 ranks to step 10, then 3 ranks to 20) and straight/ (2 ranks to 20)."""
    d = tmp_path_factory.mktemp("readme_driver")
    code = snippets()["driver-python"]
    assert len(code.splitlines()) <= 40, "the README promises a ~30-line driver"
    (d / "driver.py").write_text(code)
    first = run_program(2, [sys.executable, "driver.py", "run", "10"], cwd=d)
    assert first.stdout.strip() == "from None to step 10", first.stdout + first.stderr
    again = run_program(3, [sys.executable, "driver.py", "run", "20"], cwd=d)
    assert again.stdout.strip() == "from run/chk_000010 to step 20", again.stdout + again.stderr
    run_program(2, [sys.executable, "driver.py", "straight", "20"], cwd=d)
    return d


def test_python_driver_restarts_on_another_rank_count_bit_identical(python_runs):
    d = python_runs
    # keep=2, and the checkpoint this run restarted from is kept while its Series lives
    assert sorted(p.name for p in (d / "run").iterdir()) == ["chk_000010", "chk_000015", "chk_000020"]
    assert sorted(p.name for p in (d / "straight").iterdir()) == ["chk_000015", "chk_000020"]
    proc = diff(d / "run" / "chk_000020", d / "straight" / "chk_000020")
    assert proc.returncode == 0 and proc.stdout.startswith("identical: 2 variables"), proc.stdout + proc.stderr
    import ckptio

    with ckptio.open(str(d / "run" / "chk_000020")) as ck:
        assert ck.attrs["step"] == 20 and ck.variables["particles"].kind == "segment"
        parts = ck["particles"][...]
        u = ck["u"][...]
    assert parts.shape == (100, 3) and sorted(parts[:, 0]) == list(range(100))  # every particle, once
    assert np.array_equal(parts[:, 1], parts[:, 0] * 0.5 + 20 * 0.25)
    want = np.arange(1000) * 0.001
    for _ in range(20):
        want = 0.5 * want + 1.0
    assert np.array_equal(u, want)


def test_fortran_twin_writes_the_same_checkpoint(python_runs, tmp_path):
    pkgconfig = FORTRAN_BUILD / "ckptio-fortran.pc"
    if shutil.which("mpifort") is None or shutil.which("pkg-config") is None or not pkgconfig.exists():
        pytest.skip(f"needs mpifort, pkg-config and the bindings built by make install ({pkgconfig})")
    (tmp_path / "driver.F90").write_text(snippets()["driver-fortran"])
    env = {**mpi_env(), "PKG_CONFIG_PATH": str(FORTRAN_BUILD)}
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "ckptio-fortran"], capture_output=True, text=True,
                           env=env, check=True).stdout.split()
    build = subprocess.run(["mpifort", "driver.F90", *flags, "-o", "driver"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    first = run_program(2, ["./driver", "run", "10"], cwd=tmp_path)
    assert first.stdout.strip() == "from  to step 10", first.stdout + first.stderr
    again = run_program(3, ["./driver", "run", "20"], cwd=tmp_path)
    assert again.stdout.strip() == "from run/chk_000010 to step 20", again.stdout + again.stderr
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["chk_000015", "chk_000020"]
    proc = diff(tmp_path / "run" / "chk_000020", python_runs / "run" / "chk_000020")
    assert proc.returncode == 0, proc.stdout + proc.stderr
