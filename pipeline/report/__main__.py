"""``python -m pipeline.report BUILD_DIR`` and ``python -m pipeline.report diff OLD NEW``."""

import sys

from pipeline.report.report import main

sys.exit(main())
