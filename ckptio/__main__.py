"""``python -m ckptio``: the same command line as the ``ckptio`` script."""

import sys

from .cli import main

sys.exit(main())
