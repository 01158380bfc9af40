"""``python -m ckptio``: the same command line as the ``ckptio`` script."""

import sys

from ckptio.tools.cli import main

sys.exit(main())
