"""``python -m onnx_cooker.report BUILD_DIR`` and ``python -m onnx_cooker.report diff OLD NEW``."""

import sys

from onnx_cooker.report.cli import main

sys.exit(main())
