"""``python -m ckptio.testing``: the end-to-end conformance suite (:mod:`ckptio.testing.conformance`)."""

from __future__ import annotations

import sys

from ckptio.testing.conformance import main

sys.exit(main())
