"""``python -m pipeline.farm stats|prune ...``: housekeeping for a folder cook cache (farm/admin.py)."""

import sys

from pipeline.farm.admin import main

sys.exit(main())
