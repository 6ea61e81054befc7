"""doit tasks of onnx-cooker: `doit cook` cooks every model in assets/ for every platform.

`doit list --all` shows the sub-tasks; `doit cook:android` cooks one platform,
`doit "cook:*:mnist"` one model everywhere. The same tasks run as `onnx-cooker cook` from any
project folder (onnx_cooker/build/doitfile.py). See README.md.
"""

from pathlib import Path

from onnx_cooker.build.doitfile import cook_namespace

globals().update(cook_namespace(Path(__file__).resolve().parent))
