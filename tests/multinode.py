"""Emulated multi-node MPI jobs on one machine, for tests (issue 14).

Open MPI is started with its ``rsh`` launcher, but the "remote shell" is :data:`AGENT` (written next to the
job), which stands in for ssh: given a node name and the daemon's command line, it runs the command locally
inside ``unshare --uts --ipc --mount --propagation private`` after

* setting the hostname to the node name (``gethostname()``/``MPI_Get_processor_name()`` give the node, and
  ``Split_type(COMM_TYPE_SHARED)`` yields one group per node: without the UTS namespace the vader segments of
  two "nodes" collide);
* bind-mounting the per-node directory ``<root>/nodes/<node>`` onto one common node-local path
  ``<root>/nodelocal`` (every node sees its own files there, as with a node's SSD), and
* mounting a private tmpfs on ``/dev/shm`` (node-local RAM, as on a cluster);
* clearing the environment as an ssh login would (only ``PATH`` and ``HOME``): variables reach the ranks only
  with ``-x NAME``, as on a cluster.

Traffic between nodes goes over the tcp BTL on loopback, within a node over vader. The job's processes run as
the calling user; ``unshare`` needs root (or user namespaces): where it is not permitted, :func:`skip_reason`
says why and the tests skip.

Use :func:`run_nodes` (``layout`` is the ranks per node, e.g. ``(2, 2)`` or ``(2, 1, 1)``).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from mpi_helpers import mpi_flavour

REPO = Path(__file__).resolve().parent.parent
NODE_NAMES = ("nodeA", "nodeB", "nodeC", "nodeD", "nodeE", "nodeF")
# ranks need these (the agent clears the environment, like ssh): forwarded with -x
FORWARD = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "PYTHONPATH", "CKPTIO_TEST_FAULTS")

AGENT = r"""#!/bin/bash
# ssh stand-in for emulated nodes (tests/multinode.py): $1 is the node, the rest the daemon's command line.
set -e
node="$1"; shift
root="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$root/nodes/$node" "$root/nodelocal"
exec env -i PATH="$CKPTIO_AGENT_PATH" HOME="${HOME:-/root}" \
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  unshare --uts --ipc --mount --propagation private /bin/sh -c '
    hostname "$1" && mount --bind "$2/nodes/$1" "$2/nodelocal" && mount -t tmpfs -o size=1g tmpfs /dev/shm \
      || exit 97
    shift 2
    exec /bin/sh -c "$*"' agent "$node" "$root" "$@"
"""


@functools.lru_cache(maxsize=1)
def skip_reason() -> str | None:
    """Why emulated nodes cannot run here (None when they can): ``unshare`` of the UTS, IPC and mount
    namespaces with a tmpfs mount must be permitted (root, or unprivileged user namespaces)."""
    if sys.platform != "linux":
        return "emulated nodes need Linux namespaces (unshare)"
    if mpi_flavour() != "openmpi":  # the launcher is Open MPI's rsh agent (--mca plm_rsh_agent); Hydra has none
        return "emulated nodes use Open MPI's rsh launcher; this venv's MPI is MPICH (its Hydra is not emulated)"
    for tool in ("unshare", "mpirun"):
        if not any(os.access(os.path.join(d, tool), os.X_OK) for d in os.environ.get("PATH", "").split(":") if d):
            return f"emulated nodes need {tool} on PATH"
    try:
        probe = subprocess.run(["unshare", "--uts", "--ipc", "--mount", "--propagation", "private", "/bin/sh", "-c",
                                "hostname ckptio-probe && mount -t tmpfs tmpfs /dev/shm"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare is not usable here: {exc}"
    if probe.returncode != 0:
        return (f"unshare --uts --ipc --mount (hostname, tmpfs mount) is not permitted here: "
                f"{probe.stderr.strip() or probe.returncode}")
    return None


def hosts_arg(layout: Sequence[int], names: Sequence[str] = NODE_NAMES) -> str:
    """``--host`` value of a layout: ``(2, 1, 1)`` -> ``nodeA:2,nodeB:1,nodeC:1`` (``names``: the nodes' names,
    e.g. ``("nodeA", "nodeB", "nodeE")`` for a job where nodeE replaced nodeC)."""
    if not layout or len(layout) > len(names) or any(n < 1 for n in layout):
        raise ValueError(f"layout {layout!r}: 1 to {len(names)} nodes, each with at least one rank")
    return ",".join(f"{names[i]}:{n}" for i, n in enumerate(layout))


def node_of_rank(layout: Sequence[int]) -> list[str]:
    """The node name of every rank, ranks filled node by node (Open MPI's default ``--map-by slot``)."""
    return [NODE_NAMES[i] for i, n in enumerate(layout) for _ in range(n)]


def mpirun_command(layout: Sequence[int], argv: Sequence[str | os.PathLike], root: Path,
                   forward: Sequence[str] = (), agent_script: str = AGENT,
                   names: Sequence[str] = NODE_NAMES) -> list[str]:
    """The mpirun command line for ``argv`` on emulated nodes whose files live under ``root`` (``agent_script``:
    the ssh stand-in, :data:`AGENT` or one that does more per node, e.g. tests/cephfs's own ceph-fuse mount)."""
    root.mkdir(parents=True, exist_ok=True)
    agent = root / "agent.sh"
    agent.write_text(agent_script)
    agent.chmod(0o755)
    cmd = ["mpirun", "--host", hosts_arg(layout, names), "-n", str(sum(layout)),
           "--output-filename", str(output_dir(root)),
           "--mca", "plm", "rsh", "--mca", "plm_rsh_agent", str(agent), "--mca", "plm_rsh_no_tree_spawn", "1",
           "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo",
           "--mca", "btl", "self,vader,tcp"]
    for name in (*FORWARD, *forward):
        if name in os.environ or name in forward:
            cmd += ["-x", name]
    return cmd + [str(a) for a in argv]


def output_dir(root: Path) -> Path:
    """Where each rank's own stdout and stderr are kept (``--output-filename``: ``<dir>/1/rank.N/stdout``).

    mpirun's forwarded stdout cannot carry a rank's lines whole: Open MPI gives each rank a pseudo-terminal, the
    kernel passes a write through it in pieces of 2,048 bytes, and the node's daemon forwards each piece as soon as
    it reads it, so a longer line of rank 0 arrived with a line of rank 1 (same node) inside it. The daemon also
    writes every rank's output, in order, to these files; :func:`run_nodes` reads them."""
    return root / "output"


def rank_output(root: Path, stream: str = "stdout") -> str | None:
    """Every rank's ``stream`` (from :func:`output_dir`), rank after rank; None when the job wrote no files."""
    job = output_dir(root) / "1"
    if not job.is_dir():
        return None
    ranks = sorted(job.glob("rank.*"), key=lambda d: int(d.name.split(".")[1]))
    return "".join((d / stream).read_text(errors="replace") for d in ranks if (d / stream).is_file())


def run_nodes(layout: Sequence[int], argv: Sequence[str | os.PathLike], root: str | os.PathLike,
              timeout: float = 240, env: dict[str, str] | None = None, check: bool = True,
              forward: Sequence[str] = (), agent_script: str = AGENT,
              names: Sequence[str] = NODE_NAMES) -> subprocess.CompletedProcess:
    """Run ``argv`` on emulated nodes (``layout``: ranks per node), with a hard timeout (the whole job is killed
    and the test fails: a deadlock never hangs the suite). ``root``: a fresh directory holding the agent and the
    nodes' node-local directories; ranks see their own node's one at ``node_local(root)``. The result's
    ``stdout`` is every rank's own output, rank after rank (:func:`output_dir`: never one rank's line cut by
    another's); ``stderr`` is mpirun's. ``env`` entries
    reach the ranks (they are forwarded with ``-x``); with ``check``, a non-zero exit fails the test. ``names``:
    the nodes' names (default :data:`NODE_NAMES`)."""
    root = Path(root)
    extra = dict(env or {})
    cmd = mpirun_command(layout, argv, root, forward=(*forward, *extra), agent_script=agent_script, names=names)
    run_env = {**os.environ, **extra}
    run_env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                    "OMPI_MCA_rmaps_base_oversubscribe": "1",
                    "CKPTIO_AGENT_PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"})
    shutil.rmtree(output_dir(root), ignore_errors=True)  # (a job before this one in the same root)
    run_env.pop("OMPI_MCA_plm", None)  # the Makefile's plm=isolated would refuse a multi-host job
    job = subprocess.Popen(cmd, cwd=REPO, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)  # mpirun, the agents, daemons and ranks: one process group
        out, err = job.communicate()
        raise AssertionError(f"{shlex.join(cmd)} did not finish in {timeout} s (deadlock?)\n"
                             f"stdout: {out[-6000:]}\nstderr: {err[-6000:]}") from None
    per_rank = rank_output(root)
    proc = subprocess.CompletedProcess(cmd, job.returncode, out if per_rank is None else per_rank, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"{shlex.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout[-6000:]}\n"
                             f"stderr:\n{proc.stderr[-6000:]}")
    return proc


def node_local(root: str | os.PathLike) -> Path:
    """The path at which every emulated node sees its own node-local directory."""
    return Path(root) / "nodelocal"


def node_dir(root: str | os.PathLike, node: str) -> Path:
    """Where the files one node wrote to its node-local directory are, seen from outside the job."""
    return Path(root) / "nodes" / node
