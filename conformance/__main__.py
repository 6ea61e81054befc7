"""``python -m conformance``: run the conformance suite and regenerate docs/conformance.md."""

import sys

from .run import main

sys.exit(main())
