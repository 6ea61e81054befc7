"""``python -m onnx_cooker.cli``: the ``onnx-cooker`` command without its console script."""

import sys

from onnx_cooker.cli.main import main

sys.exit(main())
