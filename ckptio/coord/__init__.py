"""The coordination layer: the only code of ckptio that enters a communicator collective (issue 24).

* :mod:`ckptio.coord.agreement`: agreement on failures (an exception on any rank becomes the same error on every
  rank), rank-0 plans and broadcasts; :mod:`ckptio.coord.held_signals`: signal holding during a collective
  operation and its watchdog (delivered at the agreement points). Their API is re-exported here, so
  ``from ckptio import coord; coord.run(comm, phase, fn)`` and ``from ckptio.coord import agree`` work as they
  always did (and a wrapper set on ``ckptio.coord.run`` is what every caller of ``coord.run`` calls).
* :mod:`ckptio.coord.comms`: communicator lifecycle (node discovery, the aggregators' sub-communicator,
  duplicates, freeing); :func:`node_leader` and :func:`members_on_host` are re-exported here too.
* :mod:`ckptio.coord.exchange`: the restart exchange (records by Alltoall/Alltoallv or sparse, pieces by matched
  point-to-point messages); imported by its users, not here (it needs numpy and ckptio.coord.datatypes).

The rule every function keeps: each collective that must agree on a failure agrees first (local work ->
agreement -> next collective), an exception on any rank is the same error on every rank, and no rank hangs
because another raised.
"""

from ckptio.coord.agreement import (
    agree,
    bcast_from_root,
    count_ranks,
    gather_and_plan,
    merge_in_rank_order,
    run,
    scatter_from_root,
    sum_min_max,
)
from ckptio.coord.comms import members_on_host, node_leader
from ckptio.coord.held_signals import collective_section, deliver_held_signals
from ckptio.coord.leaving import close_on_exit, noting_ranks_that_left, raise_if_left, warn_from_root

__all__ = [
    "agree",
    "bcast_from_root",
    "close_on_exit",
    "collective_section",
    "count_ranks",
    "deliver_held_signals",
    "gather_and_plan",
    "members_on_host",
    "merge_in_rank_order",
    "node_leader",
    "noting_ranks_that_left",
    "raise_if_left",
    "run",
    "scatter_from_root",
    "sum_min_max",
    "warn_from_root",
]
