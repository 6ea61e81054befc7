"""``python -m onnx_cooker.farm stats|prune ...``: housekeeping for a folder cook cache (farm/admin.py)."""

import sys

from onnx_cooker.farm.admin import main

sys.exit(main())
