"""``mpirun -n N python -m ckptio.verify [--json] [--aggregators A] PATH...``: ``ckptio inspect --verify`` on N ranks,
each restart aggregator verifying its own file domains (:mod:`ckptio.tools.commands.verify_parallel`)."""

import sys

from ckptio.tools.commands.verify_parallel import main

sys.exit(main())
