"""``python -m pipeline.report BUILD_DIR`` and ``python -m pipeline.report diff OLD NEW``."""

import sys

from pipeline.report.cli import main

sys.exit(main())
