"""``python -m pipeline.cli``: the ``onnx-cooker`` command without its console script."""

import sys

from pipeline.cli.main import main

sys.exit(main())
